// The vhost-user protocol state machine of one front-end connection, with no
// socket in it: the Server feeds it validated-framing Messages and writes back
// the replies it returns; kick eventfds and the busy-poll loop are driven by a
// SessionHost. Unit tests and fuzz targets drive a Session directly.
//
// Ring lifecycle (vhost-user.rst, "Ring states"): rings start stopped and
// disabled; SET_VRING_KICK (fd or NOFD) starts a ring, GET_VRING_BASE stops
// it; SET_VRING_ENABLE toggles enable, and without VHOST_USER_F_PROTOCOL_FEATURES
// in SET_FEATURES every ring is enabled at once. A device sees a queue
// (OnQueueStarted) only while it is started and enabled.
#ifndef VDEV_SESSION_H_
#define VDEV_SESSION_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vdev/device.h"
#include "vdev/memory_map.h"
#include "vdev/message.h"
#include "vdev/session_snapshot.h"
#include "vdev/split_queue.h"
#include "vdev/turn_scheduler.h"

namespace vdev {

struct SessionOptions {
  // Busy-poll every queue (no kicks awaited; the driver is asked not to kick).
  bool busy_poll = false;
  // Busy-poll only these queue indices (in addition to busy_poll).
  std::vector<uint16_t> busy_poll_queues;
  // A front-end may start a ring without a kick eventfd (SET_VRING_KICK with
  // NOFD), asking the back-end to poll it: a thread then spins for as long
  // as the ring runs. Accepted only for rings polled anyway (above) or with
  // this set; otherwise refused (the connection ends unless it asked for a
  // reply), so an untrusted front-end cannot make the back-end spin.
  bool allow_nofd_kick = false;
  // GET_MAX_MEM_SLOTS; also the cap for ADD_MEM_REG.
  uint32_t max_mem_slots = 32;
  // One region / all regions together.
  uint64_t max_region_bytes = 1ull << 40;
  uint64_t max_total_bytes = 1ull << 42;
  // Refuse guest memory that cannot be sealed against shrinking: a
  // front-end that truncates an unsealed file under the mapping crashes the
  // back-end with SIGBUS. false trusts the front-end as the back-end itself
  // (memory_map.cc says which memory is sealable).
  bool require_sealed_memory = true;
  QueueLimits queue_limits;
  // GET_VRING_BASE on a ring whose chains the device still holds: how long
  // the reply waits for their completions (the spec has the back-end drain
  // in-flight requests before answering). Zero answers at once.
  std::chrono::milliseconds stop_drain_timeout{1000};
  // Sessions that share a thread and a scheduler take kicked turns by
  // weighted time (turn_scheduler.h): each turn is charged to share_key (an
  // opaque name, such as the tenant a VM belongs to; empty: the session
  // alone) divided by share_weight. Without one, turns run in the order
  // they come. Busy-polled rings are not scheduled: they spin regardless.
  std::shared_ptr<TurnScheduler> turn_scheduler;
  std::string share_key;
  uint32_t share_weight = 1;
};

// What a Session needs from its event loop. Called on the session's executor.
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  // Runs fn later on the session's executor (from any thread).
  virtual void Post(std::function<void()> fn) = 0;
  // Starts calling Session::Kick(queue) whenever fd (a kick eventfd owned by
  // the session) becomes readable, after draining it.
  virtual void WatchKick(uint16_t queue, int fd) = 0;
  // Stops watching; the fd is closed by the session afterwards.
  virtual void UnwatchKick(uint16_t queue) = 0;
  // Turns the busy-poll loop (repeated Session::Poll) on or off.
  virtual void SetPolling(bool on) = 0;
  // Writes a back-end request on the SET_BACKEND_REQ_FD channel fd.
  virtual bool SendBackendMessage(int fd, const std::vector<uint8_t>& bytes);
  // The device's durable state changed (DeviceContext::StateChanged).
  virtual void StateChanged() {}
};

class Session final : public DeviceContext {
 public:
  struct Result {
    std::vector<uint8_t> reply;  // empty: nothing to send
    bool close = false;          // protocol violation: drop the connection
    // GET_VRING_BASE is waiting for the device's in-flight chains: read no
    // further message until FinishStop() produced the reply. Call it once
    // StopDrained() or after options().stop_drain_timeout.
    bool stop_pending = false;
  };

