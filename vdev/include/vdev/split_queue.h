// The device side of one split virtqueue (virtio 1.x, 2.7): validates what the
// driver put on the avail ring and publishes completions on the used ring.
//
// Everything the driver controls is untrusted: descriptor addresses, lengths,
// flags and next indices, the avail index and ring entries, and the event
// index fields. Each is read once (no double fetch) and checked before use:
//   - a chain walk is bounded by the ring size (loops), an indirect table by
//     its own entry count and a limit; nested indirect tables, zero-length,
//     misaligned or unmapped tables are rejected;
//   - every buffer is translated through the MemoryMap, overflow-safe and
//     split at region boundaries; readable descriptors must precede writable
//     ones; per-direction totals are capped;
//   - a head index outside the ring, a head already in flight, or an avail
//     index more than the ring size ahead marks the ring broken: it is logged
//     once, the error eventfd (if any) is signalled, and nothing more is
//     processed until the ring is restarted. A malformed chain (bad buffer) is
//     completed with length 0 and skipped.
//
// PopBatch and CompleteBatch serve a run of chains per call for busy-polling
// devices; Pop and Complete serve one chain at a time. Both apply the same
// checks (split_queue.cc says how the walk stays cheap).
//
// Memory ordering: the avail index is loaded with acquire before reading ring
// entries; used entries are written plainly and the used index is published
// with a release store; a full fence separates that store from reading the
// driver's suppression fields (used_event / flags), and separates writing
// avail_event from re-reading the avail index.
//
// Not thread-safe: a SplitQueue lives on its connection's executor.
#ifndef VDEV_SPLIT_QUEUE_H_
#define VDEV_SPLIT_QUEUE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "vdev/device.h"
#include "vdev/memory_map.h"
#include "vdev/ring_journal.h"

namespace vdev {

struct QueueLimits {
  // Entries in one indirect table (Linux drivers stay far below this).
  uint32_t max_indirect = 1024;
  // Bytes per direction in one chain; the used length is 32 bits.
  uint64_t max_chain_bytes = 0xffffffffull;
  // Chains one turn (a kick) serves; the rest waits for a turn posted
  // behind whatever else the thread has to do, such as other VMs' kicks on
  // a shared connection thread. 0: twice the ring size.
  uint32_t max_chains_per_turn = 0;
  // Time one turn may run, from its first chain; checked before each later
  // chain, so a chain that runs long ends the turn once it is served. A count
  // alone lets a device whose every chain is expensive hold the thread for
  // that many expensive chains. 0: no time bound.
  std::chrono::nanoseconds max_turn_time{0};
};

// Counters for tests and diagnostics.
struct QueueStats {
  uint64_t popped = 0;
  uint64_t completed = 0;
  uint64_t malformed = 0;
  uint64_t notifications = 0;
  uint64_t suppressed = 0;
  // Turns ended by their budget (count or time) with chains still waiting.
  uint64_t yields = 0;
};

class SplitQueue final : public Queue {
 public:
  static constexpr uint32_t kMaxSize = kMaxRingSize;

  explicit SplitQueue(uint16_t index, QueueLimits limits = {});
  SplitQueue(const SplitQueue&) = delete;
  SplitQueue& operator=(const SplitQueue&) = delete;

  // --- Configuration (vhost-user messages); only while stopped. ---
  // Size must be a power of two in [1, kMaxSize].
  static bool ValidSize(uint32_t size);
  void set_size(uint16_t size) { size_ = size; }
  void set_addresses(uint64_t desc_uva, uint64_t avail_uva, uint64_t used_uva);
  void set_last_avail(uint16_t idx) { last_avail_ = idx; }
  void set_features(bool event_idx, bool indirect);
  // eventfds owned by the caller; -1 for none.
  void set_call_fd(int fd) { call_fd_ = fd; }
  void set_err_fd(int fd) { err_fd_ = fd; }
  // Called (once per turn) when Pop stops because the turn's budget is spent;
  // the owner schedules another turn (a posted kick) so the rest is served
  // after other work. Bounds the work one kick can cause even when the guest
  // makes the device's own writes produce new avail entries.
  void set_on_yield(std::function<void(uint16_t)> fn) { on_yield_ = std::move(fn); }
  // Starts a new turn: up to 2 * size chains (valid or skipped), or
  // max_chains_per_turn when lower, for at most max_turn_time.
  void NewTurn() {
    budget_ = 2u * size_;
    if (limits_.max_chains_per_turn != 0) budget_ = std::min(budget_, limits_.max_chains_per_turn);
    yielded_ = false;
    turn_clock_started_ = false;
  }
  // Busy-poll: ask the driver not to kick (VRING_USED_F_NO_NOTIFY, or simply
  // not re-arming avail_event with EVENT_IDX).
  void set_polling(bool on);
  // Ends busy-poll on a started ring: the driver is asked to kick again.
  // Returns true when chains it made available without kicking, before it
  // could see that, wait (the caller serves them: no kick comes for them).
  bool EndPolling();
  // The driver polls this ring's used index rather than sleeping for an
  // interrupt: it turned interrupts off.
  bool DriverPollsUsed() const;

