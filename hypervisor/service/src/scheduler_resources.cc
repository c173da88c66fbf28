#include "hz/service/scheduler_resources.h"

#include <boost/asio/post.hpp>

#include "hz/common/thread_priority.h"
#include "hz/events/coarse.h"
#include "spdlog/spdlog.h"

namespace hz::service {

SchedulerResources::SchedulerResources(scheduler::Scheduler* sched) : sched_(sched) {}

SchedulerResources::~SchedulerResources() {
  // The service is stopping: a detach under way does not wait for its guest
  // (up to detach_wait each), and every detach begun is finished; devices a
  // guest did not let go of stay with it, recorded (detach_error).
  sched_->StopWaitingForGuests();
  detaches_.join();
}

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
  StatusOr<scheduler::ReservationDetach> begun =
      sched_->BeginDetachReservation(tenant, reservation_id, count);
  if (!begun.ok()) return begun.status();
  for (const scheduler::PoolDevices& pd : begun->pools) detached->push_back({pd.pool, pd.count});
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++under_way_[tenant];
  }
  boost::asio::post(detaches_, [this, detach = std::move(*begun), tenant] {
    // The pool's threads are Asio's: each is named by the first detach it runs.
    NameThisThread("hz-detach");
    // A failure keeps the devices out of every allocation but an operator's
    // (Scheduler::FinishDetachReservation); the tenant no longer has them.
    Status s = sched_->FinishDetachReservation(detach);
    if (!s.ok()) {
      spdlog::warn("event=reservation_detach_failed tenant={} reservation={} error=\"{}\"",
                   tenant.name(), detach.reservation_id, s.ToString());
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--under_way_[tenant] == 0) under_way_.erase(tenant);
    finished_.notify_all();
  });
  return Status::Ok();
}

void SchedulerResources::WaitForDetaches(const TenantId& tenant) {
  std::unique_lock<std::mutex> lock(mu_);
  finished_.wait(lock, [&] { return under_way_.count(tenant) == 0; });
}

void SchedulerResources::WaitForDetaches() {
  std::unique_lock<std::mutex> lock(mu_);
  finished_.wait(lock, [this] { return under_way_.empty(); });
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
