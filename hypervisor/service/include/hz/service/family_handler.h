// What the per-VM device and its opcode-family handlers share.
//
// HzDevice frames each request, checks its queue and the session state, and
// hands it to the handler of its opcode family (collectives, checkpoints,
// the event queue, the provider side). A handler owns its family's state,
// talks to one engine interface, and answers with a Reply: at once, or later
// through the PendingTable. When the session ends or the service drains, the
// device asks every handler, through the two hooks below, to answer or
// forget what it has in flight; it knows nothing else of their internals.
#ifndef HZ_SERVICE_FAMILY_HANDLER_H_
#define HZ_SERVICE_FAMILY_HANDLER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "hz/common/status.h"
#include "protocol/harmonaize.h"

namespace vdev {
class Queue;
}

namespace hz::service {

class DeviceLink;
class PendingTable;
class SessionState;

// A handler's answer to a request. Result bytes are already in the result
// space when it returns Ok(result_len).
class Reply {
 public:
  // Success with result_len bytes of result.
  static Reply Ok(uint32_t result_len = 0) { return Reply(HZ_S_OK, result_len, 0, false); }
  // Failure; detail as the opcode's section of SPEC.md defines it (0: none).
  static Reply Error(uint32_t status, uint32_t detail = 0) {
    return Reply(status, 0, detail, false);
  }
  // An engine's answer without result bytes, whether success or failure.
  static Reply WithStatus(uint32_t status) { return Reply(status, 0, 0, false); }
  // The handler took the request into the PendingTable and answers it later.
  static Reply Pending() { return Reply(HZ_S_OK, 0, 0, true); }

  uint32_t status() const { return status_; }
  uint32_t result_len() const { return result_len_; }
  uint32_t detail() const { return detail_; }
  bool ok() const { return status_ == HZ_S_OK; }
  bool pending() const { return pending_; }

 private:
  Reply(uint32_t status, uint32_t result_len, uint32_t detail, bool pending)
      : status_(status), result_len_(result_len), detail_(detail), pending_(pending) {}

  uint32_t status_;
  uint32_t result_len_;
  uint32_t detail_;
  bool pending_;
};

// How a session ends (HzDevice::Teardown).
enum class SessionEnd {
  kNewSession,  // a later HELLO: the rings stay, so requests in flight are still answered
  kReset,       // the rings are gone; the connection and its executor stay
  kDisconnect,  // the connection is gone, or the device is being destroyed
};

// What every family handler of one device shares with it.
struct HandlerContext {
  const SessionState& session;  // granted features, draining
  PendingTable& pending;        // requests answered later
  // Engine callbacks post their completions back through it.
  std::weak_ptr<DeviceLink> link;
  // Called when something the operator's view of the device shows, or the
  // session's durable state (what a crash journal keeps), changed.
  std::function<void()> info_changed;
  // The VM's socket path: its name on this host (notices name VMs by it).
  const std::string& vm;
  // Polls a ring awhile instead of waiting for its kicks
  // (vdev::DeviceContext::PollAwhile); nothing while no VM is connected.
  std::function<void(uint16_t queue, std::chrono::microseconds window)> poll_ring;
};

// One opcode family's handler (or a few related families'). Executor only.
class FamilyHandler {
 public:
  virtual ~FamilyHandler() = default;

  // HZ_F_* bits (1 << bit) the handler can grant; 0 without its engine.
  virtual uint64_t Features() const = 0;

  // The session ends: answer (kNewSession) or forget what is in flight and
  // let go of the guest memory the family holds. Returns once no engine
  // thread touches this session's guest memory on the family's behalf.
  virtual void EndSession(SessionEnd end) = 0;

  // Service shutdown: what waits is answered with HZ_S_ESHUTDOWN (now, or
  // by the engine's own shutdown); later requests never reach the handler.
  virtual void Drain() = 0;

  // A live upgrade hands the session to the next process of the service
  // (vdev::Device's hooks of the same names). The defaults suit a family
  // that keeps nothing beyond the requests in flight.
  //
  // The session is freezing: hand back through queue.Return, unanswered,
  // what would otherwise wait for something the freeze stops (a collective
  // waiting for peers, the event buffers held). Called for every ring.
  virtual void OnQueueFreezing(vdev::Queue& /*queue*/) {}
  // The family's part of the session, once nothing is in flight; an error
  // says why the session cannot be handed over (the upgrade is refused).
  virtual Status SaveState(nlohmann::json* /*out*/) const { return Status::Ok(); }
  // In the next process, after the guest memory and before any ring runs.
  // The state comes from outside the process: check everything.
  virtual Status RestoreState(const nlohmann::json& /*in*/) { return Status::Ok(); }
  // The next process serves the session now: let go without writing
  // anything it now owns (state files, rings).
  virtual void OnHandedOver() {}
  // Crash recovery (vdev/crash_recovery.h): the family's part as the process
  // started after a crash restores it (RestoreState, same format), taken at
  // any time, with requests in flight. What a crash loses is left out, so
  // that the next process reports it instead of waiting for it. The default
  // is SaveState's, or nothing when SaveState refuses now.
  virtual void SaveDurable(nlohmann::json* out) const;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_FAMILY_HANDLER_H_
