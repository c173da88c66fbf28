#include "hz/events/resource_provider.h"

namespace hz::events {

uint32_t InMemoryInventory::AddPool(hz_device_kind kind, uint32_t host, uint32_t count) {
  uint32_t id = static_cast<uint32_t>(pools_.size());
  pools_.push_back(Pool{id, kind, host});
  capacity_.push_back({{0, count}});
  return id;
}

void InMemoryInventory::SetCapacityFrom(uint32_t pool, uint64_t from, uint32_t count) {
  if (pool >= capacity_.size()) return;
  auto& steps = capacity_[pool];
  // Later windows follow the new value too.
  steps.erase(steps.upper_bound(from), steps.end());
  steps[from] = count;
}

uint32_t InMemoryInventory::Capacity(uint32_t pool, uint64_t window) const {
  if (pool >= capacity_.size()) return 0;
  const auto& steps = capacity_[pool];
  auto it = steps.upper_bound(window);
  if (it == steps.begin()) return 0;
  return std::prev(it)->second;
}

uint32_t InMemoryInventory::Attached(const std::string& tenant) const {
  auto it = attached_by_tenant_.find(tenant);
  return it == attached_by_tenant_.end() ? 0 : it->second;
}

Status InMemoryInventory::Attach(const std::string& tenant, uint64_t reservation_id,
                                 const std::vector<PoolCount>& devices) {
  if (fail_attach_) return Status::IoError("attach failed (injected)");
  for (const PoolCount& pc : devices) {
    if (pc.pool >= pools_.size()) return Status::InvalidArgument("unknown pool");
  }
  for (const PoolCount& pc : devices) {
    attached_[{pc.pool, reservation_id}] += pc.count;
    attached_by_tenant_[tenant] += pc.count;
  }
  return Status::Ok();
}

Status InMemoryInventory::Detach(const std::string& tenant, uint64_t reservation_id,
                                 const std::vector<PoolCount>& devices) {
  for (const PoolCount& pc : devices) {
    auto it = attached_.find({pc.pool, reservation_id});
    if (it == attached_.end() || it->second < pc.count) {
      return Status::State("detach of devices that are not attached");
    }
  }
  for (const PoolCount& pc : devices) {
    auto it = attached_.find({pc.pool, reservation_id});
    it->second -= pc.count;
    if (it->second == 0) attached_.erase(it);
    attached_by_tenant_[tenant] -= pc.count;
  }
  return Status::Ok();
}

}  // namespace hz::events