  Session(std::unique_ptr<Device> device, SessionHost* host, SessionOptions options,
          std::string name);
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Calls Device::OnConnect; call once before Handle.
  void Start();
  // Handles one framed message (from MessageReader).
  Result Handle(Message msg);
  // After a crash: handles a message the crashed process had read whole and
  // may have served in part (crash_recovery.h). A ring it starts that the
  // crashed process had started already goes on where that process stood
  // (its ring journal), not at the front-end's base: chains taken then are
  // neither lost nor served twice.
  Result Replay(Message msg);
  // A kick eventfd fired for queue: runs its turn, or with a turn scheduler
  // asks for one (run now if the thread is free, else posted when due).
  void Kick(uint16_t queue);
  // One busy-poll pass over the polled queues; returns true if any had work.
  bool Poll();
  // Some ring is busy-polled for as long as it runs (SessionOptions, or a
  // ring without a kick eventfd), so the poll loop may keep its thread;
  // false while only rings polled awhile (PollAwhile) are, whose loop
  // shares the thread with the other sessions on it.
  bool PollsForGood() const { return polls_for_good_; }
  // The connection is gone: stops every ring and tells the device.
  void Disconnect();
  // A GET_VRING_BASE reply waits for in-flight chains (Result::stop_pending).
  bool StopPending() const { return pending_stop_ >= 0; }
  // That GET_VRING_BASE, as a front-end sends it: the crash journal holds it
  // as a message not served, so that a process started after a crash serves
  // it again (Replay) and the front-end gets its reply.
  std::vector<uint8_t> PendingStopRequest() const;
  // True when that ring has no chain in flight any more.
  bool StopDrained() const;
  // Stops the pending ring and returns the GET_VRING_BASE reply; chains still
  // in flight are abandoned (their late completions are ignored).
  std::vector<uint8_t> FinishStop();
  const SessionOptions& options() const { return options_; }

  // --- Live upgrade (session_snapshot.h), on the executor. ---
  // Stops serving the rings: kicks are no longer watched, polling stops and
  // no turn runs; chains in flight still complete. A successor re-reads the
  // avail rings, so no kick that arrives meanwhile is lost.
  void Freeze();
  // Serves again (the hand-over did not happen), including anything the
  // driver made available meanwhile.
  void Thaw();
  bool frozen() const { return frozen_; }
  // No chain in flight and no GET_VRING_BASE waiting: the state can be taken.
  bool Quiescent() const;
  // Writes a frozen, quiescent session into *out, duplicating its
  // descriptors into fds.
  Error Export(SessionRecord* out, SnapshotFds* fds);
  // Rebuilds the session from a predecessor's record, right after Start()
  // and before any message. fds are the snapshot's; the descriptors the
  // record names are taken from it. With recover, the record is a crashed
  // predecessor's journal: each started ring goes on from its ring journal
  // (SplitQueue::Recover) and the device gets RecoverState. On error the
  // session is unusable (close the connection).
  Error Restore(const SessionRecord& record, std::vector<UniqueFd>& fds, bool recover = false);

  // --- Crash recovery (crash_recovery.h), on the executor. ---
  // Keeps ring i's in-flight marks in rings[i]; only before Start.
  void SetRingJournals(const std::vector<RingJournal*>& rings);
  // Writes the session as it stands into *out, naming its descriptors in
  // fds: what a process started after a crash rebuilds it from.
  void Describe(SessionRecord* out, FdIndex* fds) const;
  // A successor serves this session now: let go of its descriptors and
  // rings without writing to them, and tell the device (OnHandedOver).
  void Abandon();

  // DeviceContext. Post and Memory are safe from any thread;
  // NotifyConfigChanged belongs on the executor (Post it from elsewhere).
  void Post(std::function<void()> fn) override;
  MemoryMapPtr Memory() const override;
  void NotifyConfigChanged() override;
  void StateChanged() override { host_->StateChanged(); }
  void PollAwhile(uint16_t queue, std::chrono::microseconds window) override;