  // Translates the ring addresses (front-end virtual addresses) through
  // memory and starts the ring. Checks alignment and that each ring lies
  // inside one region. Returns false with *error when it cannot start.
  bool Start(MemoryMapPtr memory, std::string* error);
  // Re-translates a started ring after a memory-table change. A ring that no
  // longer translates is marked broken (returns false).
  bool Remap(MemoryMapPtr memory, std::string* error);
  // Stops the ring: chains popped before are no longer completable. The
  // journal then says the ring is stopped, unless keep_journal: a message a
  // crashed process had started serving is served again, and Recover must
  // still find where that process stood.
  void Stop(bool keep_journal = false);
  // Keeps the ring's in-flight marks in journal (ring_journal.h), memory
  // that outlives the process; nullptr: none. Only while stopped.
  void set_journal(RingJournal* journal) { journal_ = journal; }
  // Instead of Start() after a crash: starts the ring where the journal says
  // the crashed process stood. The next avail entry follows the used index
  // and what is still marked; the marked chains are handed back (as by
  // Return) to be served again first. False with *error when the journal
  // does not fit the ring (the ring is then not started).
  bool Recover(MemoryMapPtr memory, std::string* error);
  // True while the journal describes a run of this ring at its size: from a
  // Start or Recover until a Stop that does not keep it.
  bool journaled() const { return journal_ != nullptr && size_ != 0 && journal_->size == size_; }
  // Stopping in two steps (GET_VRING_BASE waits for the device): while
  // draining, Pop and HasAvailable find nothing, but chains in flight can
  // still be completed and flushed. Stop() or Start() ends it.
  void set_draining() {
    draining_ = true;
    UpdatePopping();
  }
  bool draining() const { return draining_; }
  // Chains popped and not completed yet (returned ones included).
  uint32_t in_flight() const { return in_flight_; }
  // Heads handed back (Return), in the order Pop yields them again.
  const std::deque<uint16_t>& returned() const { return returned_; }
  // A started ring taking over a predecessor's returned heads (live
  // upgrade); false when a head is out of range or repeated.
  bool AdoptReturned(std::span<const uint16_t> heads);

  bool has_addresses() const { return has_addresses_; }
  uint64_t desc_addr() const { return desc_uva_; }
  uint64_t avail_addr() const { return avail_uva_; }
  uint64_t used_addr() const { return used_uva_; }
  bool started() const { return started_; }
  bool broken() const { return broken_; }
  uint16_t last_avail() const { return last_avail_; }
  const QueueStats& stats() const { return stats_; }
  // True when the driver made chains available that were not popped yet.
  bool HasAvailable();

  // --- Queue ---
  uint16_t index() const override { return index_; }
  uint16_t size() const override { return size_; }
  bool Pop(Chain* out) override;
  void Complete(const Chain& chain, uint32_t written) override;
  void Flush() override;
  void Return(const Chain& chain) override;
  size_t PopBatch(std::span<Chain> out) override;
  void CompleteBatch(std::span<const Chain> chains, std::span<const uint32_t> written) override;

 private:
  enum class WalkResult { kOk, kMalformed };
  enum class TakeResult { kTaken, kSkipped, kBadHead };
  struct Desc;    // one descriptor as the walk sees it (split_queue.cc)
  struct Cursor;  // where the walk stands

