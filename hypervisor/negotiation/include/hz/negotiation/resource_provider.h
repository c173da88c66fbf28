// What the negotiation engine needs from whoever owns the devices: how many
// devices each pool has in each reservation window, attach/detach, and how
// many devices a tenant holds. A pool is one locality group of one device
// kind on one host. The service implements it over the scheduler; tests use
// an in-memory inventory.
#ifndef HZ_NEGOTIATION_RESOURCE_PROVIDER_H_
#define HZ_NEGOTIATION_RESOURCE_PROVIDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "protocol/harmonaize.h"

namespace hz::negotiation {

struct Pool {
  uint32_t id = 0;
  hz_device_kind kind = HZ_DEV_GPU;
  uint32_t host = 0;
};

// Devices taken from one pool.
struct PoolCount {
  uint32_t pool = 0;
  uint32_t count = 0;
  bool operator==(const PoolCount&) const = default;
};

class ResourceProvider {
 public:
  virtual ~ResourceProvider() = default;
  virtual std::vector<Pool> Pools() const = 0;
  // Devices of `pool` usable in reservation window `window` (index, not seconds).
  virtual uint32_t Capacity(uint32_t pool, uint64_t window) const = 0;
  // Attaches the devices of a starting reservation to the tenant. kTryAgain:
  // not yet (devices it needs are still leaving another VM); the engine
  // tries again at its next tick.
  virtual Status Attach(const TenantId& tenant, uint64_t reservation_id,
                        const std::vector<PoolCount>& devices) = 0;
  // Detaches `count` devices of a started reservation: those with the highest
  // tenant-visible indices among its devices (SPEC.md §7.8.5). *detached
  // receives the pools they came from. The devices are the tenant's no
  // longer when it returns (DevicesHeld); an implementation may let them
  // leave the VM afterwards, so that the engine never waits for a guest.
  virtual Status Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                        std::vector<PoolCount>* detached) = 0;
  // Devices of `kind` the tenant holds now, from every source (its base
  // allocation and its reservations).
  virtual uint32_t DevicesHeld(const TenantId& tenant, hz_device_kind kind) const = 0;
  // Tenant-visible index of the device of a started reservation that holds
  // exactly one, for its PREEMPTION events (SPEC.md §8.3.3); nullopt when
  // it holds several or the index is not known.
  virtual std::optional<uint32_t> ReservationDeviceIndex(const TenantId& /*tenant*/,
                                                         uint64_t /*reservation_id*/) const {
    return std::nullopt;
  }
};

}  // namespace hz::negotiation

#endif  // HZ_NEGOTIATION_RESOURCE_PROVIDER_H_
