// Replacement capacity for the jobs a notice will move, negotiated by the
// project's real NegotiationEngine on simulated time, over the emulated
// cluster's allocator.
//
// At a notice the provider opens a replacement negotiation on behalf of each
// job the event will stop (OfferReplacement, SPEC.md §9.7: the provider is
// the one taking the devices, and it knows first, when it drains them) and
// takes a decision point. The engine publishes the offer (NEGOTIATION/
// OFFER_MADE) to the job's tenant, on the event bus, and the tenant accepts
// it when it reads the notice; an offer nobody accepts expires on simulated
// time. A started reservation is
// where the job restarts when the event stops it: its devices become the
// job's allocation and the tenant releases the reservation (NEG_RELEASE).
//
// Tenants: one per job (TenantOf, notice_bus.h).
#ifndef HZ_EXPERIMENT_SRC_REPLACEMENTS_H_
#define HZ_EXPERIMENT_SRC_REPLACEMENTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hz/events/event_spec.h"
#include "hz/negotiation/negotiation.h"
#include "hz/negotiation/resource_provider.h"
#include "hz/scheduler/allocator.h"
#include "notice_bus.h"

namespace hz::experiment {

struct ReplacementCounts {
  uint64_t offers_made = 0;
  uint64_t offers_accepted = 0;
  uint64_t honoured = 0;   // a moved job restarted on its reservation
  uint64_t fallbacks = 0;  // a moved job for which one was sought queued instead
};

// The emulated cluster as the engine's ResourceProvider, and the sink the
// engine publishes to. Offered and reserved devices are held in the
// allocator from the offer on (a hold), so the queue cannot take what the
// engine booked; a pool's capacity is its healthy devices that are free or
// held, in every window, as the service's SchedulerResources counts them.
class Replacements final : public negotiation::ResourceProvider, public events::EventSink {
 public:
  // Takes these free devices into a new allocation (0: could not) and gives
  // an allocation back; the simulator keeps its count of allocated devices.
  using TakeFn = std::function<uint64_t(const std::vector<scheduler::DeviceRef>&)>;
  using GiveFn = std::function<void(uint64_t)>;

  // What the engine publishes goes on to `tenants` (may be null).
  Replacements(const scheduler::Allocator& alloc, TakeFn take, GiveFn give,
               events::EventSink* tenants, uint64_t seed);
  ~Replacements() override;

  struct Offered {
    uint64_t offer = 0;  // 0: none (refused, or no capacity)
    double expires = 0;  // when it lapses unaccepted
  };
  // The provider's replacement offer for job `job` (`gpus` on one host),
  // whose devices a notice heard at `now` takes at `deadline`.
  Offered Offer(size_t job, uint32_t gpus, double now, double deadline);

  struct Accepted {
    uint64_t reservation = 0;  // 0: the offer was gone
    double start = 0;          // when its devices are attached
  };
  Accepted Accept(size_t job, uint64_t offer, double now);

  // The allocation of a started reservation whose devices are all healthy
  // and held, else 0.
  uint64_t Ready(uint64_t reservation);
  // The job runs on the reservation's allocation now: it is the job's, and
  // the tenant releases the reservation.
  void Consume(size_t job, uint64_t reservation, double now);
  // The tenant has no more use for it (its job finished).
  void Release(size_t job, uint64_t reservation, double now);
  // Time passes: offers expire, reservations start, end or are revoked.
  void Tick(double now);
  // Reservations the engine took back or ended since the last call.
  std::vector<uint64_t> TakeLost();

  const ReplacementCounts& counts() const { return counts_; }
  ReplacementCounts& counts() { return counts_; }

  // ResourceProvider.
  std::vector<negotiation::Pool> Pools() const override;
  uint32_t Capacity(uint32_t pool, uint64_t window) const override;
  Status Attach(const TenantId& tenant, uint64_t reservation_id,
                const std::vector<negotiation::PoolCount>& devices) override;
  Status Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                std::vector<negotiation::PoolCount>* detached) override;
  uint32_t DevicesHeld(const TenantId& tenant, hz_device_kind kind) const override;

  // EventSink: what the engine publishes to the tenants; the provider
  // lets the devices of an offer or reservation the engine dropped go.
  Status Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq) override;

 private:
  struct Hold {
    uint64_t allocation = 0;  // 0: its devices are gone
    std::vector<negotiation::PoolCount> devices;
    bool started = false;
  };

  void Dropped(const events::EventSpec& spec);
  uint64_t TakeHold(const std::vector<negotiation::PoolCount>& devices);
  // A held device that failed is swapped for a free one of its pool, as the
  // scheduler picks a pool's devices when it attaches a reservation.
  void Refresh(Hold& hold);
  void DropHold(uint64_t id);
  void Rekey(uint64_t from, uint64_t to);

  const scheduler::Allocator& alloc_;
  TakeFn take_;
  GiveFn give_;
  events::EventSink* tenants_;
  std::unique_ptr<negotiation::NegotiationEngine> engine_;
  std::map<uint64_t, Hold> holds_;       // offer or reservation id -> its hold
  std::set<uint64_t> held_allocations_;  // their allocations
  std::set<uint64_t> lost_;
  uint64_t accepting_ = 0;  // the offer being accepted (its reservation attaches inside Accept)
  bool releasing_ = false;  // Detach on the tenant's own release: nothing is lost
  ReplacementCounts counts_;
};

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_SRC_REPLACEMENTS_H_
