// REGION_REGISTER and REGION_UNREGISTER (SPEC §7.2) on one device's
// RegionTable.
//
// A registration's cost grows with its extents (up to max_extents of them,
// each translated, sorted and checked against the VM's other regions), and
// the connection thread it arrives on serves other tenants' VMs too. So,
// where the service gives it a background executor, the handler reads the
// extents, prepares the registration there and installs it back on the
// connection thread, which then only swaps a pointer. One registration of
// a VM is prepared at a time, in the order they arrived: each is checked
// against the regions of those before it. An unregistration runs at once.
#ifndef HZ_SERVICE_REGION_HANDLER_H_
#define HZ_SERVICE_REGION_HANDLER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "hz/service/family_handler.h"
#include "hz/service/region_table.h"
#include "hz/service/request.h"
#include "vdev/device.h"

namespace hz::service {

// Runs work off the connection threads; null: inline.
using BackgroundExecutor = std::function<void(std::function<void()>)>;

class RegionHandler : public FamilyHandler {
 public:
  // memory: the connection's current guest memory map (null: the one the
  // request's chain was translated in).
  RegionHandler(const HandlerContext& ctx, RegionTable& regions, const DeviceLimits& limits,
                BackgroundExecutor background, std::function<vdev::MemoryMapPtr()> memory);

  uint64_t Features() const override { return 0; }
  // Registrations waiting are answered EABORTED (a new session, SPEC
  // §2.7.1) or forgotten with their ring; the one being prepared is dropped
  // when it comes back.
  void EndSession(SessionEnd end) override;
  void Drain() override;
  // The session's regions, with their ids, in the next process.
  Status SaveState(nlohmann::json* out) const override;
  Status RestoreState(const nlohmann::json& in) override;

  Reply Handle(const vdev::Queue& queue, const Request& req);

 private:
  struct PendingRegister;

  Reply Unregister(const Request& req);
  Reply Register(const vdev::Queue& queue, const Request& req);
  // Prepares the first waiting registration in the background.
  void StartNext();
  // Back on the executor: installs it and answers, or prepares it again.
  void OnPrepared(uint64_t pending_id, RegionTable::Prepared prepared);

  const HandlerContext ctx_;
  RegionTable& regions_;
  const DeviceLimits& limits_;
  const BackgroundExecutor background_;
  const std::function<vdev::MemoryMapPtr()> memory_;
  // Executor state: registrations in arrival order (also in the pending
  // table, which answers them) and whether the first is being prepared.
  std::deque<std::shared_ptr<PendingRegister>> waiting_;
  bool preparing_ = false;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_REGION_HANDLER_H_
