// COMM_UID, COMM_INIT, COMM_DESTROY, COMM_ABORT and the collectives (SPEC
// §7.3, §7.4) of one device, on a CollBackend. The handler holds the
// session's communicator handles; a collective's slices resolve to host
// spans through the session's region table (or the chain itself, for inline
// data), and the pinned regions stay pinned until the engine is done.
//
// COMM_INIT and the collectives complete on engine threads; their answers
// come back through the device's executor (DeviceLink), so every piece of
// state here is touched on the executor only.
#ifndef HZ_SERVICE_COLL_HANDLER_H_
#define HZ_SERVICE_COLL_HANDLER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "hz/service/coll_backend.h"
#include "hz/service/config.h"
#include "hz/service/family_handler.h"
#include "hz/service/region_table.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"
#include "vdev/device.h"

namespace hz::service {

struct DeviceInfo;

class CollectiveHandler : public FamilyHandler {
 public:
  // rejoined: runs on the executor once the communicators a live upgrade
  // handed over have all re-formed (or failed to).
  CollectiveHandler(CollBackend* backend, const HandlerContext& ctx, const RegionTable& regions,
                    const DeviceLimits& limits, const Tenant& tenant,
                    std::function<void()> rejoined);

  uint64_t Features() const override;
  // The session's ranks leave their communicators, which aborts them for
  // the other ranks; a rank still joining fails at once (kNewSession).
  void EndSession(SessionEnd end) override;
  void Drain() override;
  // A live upgrade (coll_handler_state.cc). Collectives that have not
  // started are withdrawn from the engine and go back to their ring; the
  // handles go to the next process, whose engine re-forms each communicator
  // once all its ranks are back, at the same sequence number.
  void OnQueueFreezing(vdev::Queue& queue) override;
  Status SaveState(nlohmann::json* out) const override;
  Status RestoreState(const nlohmann::json& in) override;
  // The next process serves the session: this one lets go of its members
  // quietly (CollBackend::HandOver).
  void OnHandedOver() override;
  // Communicators handed over are still re-forming: the device takes no
  // request until they are, so none finds its handle half made.
  bool rejoining() const { return rejoining_ != 0; }

  Reply HandleComm(const vdev::Queue& queue, const Request& req);
  Reply HandleCollective(const vdev::Queue& queue, const Request& req);

  // The session's communicator handles.
  void AddInfo(DeviceInfo* info) const;
  // Crash recovery: every handle is lost with the engine that served it;
  // the next process fails their requests (EABORTED).
  void SaveDurable(nlohmann::json* out) const override;
  // Changes whenever a handle is made or dropped.
  std::pair<uint64_t, size_t> handles() const { return {next_handle_, comms_.size()}; }

 private:
  struct Collective;
  struct CommEntry {
    MemberPtr member;  // null while re-forming after a live upgrade, or lost
    // Handed over by a live upgrade, but its communicator did not re-form
    // in this process: its operations fail EABORTED (SPEC §7.3.5).
    bool lost = false;
    uint32_t in_flight = 0;  // collectives posted on this handle
    // COMM_ABORT requests waiting for the handle's operations (SPEC §7.3.4).
    std::vector<uint64_t> aborts;
    // Created with HZ_COMM_F_LOW_LATENCY: its operations keep the ring they
    // came on and the connection thread polled (PollFor, within the
    // tenant's window).
    bool low_latency = false;
  };

  Reply CommUid(const Request& req);
  Reply CommInit(const vdev::Queue& queue, const Request& req);
  Reply CommDestroyOrAbort(const vdev::Queue& queue, const Request& req);
  using MemberDone = std::function<void(Status, MemberPtr)>;
  // An engine callback for a membership (COMM_INIT, a rejoin) that runs
  // done on the executor, or, when the device is gone, leaves again.
  MemberDone OnExecutor(MemberDone done);
  void OnInitDone(uint64_t id, bool low_latency, Status status, MemberPtr member);
  void OnOpDone(Collective& op, Status status);
  // A low-latency communicator's operation on `queue` was posted or
  // completed: its rank's next one is likely to follow closely.
  void PollFor(const CommEntry& entry, uint16_t queue) const;
  // Answers the COMM_ABORTs waiting for entry's operations.
  void ReleaseAborts(CommEntry& entry, const Reply& reply);
  // A collective the engine withdrew unstarted goes back to its ring.
  void ReturnWithdrawn(Collective& op);
  void OnRejoined(uint64_t handle, Status status, MemberPtr member);

  CollBackend* const backend_;  // null: collectives are not offered
  const HandlerContext ctx_;
  const RegionTable& regions_;
  const DeviceLimits& limits_;
  const Tenant& tenant_;
  const std::function<void()> rejoined_;
  std::map<uint64_t, CommEntry> comms_;  // handle -> membership
  uint64_t next_handle_ = 1;
  size_t rejoining_ = 0;  // handles re-forming after a live upgrade
};

}  // namespace hz::service

#endif  // HZ_SERVICE_COLL_HANDLER_H_