  bool Translate(const MemoryMap& memory, std::string* error);
  bool CanTake();
  TakeResult Take(uint16_t idx, Chain* c, uint16_t* head);
  TakeResult TakeFrom(uint16_t head, Chain* c, Desc d, uint32_t i, uint32_t taken,
                      uint64_t readable);
  Chain* TakePairs(Chain* c, uint16_t* idx, uint16_t end, uint16_t* bad_head);
  [[gnu::noinline]] TakeResult TakeOther(uint16_t head, Chain* c, Desc d, uint32_t i,
                                         uint32_t taken, uint64_t readable);
  struct Claimant {
    uint8_t* inflight;
    RingJournal* journal;
    uint64_t ring_id;
    const MemoryMap* memory;
  };
  Claimant CurrentClaimant();
  void Claim(uint16_t head, Chain* c, const Claimant& k);
  [[gnu::cold, gnu::noinline]] void BadHead(uint16_t head);
  WalkResult Walk(uint16_t head, Chain* out, Desc d, uint32_t i, uint32_t taken, uint64_t readable);
  WalkResult WalkSlow(uint16_t head, Chain* out, uint32_t visited, uint32_t i, bool fetched,
                      uint64_t addr, uint64_t rest, bool writing);
  static Desc LoadDesc(const uint8_t* table, uint32_t i);
  bool EnterIndirect(uint16_t head, const Desc& d, Cursor* cur);
  WalkResult FinishWalk(uint16_t head, Chain* out, uint32_t num_segments, uint32_t num_readable,
                        uint64_t readable, uint64_t writable);
  [[gnu::cold, gnu::noinline]] WalkResult MalformedLoop(uint16_t head);
  // Checks an indirect descriptor and returns its table, or nullptr (reported).
  const uint8_t* IndirectTable(uint16_t head, bool nested, uint64_t addr, uint32_t len,
                               uint16_t flags);
  // Full MemoryMap translation (buffers outside the cached region, or
  // crossing its end) appended to out; refreshes the cache. A zero-length
  // buffer appends nothing.
  bool TranslateSlow(uint64_t addr, uint32_t len, Chain* out);
  [[gnu::cold]] WalkResult Malformed(uint16_t head, const std::string& why);
  [[gnu::cold, gnu::noinline]] WalkResult MalformedWhy(uint16_t head, const char* why);
  [[gnu::cold, gnu::noinline]] WalkResult MalformedBuffer(uint16_t head, const char* what,
                                                          uint64_t addr, uint32_t len);
  [[gnu::cold, gnu::noinline]] WalkResult MalformedNext(uint16_t head, uint16_t next);
  [[gnu::cold, gnu::noinline]] WalkResult MalformedTotals(uint16_t head, uint64_t readable,
                                                          uint64_t writable);
  // Completes a malformed chain with length 0 and publishes it.
  [[gnu::cold, gnu::noinline]] void SkipMalformed(uint16_t head, Chain* out);
  [[gnu::cold, gnu::noinline]] void NotInFlight(uint16_t head);
  // Pops returned heads into out[0, n) again; returns n.
  [[gnu::cold, gnu::noinline]] size_t PopReturned(std::span<Chain> out);
  [[gnu::cold, gnu::noinline]] void BrokenHead(const char* what, uint16_t head);
  void MarkBroken(const std::string& why);
  // True once the turn has run past max_turn_time (starts its clock first).
  bool TurnTimeSpent();
  // Re-reads the avail index; false when it jumped (ring broken).
  bool RefreshAvail();
  // Arms driver notifications and re-checks for work (EVENT_IDX idiom).
  bool EnableNotifyAndRecheck();
  static void PushUsed(uint8_t* e, uint16_t head, uint32_t len);
  // The used-ring entry that used index idx lands in.
  uint8_t* UsedEntry(uint16_t idx) const;
  // The used ring's avail_event field and the avail ring's used_event
  // (EVENT_IDX).
  uint8_t* AvailEvent() const;
  uint16_t UsedEvent() const;
  // A started ring's avail_event, at last_avail_ (one behind while polling).
  void ArmAvailEvent();
  void UpdatePopping() { popping_ = started_ && !broken_ && !draining_; }
  // Stop's work; the journal is left as it is.
  void StopRing();
  // Start's work up to the used index; the journal is left as it is.
  bool StartRing(MemoryMapPtr memory, std::string* error);
  // Flush's journal step: the marks of completions published in
  // [from, used_idx_) are cleared, then the journal's used index moves.
  void JournalPublished(uint16_t from);
  void SignalCall();

  const uint16_t index_;
  const QueueLimits limits_;
  uint16_t size_ = 0;
  uint64_t desc_uva_ = 0;
  uint64_t avail_uva_ = 0;
  uint64_t used_uva_ = 0;
  bool has_addresses_ = false;
  bool event_idx_ = false;
  bool indirect_ = false;
  bool polling_ = false;
  int call_fd_ = -1;
  int err_fd_ = -1;

  bool started_ = false;
  bool broken_ = false;
  bool draining_ = false;
  bool popping_ = false;  // started_ && !broken_ && !draining_: Pop may find chains
  uint64_t ring_id_ = 0;
  MemoryMapPtr memory_;
  // The region the last translated buffer fell in, a copy out of memory_
  // (valid while memory_ is held; emptied whenever memory_ changes).
  MemoryMap::HostRange hot_;
  // Host views of the three ring parts (valid while memory_ is held).
  uint8_t* desc_ = nullptr;
  uint8_t* avail_ = nullptr;
  uint8_t* used_ = nullptr;

  uint16_t last_avail_ = 0;   // next avail entry to pop
  uint16_t avail_cache_ = 0;  // last avail idx read from the driver
  uint16_t used_idx_ = 0;     // next used entry to write
  uint16_t used_published_ = 0;
  uint16_t signalled_used_ = 0;
  bool signalled_valid_ = false;
  uint16_t avail_event_written_ = 0;
  bool avail_event_valid_ = false;
  RingJournal* journal_ = nullptr;  // in-flight marks that outlive the process
  std::vector<uint8_t> inflight_;   // per head: popped, not completed
  std::deque<uint16_t> returned_;   // in flight, handed back: Pop yields these first
  uint32_t in_flight_ = 0;          // heads set in inflight_
  uint32_t budget_ = 0;             // chains left in this turn
  bool yielded_ = false;
  // The turn's time bound: the clock is first read when the turn takes its
  // first chain (a kick that finds nothing reads no clock).
  bool turn_clock_started_ = false;
  std::chrono::steady_clock::time_point turn_deadline_;
  std::function<void(uint16_t)> on_yield_;
  QueueStats stats_;
  std::vector<Segment> slow_segments_;  // TranslateSlow's scratch list
};

}  // namespace vdev

#endif  // VDEV_SPLIT_QUEUE_H_