  // Introspection (tests, logs).
  uint16_t num_queues() const { return static_cast<uint16_t>(queues_.size()); }
  const SplitQueue& queue(uint16_t i) const { return *queues_[i].q; }
  bool queue_running(uint16_t i) const { return queues_[i].delivered; }
  uint64_t OfferedFeatures() const;
  uint64_t OfferedProtocolFeatures() const;
  Device& device() { return *device_; }

 private:
  // Describe without the device's state: features, memory, rings and their
  // descriptors (a hand-over adds the device's full state, a journal its
  // durable part).
  void DescribeRings(SessionRecord* out, FdIndex* fds) const;
  struct QueueState {
    std::unique_ptr<SplitQueue> q;
    UniqueFd kick;
    UniqueFd call;
    UniqueFd err;
    bool watching = false;  // kick fd handed to the host
    bool started = false;   // spec state: kick received, not stopped since
    bool enabled = false;
    bool delivered = false;    // device was given OnQueueStarted
    bool nofd_kick = false;    // SET_VRING_KICK with NOFD (allowed): poll this ring
    bool turn_wanted = false;  // in wanting_turns_
    // PollAwhile: polled until poll_window passes after last_work.
    bool polled_awhile = false;
    std::chrono::microseconds poll_window{0};
    std::chrono::steady_clock::time_point last_work;
  };

  Error Dispatch(Message& msg, std::vector<uint8_t>* reply);
  Error SetMemTable(Message& msg);
  Error AddMemReg(Message& msg);
  Error RemMemReg(const Message& msg);
  Error InstallMemory(std::vector<std::shared_ptr<MappedRegion>> regions);
  Error SetVringFd(Message& msg);
  Error CheckIndex(uint32_t index) const;
  void GetConfig(const Message& msg, std::vector<uint8_t>* reply);
  Error SetConfig(const Message& msg);
  void StopQueue(uint16_t i, bool keep_journal = false);
  void StopAllQueues();
  void Reconcile(uint16_t i);
  void UpdatePolling();
  // Restore's steps.
  Error RestoreMemory(const SessionRecord& record, std::vector<UniqueFd>& fds);
  Error RestoreQueue(uint16_t i, const QueueRecord& record, std::vector<UniqueFd>& fds,
                     bool recover);
  // Starts restored ring i: where the record says, or from its ring journal.
  Error StartRestoredQueue(uint16_t i, const QueueRecord& record, bool recover);
  bool Polled(uint16_t i) const;
  // Ring i asks to be kicked again (PollAwhile's window ran out, or the
  // ring stops or freezes); serves what came meanwhile unless `serve` is
  // false. The caller updates the polled list.
  void EndPollingAwhile(uint16_t i, bool serve);
  bool Negotiated(uint64_t protocol_bit) const { return acked_protocol_ & (1ull << protocol_bit); }
  // With a turn scheduler: queue i wants a turn; it runs now if the thread
  // is free, else when the scheduler resumes this session.
  void WantTurn(uint16_t i);
  // Runs the turn the scheduler let this session have: one wanting ring's.
  void RunTurn();

  std::unique_ptr<Device> device_;
  SessionHost* host_;
  const SessionOptions options_;
  const std::string name_;
  std::vector<QueueState> queues_;
  MemoryMapPtr memory_;  // written on the executor, under memory_mu_
  mutable std::mutex memory_mu_;
  UniqueFd backend_fd_;
  uint64_t acked_features_ = 0;
  bool features_set_ = false;
  uint64_t acked_protocol_ = 0;
  uint8_t status_ = 0;
  bool polling_ = false;
  std::vector<uint16_t> polled_;  // delivered queues the busy-poll loop serves
  bool polls_for_good_ = false;   // some of them are Polled(), not awhile
  bool ever_started_ = false;
  int pending_stop_ = -1;  // queue whose GET_VRING_BASE reply waits, or -1
  bool disconnected_ = false;
  bool frozen_ = false;     // Freeze(): a hand-over is under way
  bool replaying_ = false;  // inside Replay()
  // Turn scheduling (options_.turn_scheduler); reset on disconnect.
  std::unique_ptr<TurnScheduler::Member> turns_;
  std::deque<uint16_t> wanting_turns_;  // rings with a turn waiting, in order
  bool in_turn_ = false;
};

}  // namespace vdev

#endif  // VDEV_SESSION_H_
