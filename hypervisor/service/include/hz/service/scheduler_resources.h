// Where the scheduler and the negotiation engine meet. Neither knows the
// other, so the dependencies run one way: the service depends on both, and
// both only on hypervisor/common and the event vocabulary. The service
// alone translates:
//  - SchedulerResources is the scheduler seen as the engine's
//    ResourceProvider (capacity, attach and detach of reservations);
//  - ReplacementRequest turns what a device failure took from a tenant
//    (scheduler::DeviceLoss) into the request of a replacement offer.
#ifndef HZ_SERVICE_SCHEDULER_RESOURCES_H_
#define HZ_SERVICE_SCHEDULER_RESOURCES_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "hz/negotiation/resource_provider.h"
#include "hz/scheduler/scheduler.h"
#include "protocol/harmonaize.h"

namespace hz::service {

// The engine runs under the provider's lock, and a device leaving a VM
// waits for its guest (up to the attacher's detach_wait). So Detach takes
// the devices off the reservation at once (Scheduler::
// BeginDetachReservation) and they leave the VM on a thread of this
// object's: neither the provider's lock nor the caller's thread waits for
// a guest. Destruction waits for the detaches under way.
class SchedulerResources : public negotiation::ResourceProvider {
 public:
  // `sched` must outlive this object.
  explicit SchedulerResources(scheduler::Scheduler* sched);
  ~SchedulerResources() override;
  SchedulerResources(const SchedulerResources&) = delete;
  SchedulerResources& operator=(const SchedulerResources&) = delete;

  std::vector<negotiation::Pool> Pools() const override;
  // Reservations are not planned per window on this host: every window has
  // the pool's reservable devices.
  uint32_t Capacity(uint32_t pool, uint64_t window) const override;
  Status Attach(const TenantId& tenant, uint64_t reservation_id,
                const std::vector<negotiation::PoolCount>& devices) override;
  Status Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                std::vector<negotiation::PoolCount>* detached) override;
  uint32_t DevicesHeld(const TenantId& tenant, hz_device_kind kind) const override;
  std::optional<uint32_t> ReservationDeviceIndex(const TenantId& tenant,
                                                 uint64_t reservation_id) const override;

  // Until every detach of the tenant's begun so far has finished: its
  // devices left its VM, or stay kept (Scheduler::FinishDetachReservation).
  void WaitForDetaches(const TenantId& tenant);
  // The same for every tenant.
  void WaitForDetaches();

 private:
  // How many guests may be waited for at once. Each wait ends within
  // detach_wait; one tenant's slow guest holds one thread at most that long.
  static constexpr size_t kDetachThreads = 2;

  scheduler::Scheduler* sched_;
  boost::asio::thread_pool detaches_{kDetachThreads};
  std::mutex mu_;
  std::condition_variable finished_;
  std::map<TenantId, size_t> under_way_;  // detaches begun, not finished; guarded by mu_
};

// How long a replacement holds its device when the lost device's allocation
// has no reservation end (a direct operator allocation).
inline constexpr uint64_t kReplacementDurationS = 3600;

// The replacement request after `loss` (SPEC.md §9.7): one device of the
// lost kind with the lost allocation's locality, as soon as possible.
hz_neg_request ReplacementRequest(const scheduler::DeviceLoss& loss, uint64_t now,
                                  uint64_t duration_s = kReplacementDurationS);

}  // namespace hz::service

#endif  // HZ_SERVICE_SCHEDULER_RESOURCES_H_
