#include "hz/service/scheduler_resources.h"

#include "hz/events/coarse.h"

namespace hz::service {

std::vector<negotiation::Pool> SchedulerResources::Pools() const {
  std::vector<negotiation::Pool> out;
  const std::vector<scheduler::Pool>& pools = sched_->cluster().pools();
  for (uint32_t p = 0; p < pools.size(); ++p) {
    out.push_back(negotiation::Pool{p, scheduler::WireKind(pools[p].kind), pools[p].host});
  }
  return out;
}

uint32_t SchedulerResources::Capacity(uint32_t pool, uint64_t /*window*/) const {
  return sched_->ReservableDevices(pool);
}

Status SchedulerResources::Attach(const TenantId& tenant, uint64_t reservation_id,
                                  const std::vector<negotiation::PoolCount>& devices) {
  std::vector<scheduler::PoolDevices> taken;
  for (const negotiation::PoolCount& pc : devices) taken.push_back({pc.pool, pc.count});
  return sched_->AttachReservation(tenant, reservation_id, taken);
}

Status SchedulerResources::Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                                  std::vector<negotiation::PoolCount>* detached) {
  detached->clear();
  StatusOr<std::vector<scheduler::PoolDevices>> given =
      sched_->DetachReservation(tenant, reservation_id, count);
  if (!given.ok()) return given.status();
  for (const scheduler::PoolDevices& pd : *given) detached->push_back({pd.pool, pd.count});
  return Status::Ok();
}

uint32_t SchedulerResources::DevicesHeld(const TenantId& tenant, hz_device_kind kind) const {
  return sched_->DevicesHeld(tenant, kind);
}

std::optional<uint32_t> SchedulerResources::ReservationDeviceIndex(const TenantId& tenant,
                                                                   uint64_t reservation_id) const {
  StatusOr<std::vector<uint32_t>> indices = sched_->ReservationIndices(tenant, reservation_id);
  if (!indices.ok() || indices->size() != 1) return std::nullopt;
  return indices->front();
}

hz_neg_request ReplacementRequest(const scheduler::DeviceLoss& loss, uint64_t now,
                                  uint64_t duration_s) {
  hz_neg_request req{};
  req.kind = scheduler::WireKind(loss.kind);
  req.count = 1;
  req.locality = loss.locality;
  // As soon as possible. Offer starts are rounded up to the time granularity
  // (SPEC.md §9.2), so a start range of exactly `now` would admit no offer.
  req.earliest_start_s = now;
  req.latest_start_s = now + events::kTimeGranularityS;
  req.duration_s = duration_s;
  return req;
}

}  // namespace hz::service
