// What the negotiation engine needs from the scheduler: how many devices each
// pool has in each reservation window, attach/detach, and how many devices a
// tenant holds. A pool is one locality group of one device kind on one host.
// InMemoryInventory stands in until the scheduler implements the interface.
#ifndef HZ_EVENTS_RESOURCE_PROVIDER_H_
#define HZ_EVENTS_RESOURCE_PROVIDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "protocol/harmonaize.h"

namespace hz::events {

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
  // Attaches the devices of a starting reservation to the tenant.
  virtual Status Attach(const std::string& tenant, uint64_t reservation_id,
                        const std::vector<PoolCount>& devices) = 0;
  // Detaches `count` devices of a started reservation: those with the highest
  // tenant-visible indices among its devices (SPEC.md §7.8.5). *detached
  // receives the pools they came from.
  virtual Status Detach(const std::string& tenant, uint64_t reservation_id, uint32_t count,
                        std::vector<PoolCount>* detached) = 0;
  // Devices of `kind` the tenant holds now, from every source (its base
  // allocation and its reservations).
  virtual uint32_t DevicesHeld(const std::string& tenant, hz_device_kind kind) const = 0;
};

class InMemoryInventory : public ResourceProvider {
 public:
  // Returns the new pool's id (0, 1, 2, ...).
  uint32_t AddPool(hz_device_kind kind, uint32_t host, uint32_t count);
  // From window `from` on, the pool has `count` devices (failure, maintenance).
  void SetCapacityFrom(uint32_t pool, uint64_t from, uint32_t count);
  // Devices a tenant holds outside reservations (its initial allocation).
  void SetBaseDevices(const std::string& tenant, hz_device_kind kind, uint32_t count);
  // Makes the next Attach calls fail (tests of the revoke path).
  void FailAttach(bool fail) { fail_attach_ = fail; }
  // Devices attached to a tenant through reservations now, all kinds.
  uint32_t Attached(const std::string& tenant) const;

  std::vector<Pool> Pools() const override { return pools_; }
  uint32_t Capacity(uint32_t pool, uint64_t window) const override;
  Status Attach(const std::string& tenant, uint64_t reservation_id,
                const std::vector<PoolCount>& devices) override;
  Status Detach(const std::string& tenant, uint64_t reservation_id, uint32_t count,
                std::vector<PoolCount>* detached) override;
  uint32_t DevicesHeld(const std::string& tenant, hz_device_kind kind) const override;

 private:
  struct Attachment {
    std::string tenant;
    std::vector<PoolCount> devices;  // in tenant-visible index order
  };
  std::vector<Pool> pools_;
  std::vector<std::map<uint64_t, uint32_t>> capacity_;  // per pool: from-window -> count
  std::map<uint64_t, Attachment> attached_;             // by reservation
  std::map<std::pair<std::string, int>, uint32_t> base_;
  bool fail_attach_ = false;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_RESOURCE_PROVIDER_H_
