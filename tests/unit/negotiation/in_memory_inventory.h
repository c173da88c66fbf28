// An in-memory ResourceProvider for the negotiation engine's tests: pools with
// a device count per window, attachments by reservation, base allocations.
#ifndef HZ_TESTS_UNIT_NEGOTIATION_IN_MEMORY_INVENTORY_H_
#define HZ_TESTS_UNIT_NEGOTIATION_IN_MEMORY_INVENTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hz/negotiation/resource_provider.h"

namespace hz::negotiation::testing {

class InMemoryInventory : public ResourceProvider {
 public:
  // Returns the new pool's id (0, 1, 2, ...).
  uint32_t AddPool(hz_device_kind kind, uint32_t host, uint32_t count);
  // From window `from` on, the pool has `count` devices (failure, maintenance).
  void SetCapacityFrom(uint32_t pool, uint64_t from, uint32_t count);
  // Devices a tenant holds outside reservations (its initial allocation).
  void SetBaseDevices(const TenantId& tenant, hz_device_kind kind, uint32_t count);
  // Makes the next Attach calls fail (tests of the revoke path).
  void FailAttach(bool fail) { fail_attach_ = fail; }
  // Devices attached to a tenant through reservations now, all kinds.
  uint32_t Attached(const TenantId& tenant) const;

  std::vector<Pool> Pools() const override { return pools_; }
  uint32_t Capacity(uint32_t pool, uint64_t window) const override;
  Status Attach(const TenantId& tenant, uint64_t reservation_id,
                const std::vector<PoolCount>& devices) override;
  Status Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                std::vector<PoolCount>* detached) override;
  uint32_t DevicesHeld(const TenantId& tenant, hz_device_kind kind) const override;
  // The tenant's base devices come first, then its reservations' devices in
  // the order of their ids.
  std::optional<uint32_t> ReservationDeviceIndex(const TenantId& tenant,
                                                 uint64_t reservation_id) const override;

 private:
  struct Attachment {
    TenantId tenant;
    std::vector<PoolCount> devices;  // in tenant-visible index order
  };
  std::vector<Pool> pools_;
  std::vector<std::map<uint64_t, uint32_t>> capacity_;  // per pool: from-window -> count
  std::map<uint64_t, Attachment> attached_;             // by reservation
  std::map<std::pair<TenantId, int>, uint32_t> base_;
  bool fail_attach_ = false;
};

}  // namespace hz::negotiation::testing

#endif  // HZ_TESTS_UNIT_NEGOTIATION_IN_MEMORY_INVENTORY_H_
