// The devices of negotiated reservations: the negotiation engine books them
// by pool, and the scheduler places, attaches and detaches them. A detach
// runs in two steps (scheduler.h), since the engine decides it under the
// service's lock and the guest may take its time to let go.
#include <algorithm>
#include <map>
#include <utility>

#include "hz/scheduler/scheduler.h"
#include "spdlog/spdlog.h"

namespace hz::scheduler {

uint32_t Scheduler::ReservableDevices(uint32_t pool) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool >= cluster_.pools().size()) return 0;
  const Pool& p = cluster_.pools()[pool];
  uint32_t n = 0;
  for (uint32_t i : p.devices) {
    const DeviceRef d{p.host, i};
    if (allocator_.IsFailed(d)) continue;
    const uint64_t owner = allocator_.Owner(d);
    if (owner == 0 || IsReservationAllocation(owner)) ++n;
  }
  return n;
}

Status Scheduler::AttachReservation(const TenantId& id, uint64_t reservation_id,
                                    const std::vector<PoolDevices>& devices) {
  const std::string& tenant = id.name();
  std::unique_lock<std::mutex> lock(mu_);
  if (cordoned_) return Status::Busy("the host is under maintenance: no new placements");
  if (reservations_.count(reservation_id)) {
    return Status::State("reservation " + std::to_string(reservation_id) + " already attached");
  }
  std::vector<DeviceRef> chosen;
  Request req;
  req.locality = HZ_LOC_SAME_HOST;
  for (const PoolDevices& pc : devices) {
    if (pc.pool >= cluster_.pools().size()) return Status::InvalidArgument("unknown pool");
    const Pool& p = cluster_.pools()[pc.pool];
    uint32_t left = pc.count;
    uint32_t leaving = 0;
    for (uint32_t i : p.devices) {
      const DeviceRef d{p.host, i};
      if (allocator_.IsFailed(d)) continue;
      const uint64_t owner = allocator_.Owner(d);
      if (owner == 0 && left > 0) {
        chosen.push_back(d);
        --left;
      } else if (IsLeaving(d)) {
        ++leaving;
      }
    }
    if (left > 0 && left <= leaving) {
      return Status::TryAgain("pool " + std::to_string(pc.pool) +
                              ": devices are still leaving another VM");
    }
    if (left > 0) return Status::State("pool " + std::to_string(pc.pool) + " has too few devices");
    (p.kind == DeviceKind::kGpu ? req.gpus : req.nics) += pc.count;
  }
  Allocation a;
  Status s = allocator_.AllocateDevices(tenant, req, chosen, &a);
  if (!s.ok()) return s;
  SeedLocked(tenant);
  reservations_[reservation_id] = a.id;
  std::vector<DeviceRef> attached;
  if (!(s = Persist()).ok() || !(s = AttachDevices(tenant, a.devices, &attached)).ok()) {
    RollBackAttach(lock, a.id, attached);
    return s;
  }
  return Status::Ok();
}

StatusOr<ReservationDetach> Scheduler::BeginDetachReservation(const TenantId& id,
                                                              uint64_t reservation_id,
                                                              uint32_t count) {
  const std::string& tenant = id.name();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) {
    return Status::State("reservation " + std::to_string(reservation_id) + " is not attached");
  }
  const uint64_t aid = it->second;
  const Allocation* a = allocator_.Find(aid);
  if (!a || a->tenant != tenant) return Status::State("reservation of another tenant");
  // Devices already on their way out (an earlier release of some of them)
  // are no longer the reservation's.
  std::vector<DeviceRef> held;
  for (DeviceRef d : a->devices) {
    if (!IsLeaving(d)) held.push_back(d);
  }
  if (count > held.size()) {
    return Status::InvalidArgument("reservation holds fewer than " + std::to_string(count) +
                                   " devices");
  }
  // The devices with the highest tenant-visible indices go first (§7.8.5).
  const TopologySummary summary = SummaryLocked(tenant);
  std::vector<std::pair<uint32_t, DeviceRef>> ranked;
  for (DeviceRef d : held) ranked.push_back({summary.IndexOf(d), d});
  std::sort(ranked.rbegin(), ranked.rend());
  ReservationDetach detach;
  detach.reservation_id = reservation_id;
  detach.allocation_id = aid;
  std::map<uint32_t, uint32_t> per_pool;
  for (uint32_t i = 0; i < count; ++i) {
    detach.devices.push_back(ranked[i].second);
    per_pool[cluster_.PoolOf(ranked[i].second)]++;
  }
  for (auto [pool, n] : per_pool) detach.pools.push_back({pool, n});
  MarkLeaving(aid, detach.devices);
  return detach;
}

Status Scheduler::FinishDetachReservation(const ReservationDetach& detach) {
  std::unique_lock<std::mutex> lock(mu_);
  // The allocation stays while its devices leave: a release or removal of
  // it meanwhile gets kBusy, and a failure of one of them waits.
  if (Status s = LeaveVmUnlocked(lock, detach.allocation_id, detach.devices); !s.ok()) {
    KeepReservationDevices(detach, s);
    return s;
  }
  for (DeviceRef d : detach.devices) allocator_.RemoveDevice(d);
  if (!allocator_.Find(detach.allocation_id)) reservations_.erase(detach.reservation_id);
  return Persist();
}

void Scheduler::StopWaitingForGuests() {
  if (attacher_ != nullptr) attacher_->StopWaiting();
}

void Scheduler::KeepReservationDevices(const ReservationDetach& detach, const Status& error) {
  Allocation kept;
  if (Status s = allocator_.SplitOff(detach.devices, &kept); !s.ok()) {
    // Cannot happen (nothing else changes a reservation's devices while
    // they leave); they stay with the reservation then, still never free.
    spdlog::error("scheduler: devices that did not leave the VM stay with reservation {}: {}",
                  detach.reservation_id, s.ToString());
    KeepAfterFailedDetach(detach.allocation_id, error);
    return;
  }
  if (!allocator_.Find(detach.allocation_id)) reservations_.erase(detach.reservation_id);
  KeepAfterFailedDetach(kept.id, error);
  if (Status p = Persist(); !p.ok()) {
    spdlog::error("scheduler: kept devices not persisted: {}", p.ToString());
  }
}

StatusOr<std::vector<uint32_t>> Scheduler::ReservationIndices(const TenantId& id,
                                                              uint64_t reservation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return Status::NotFound("reservation is not attached");
  const Allocation* a = allocator_.Find(it->second);
  if (!a || a->tenant != id.name()) return Status::NotFound("reservation of another tenant");
  const TopologySummary summary = SummaryLocked(a->tenant);
  std::vector<uint32_t> indices;
  for (DeviceRef d : a->devices) indices.push_back(summary.IndexOf(d));
  return indices;
}

}  // namespace hz::scheduler
