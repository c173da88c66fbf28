// The scheduler in a cluster of hosts: what this host tells the others of
// each tenant's devices, and what it learns of theirs. Only shapes travel
// (hz/scheduler/topology_summary.h), never a device's or a host's identity.
#include <algorithm>
#include <set>
#include <utility>

#include "hz/scheduler/scheduler.h"

namespace hz::scheduler {

namespace ev = hz::events;

namespace {

uint32_t ShapeCount(const std::vector<HostShape>& shapes, DeviceKind kind) {
  uint32_t n = 0;
  for (const HostShape& s : shapes) {
    for (const HostShape::Group& g : s.groups) n += kind == DeviceKind::kGpu ? g.gpus : g.nics;
  }
  return n;
}

}  // namespace

TopologySummary Scheduler::SummaryLocked(const std::string& tenant) {
  auto it = other_hosts_.find(tenant);
  return BuildTopologySummary(cluster_, TenantDevices(tenant), SeedLocked(tenant),
                              it == other_hosts_.end() ? std::vector<HostShape>{} : it->second);
}

uint32_t Scheduler::HeldLocked(const std::string& tenant, DeviceKind kind) const {
  uint32_t n = 0;
  for (DeviceRef d : TenantDevices(tenant)) n += cluster_.device(d).kind == kind;
  auto it = other_hosts_.find(tenant);
  return it == other_hosts_.end() ? n : n + ShapeCount(it->second, kind);
}

std::map<std::string, HostShape> Scheduler::LocalShapes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> tenants;
  for (const auto& [id, a] : allocator_.allocations()) tenants.insert(a.tenant);
  std::map<std::string, HostShape> out;
  for (const std::string& t : tenants) {
    HostShape shape = ShapeOf(cluster_, TenantDevices(t));
    if (!shape.groups.empty()) out[t] = std::move(shape);
  }
  return out;
}

PlacementRecord Scheduler::LocalPlacement() const {
  std::lock_guard<std::mutex> lock(mu_);
  PlacementRecord r;
  for (uint32_t h = 0; h < cluster_.num_hosts(); ++h) {
    const HostInventory& host = cluster_.host(h);
    for (uint32_t i = 0; i < host.devices.size(); ++i) {
      const DeviceRef d{h, i};
      r.host.devices.push_back(host.devices[i]);
      r.free.push_back(allocator_.Owner(d) == 0 && !allocator_.IsFailed(d));
    }
  }
  r.cordoned = cordoned_;
  // Without a libvirt connection devices are bound to vfio-pci only, for
  // any tenant; with one, only to a tenant with a VM to attach them to.
  r.any_tenant = attacher_ == nullptr;
  if (attacher_) {
    for (const auto& [tenant, domain] : domains_) r.tenants.insert(tenant);
  }
  return r;
}

Status Scheduler::SetOtherHosts(const TenantId& id, std::vector<HostShape> shapes) {
  const std::string& tenant = id.name();
  std::erase_if(shapes, [](const HostShape& s) { return s.groups.empty(); });
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<uint8_t> old_bytes = SummaryLocked(tenant).bytes;
  std::vector<HostShape> before;
  if (auto it = other_hosts_.find(tenant); it != other_hosts_.end()) before = std::move(it->second);
  if (shapes.empty()) {
    other_hosts_.erase(tenant);
  } else {
    other_hosts_[tenant] = shapes;
  }
  if (!sink_ || SummaryLocked(tenant).bytes == old_bytes) return Status::Ok();
  // The summary changed (the same shapes in another order do not change
  // it), and indices may have moved: the tenant re-reads it (SPEC.md §7.7).
  // One event per kind whose count changed; a change of shape alone is told
  // as a GPU change of 0 devices.
  std::vector<std::pair<DeviceKind, uint32_t>> changes;
  for (DeviceKind kind : {DeviceKind::kGpu, DeviceKind::kNic}) {
    const uint32_t was = ShapeCount(before, kind), now = ShapeCount(shapes, kind);
    if (was != now) changes.emplace_back(kind, was > now ? was - now : now - was);
  }
  if (changes.empty()) changes.emplace_back(DeviceKind::kGpu, 0);
  for (const auto& [kind, count] : changes) {
    Status s = sink_->Publish(id,
                              ev::MakeAllocationCapacity(ev::kCapacityAllocationChanged, 0, count,
                                                         HeldLocked(tenant, kind), WireKind(kind)),
                              nullptr);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace hz::scheduler
