#include "in_memory_inventory.h"

#include <algorithm>
#include <iterator>

namespace hz::negotiation::testing {

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

void InMemoryInventory::SetBaseDevices(const TenantId& tenant, hz_device_kind kind,
                                       uint32_t count) {
  base_[{tenant, static_cast<int>(kind)}] = count;
}

uint32_t InMemoryInventory::Capacity(uint32_t pool, uint64_t window) const {
  if (pool >= capacity_.size()) return 0;
  const auto& steps = capacity_[pool];
  auto it = steps.upper_bound(window);
  if (it == steps.begin()) return 0;
  return std::prev(it)->second;
}

uint32_t InMemoryInventory::Attached(const TenantId& tenant) const {
  uint32_t n = 0;
  for (const auto& [id, a] : attached_) {
    if (a.tenant != tenant) continue;
    for (const PoolCount& pc : a.devices) n += pc.count;
  }
  return n;
}

uint32_t InMemoryInventory::DevicesHeld(const TenantId& tenant, hz_device_kind kind) const {
  uint32_t n = 0;
  auto b = base_.find({tenant, static_cast<int>(kind)});
  if (b != base_.end()) n += b->second;
  for (const auto& [id, a] : attached_) {
    if (a.tenant != tenant) continue;
    for (const PoolCount& pc : a.devices) {
      if (pc.pool < pools_.size() && pools_[pc.pool].kind == kind) n += pc.count;
    }
  }
  return n;
}

std::optional<uint32_t> InMemoryInventory::ReservationDeviceIndex(const TenantId& tenant,
                                                                  uint64_t reservation_id) const {
  uint32_t index = 0;
  for (const auto& [key, n] : base_) {
    if (key.first == tenant) index += n;
  }
  for (const auto& [id, a] : attached_) {
    if (a.tenant != tenant) continue;
    uint32_t held = 0;
    for (const PoolCount& pc : a.devices) held += pc.count;
    if (id == reservation_id) return held == 1 ? std::optional<uint32_t>(index) : std::nullopt;
    index += held;
  }
  return std::nullopt;
}

Status InMemoryInventory::Attach(const TenantId& tenant, uint64_t reservation_id,
                                 const std::vector<PoolCount>& devices) {
  if (fail_attach_) return Status::IoError("attach failed (injected)");
  for (const PoolCount& pc : devices) {
    if (pc.pool >= pools_.size()) return Status::InvalidArgument("unknown pool");
  }
  if (attached_.count(reservation_id) != 0) return Status::State("reservation already attached");
  attached_[reservation_id] = Attachment{tenant, devices};
  return Status::Ok();
}

Status InMemoryInventory::Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                                 std::vector<PoolCount>* detached) {
  detached->clear();
  auto it = attached_.find(reservation_id);
  if (it == attached_.end() || it->second.tenant != tenant) {
    return Status::State("reservation is not attached");
  }
  uint32_t held = 0;
  for (const PoolCount& pc : it->second.devices) held += pc.count;
  if (count > held) return Status::InvalidArgument("detaching more devices than attached");
  // The devices attached last carry the highest tenant-visible indices.
  auto& devices = it->second.devices;
  uint32_t left = count;
  for (auto pc = devices.rbegin(); pc != devices.rend() && left > 0; ++pc) {
    uint32_t take = std::min(left, pc->count);
    detached->push_back({pc->pool, take});
    pc->count -= take;
    left -= take;
  }
  std::erase_if(devices, [](const PoolCount& pc) { return pc.count == 0; });
  if (devices.empty()) attached_.erase(it);
  return Status::Ok();
}

}  // namespace hz::negotiation::testing
