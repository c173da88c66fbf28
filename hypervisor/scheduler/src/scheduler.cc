#include "hz/scheduler/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "hz/common/file.h"

namespace hz::scheduler {

namespace ev = hz::events;

namespace {

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

hz_device_kind WireKind(DeviceKind k) {
  return k == DeviceKind::kGpu ? HZ_DEV_GPU : HZ_DEV_NIC;
}

Scheduler::Scheduler(HostInventory inventory, const SchedulerOptions& options,
                     DomainAttacher* attacher, ev::EventSink* sink)
    : options_(options),
      cluster_(std::vector<HostInventory>{std::move(inventory)}),
      allocator_(&cluster_),
      binder_(options.sysfs_root),
      attacher_(attacher),
      sink_(sink) {}

Status Scheduler::Open(const SchedulerOptions& options, DomainAttacher* attacher,
                       ev::EventSink* sink, std::unique_ptr<Scheduler>* out) {
  HostInventory inv;
  Status s = LoadHostInventory(options.sysfs_root, options.provider_file, &inv);
  if (!s.ok()) return s;
  return OpenWithInventory(std::move(inv), options, attacher, sink, out);
}

Status Scheduler::OpenWithInventory(HostInventory inventory, const SchedulerOptions& options,
                                    DomainAttacher* attacher, ev::EventSink* sink,
                                    std::unique_ptr<Scheduler>* out) {
  if (options.state_path.empty()) return Status::InvalidArgument("state_path is required");
  std::unique_ptr<Scheduler> s(new Scheduler(std::move(inventory), options, attacher, sink));
  Status st = s->Load();
  if (!st.ok()) return st;
  *out = std::move(s);
  return Status::Ok();
}

Status Scheduler::Load() {
  StatusOr<std::string> text = ReadFile(options_.state_path);
  if (!text.ok()) return text.status().IsNotFound() ? Status::Ok() : text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(options_.state_path + " is not valid JSON");
  }
  try {
    if (j.at("version").get<int>() != 1) {
      return Status::Corruption(options_.state_path + ": unknown state version");
    }
    if (Status s = allocator_.FromJson(j.at("allocator")); !s.ok()) {
      return Status::Corruption(options_.state_path + ": " + s.message());
    }
    for (const auto& [tenant, t] : j.at("tenants").items()) {
      seeds_[tenant] = t.at("seed").get<uint64_t>();
      if (t.contains("domain")) domains_[tenant] = t.at("domain").get<std::string>();
    }
    for (const auto& r : j.at("reservations")) {
      uint64_t rid = r.at(0).get<uint64_t>();
      uint64_t aid = r.at(1).get<uint64_t>();
      if (!allocator_.Find(aid)) continue;  // its devices all failed meanwhile
      reservations_[rid] = aid;
    }
    // Absent from the state of earlier releases.
    for (const auto& e : j.value("detach_errors", nlohmann::json::array())) {
      const uint64_t aid = e.at(0).get<uint64_t>();
      if (allocator_.Find(aid)) detach_errors_[aid] = e.at(1).get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(options_.state_path + ": " + e.what());
  }
  return Status::Ok();
}

Status Scheduler::Persist() {
  nlohmann::json alloc;
  allocator_.ToJson(&alloc);
  nlohmann::json tenants = nlohmann::json::object();
  for (const auto& [tenant, seed] : seeds_) tenants[tenant]["seed"] = seed;
  for (const auto& [tenant, domain] : domains_) {
    if (!seeds_.count(tenant)) tenants[tenant]["seed"] = 0;
    tenants[tenant]["domain"] = domain;
  }
  nlohmann::json res = nlohmann::json::array();
  for (const auto& [rid, aid] : reservations_) res.push_back({rid, aid});
  // Written as failed while their devices leave: read back after a crash
  // meanwhile, the allocation keeps them (the guest may still hold them)
  // and says why, as after a detach that failed.
  std::map<uint64_t, std::string> errors = detach_errors_;
  for (const auto& [aid, devices] : detaching_) {
    errors.try_emplace(aid, "the service stopped while its devices were leaving the VM");
  }
  nlohmann::json failed = nlohmann::json::array();
  for (const auto& [aid, error] : errors) failed.push_back({aid, error});
  nlohmann::json j{{"version", 1},
                   {"allocator", alloc},
                   {"tenants", tenants},
                   {"reservations", res},
                   {"detach_errors", failed}};
  return WriteFileAtomic(options_.state_path, j.dump(1), options_.sync);
}

uint64_t Scheduler::SeedLocked(const std::string& tenant) {
  auto it = seeds_.find(tenant);
  if (it != seeds_.end() && it->second != 0) return it->second;
  uint64_t seed = options_.tenant_seed ? options_.tenant_seed(TenantId(tenant)) : 0;
  while (seed == 0) seed = RandomSeed();
  seeds_[tenant] = seed;
  return seed;
}

std::vector<DeviceRef> Scheduler::TenantDevices(const std::string& tenant) const {
  std::vector<DeviceRef> out;
  for (const auto& [id, a] : allocator_.allocations()) {
    if (a.tenant == tenant) out.insert(out.end(), a.devices.begin(), a.devices.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status Scheduler::FindDevice(const std::string& bdf, DeviceRef* ref) const {
  int index = cluster_.host(0).Find(bdf);
  if (index < 0)
    return Status::NotFound("no GPU or NIC " + bdf.substr(0, 32) + " in the inventory");
  *ref = {0, static_cast<uint32_t>(index)};
  return Status::Ok();
}

bool Scheduler::IsReservationAllocation(uint64_t allocation_id) const {
  for (const auto& [rid, aid] : reservations_) {
    if (aid == allocation_id) return true;
  }
  return false;
}

Status Scheduler::BindTenant(const TenantId& id, const std::string& domain) {
  const std::string& tenant = id.name();
  if (!ev::ValidName(tenant)) return Status::InvalidArgument("invalid tenant name");
  if (domain.empty() || domain.size() > 256) return Status::InvalidArgument("invalid domain name");
  std::lock_guard<std::mutex> lock(mu_);
  domains_[tenant] = domain;
  SeedLocked(tenant);
  return Persist();
}

std::optional<std::string> Scheduler::DomainOf(const TenantId& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = domains_.find(tenant.name());
  if (it == domains_.end()) return std::nullopt;
  return it->second;
}

Status Scheduler::AttachDevices(const std::string& tenant, const std::vector<DeviceRef>& devices,
                                std::vector<DeviceRef>* attached) {
  attached->clear();
  std::vector<std::string> bdfs;
  for (DeviceRef d : devices) bdfs.push_back(cluster_.device(d).bdf);
  if (options_.bind_vfio) {
    Status s = binder_.Bind(bdfs, /*whole_group=*/true);
    if (!s.ok()) return s;
  }
  if (!attacher_) return Status::Ok();
  auto dom = domains_.find(tenant);
  if (dom == domains_.end()) {
    if (options_.bind_vfio) binder_.Unbind(bdfs);
    return Status::State("tenant " + tenant + " has no VM bound");
  }
  for (size_t i = 0; i < bdfs.size(); ++i) {
    Status s = attacher_->Attach(dom->second, bdfs[i]);
    if (!s.ok()) {
      attached->assign(devices.begin(), devices.begin() + i);
      const std::vector<std::string> never(bdfs.begin() + i, bdfs.end());
      if (options_.bind_vfio) binder_.Unbind(never);
      return s;
    }
  }
  return Status::Ok();
}

void Scheduler::RollBackAttach(std::unique_lock<std::mutex>& lock, uint64_t allocation_id,
                               const std::vector<DeviceRef>& attached) {
  if (!attached.empty()) {
    // Nothing else changes the allocation meanwhile (kBusy), as for a release.
    if (Status s = DetachUnlocked(lock, allocation_id, attached); !s.ok()) {
      KeepAfterFailedDetach(allocation_id, s);
      return;
    }
  }
  allocator_.Release(allocation_id);
  std::erase_if(reservations_,
                [allocation_id](const auto& r) { return r.second == allocation_id; });
  Status p = Persist();
  if (!p.ok()) spdlog::error("scheduler: rollback not persisted: {}", p.ToString());
}

Status Scheduler::CheckNotDetaching(uint64_t allocation_id) const {
  if (!detaching_.count(allocation_id)) return Status::Ok();
  return Status::Busy("allocation " + std::to_string(allocation_id) +
                      " is being released: its devices are still leaving the VM");
}

Status Scheduler::DetachUnlocked(std::unique_lock<std::mutex>& lock, uint64_t allocation_id,
                                 const std::vector<DeviceRef>& devices) {
  MarkLeaving(allocation_id, devices);
  return LeaveVmUnlocked(lock, allocation_id, devices);
}

bool Scheduler::IsLeaving(DeviceRef d) const {
  auto it = detaching_.find(allocator_.Owner(d));
  return it != detaching_.end() &&
         std::find(it->second.begin(), it->second.end(), d) != it->second.end();
}

void Scheduler::MarkLeaving(uint64_t allocation_id, const std::vector<DeviceRef>& devices) {
  // The guest may take its time (detach_wait) or never let go. The devices
  // stay owned by the allocation meanwhile, so nothing hands them out, and
  // whoever would change the allocation gets kBusy or waits for
  // done_detaching_.
  std::vector<DeviceRef>& leaving = detaching_[allocation_id];
  leaving.insert(leaving.end(), devices.begin(), devices.end());
  if (Status s = Persist(); !s.ok()) {
    spdlog::error("scheduler: devices leaving allocation {} not recorded: {}", allocation_id,
                  s.ToString());
  }
}

Status Scheduler::LeaveVmUnlocked(std::unique_lock<std::mutex>& lock, uint64_t allocation_id,
                                  const std::vector<DeviceRef>& devices) {
  std::vector<std::string> bdfs;
  for (DeviceRef d : devices) bdfs.push_back(cluster_.device(d).bdf);
  auto dom = domains_.find(allocator_.Find(allocation_id)->tenant);
  Status first;
  if (attacher_ && dom != domains_.end()) {
    const std::string domain = dom->second;
    lock.unlock();
    for (const std::string& bdf : bdfs) {
      Status s = attacher_->Detach(domain, bdf);
      if (!s.ok() && first.ok()) first = s;
    }
    lock.lock();
  }
  std::vector<DeviceRef>& leaving = detaching_.at(allocation_id);
  std::erase_if(leaving, [&devices](DeviceRef d) {
    return std::find(devices.begin(), devices.end(), d) != devices.end();
  });
  if (leaving.empty()) detaching_.erase(allocation_id);
  done_detaching_.notify_all();
  if (!first.ok()) return first;
  if (options_.bind_vfio) return binder_.Unbind(bdfs);
  return Status::Ok();
}

void Scheduler::KeepAfterFailedDetach(uint64_t allocation_id, const Status& error) {
  spdlog::warn("scheduler: allocation {} keeps its devices (they may still be attached): {}",
               allocation_id, error.ToString());
  detach_errors_[allocation_id] = error.ToString();
}

Status Scheduler::Allocate(const TenantId& id, const Request& request, uint64_t* allocation_id) {
  const std::string& tenant = id.name();
  if (!ev::ValidName(tenant)) return Status::InvalidArgument("invalid tenant name");
  std::unique_lock<std::mutex> lock(mu_);
  if (cordoned_) return Status::Busy("the host is under maintenance: no new placements");
  Allocation a;
  Status s = allocator_.Allocate(tenant, request, &a);
  if (!s.ok()) return s;
  SeedLocked(tenant);
  // Durable before any device moves: a crash from here on leaves the devices
  // recorded as taken, never handed out twice.
  if (!(s = Persist()).ok()) {
    allocator_.Release(a.id);
    return s;
  }
  std::vector<DeviceRef> attached;
  if (!(s = AttachDevices(tenant, a.devices, &attached)).ok()) {
    RollBackAttach(lock, a.id, attached);
    return s;
  }
  if (allocation_id) *allocation_id = a.id;
  return Status::Ok();
}

Status Scheduler::Release(uint64_t allocation_id) {
  std::unique_lock<std::mutex> lock(mu_);
  const Allocation* a = allocator_.Find(allocation_id);
  if (!a) return Status::NotFound("no allocation " + std::to_string(allocation_id));
  if (Status s = CheckNotDetaching(allocation_id); !s.ok()) return s;
  const std::vector<DeviceRef> devices = a->devices;
  // A device that may still be attached to the VM is not handed out again:
  // the allocation stays, and says why.
  if (Status s = DetachUnlocked(lock, allocation_id, devices); !s.ok()) {
    KeepAfterFailedDetach(allocation_id, s);
    return s;
  }
  // Nothing else changed the allocation while its devices were leaving the
  // VM (kBusy to releases, FailLocked waits), so it is still here.
  allocator_.Release(allocation_id);
  detach_errors_.erase(allocation_id);
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    it = it->second == allocation_id ? reservations_.erase(it) : std::next(it);
  }
  return Persist();
}

uint32_t Scheduler::TenantAllocations(const TenantId& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t n = 0;
  for (const auto& [aid, a] : allocator_.allocations()) {
    if (a.tenant == id.name()) ++n;
  }
  return n;
}

Status Scheduler::ForgetTenant(const TenantId& id) {
  const std::string& tenant = id.name();
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<uint64_t> held;
  for (const auto& [aid, a] : allocator_.allocations()) {
    if (a.tenant != tenant) continue;
    if (Status s = CheckNotDetaching(aid); !s.ok()) return s;
    held.push_back(aid);
  }
  Status first;
  for (uint64_t aid : held) {
    // Each detach frees the lock: check again what the others did meanwhile.
    const Allocation* a = allocator_.Find(aid);
    if (!a) continue;
    Status err = CheckNotDetaching(aid);
    if (err.ok()) err = DetachUnlocked(lock, aid, std::vector<DeviceRef>(a->devices));
    if (!err.ok()) {
      if (!err.IsBusy()) KeepAfterFailedDetach(aid, err);
      if (first.ok()) first = err;
      continue;
    }
    allocator_.Release(aid);
    detach_errors_.erase(aid);
    std::erase_if(reservations_, [aid](const auto& r) { return r.second == aid; });
  }
  const bool holds = std::any_of(allocator_.allocations().begin(), allocator_.allocations().end(),
                                 [&](const auto& entry) { return entry.second.tenant == tenant; });
  if (first.ok() && holds) {
    first = Status::Busy("tenant " + tenant + " was given devices meanwhile");
  }
  if (first.ok()) {
    seeds_.erase(tenant);
    domains_.erase(tenant);
  }
  Status s = Persist();
  return first.ok() ? s : first;
}

StatusOr<DeviceLoss> Scheduler::MarkFailed(const std::string& bdf, uint64_t errors) {
  std::unique_lock<std::mutex> lock(mu_);
  DeviceRef d;
  Status s = FindDevice(bdf, &d);
  if (!s.ok()) return s;
  return FailLocked(lock, d, errors, /*publish_failure=*/true);
}

StatusOr<DeviceLoss> Scheduler::DeviceLost(const TenantId& id, uint32_t device_index) {
  const std::string& tenant = id.name();
  std::unique_lock<std::mutex> lock(mu_);
  const TopologySummary summary = SummaryLocked(tenant);
  if (device_index >= summary.devices.size() || summary.devices[device_index] == kOtherHostDevice) {
    return Status::NotFound("tenant " + tenant + " has no device " + std::to_string(device_index));
  }
  return FailLocked(lock, summary.devices[device_index], 0, /*publish_failure=*/false);
}

StatusOr<DeviceLoss> Scheduler::DeviceLostAt(const std::string& bdf) {
  std::unique_lock<std::mutex> lock(mu_);
  DeviceRef d;
  Status s = FindDevice(bdf, &d);
  if (!s.ok()) return s;
  return FailLocked(lock, d, 0, /*publish_failure=*/false);
}

std::vector<std::tuple<TenantId, std::string, uint32_t>> Scheduler::Assignments() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> tenants;
  for (const auto& [id, a] : allocator_.allocations()) tenants.insert(a.tenant);
  std::vector<std::tuple<TenantId, std::string, uint32_t>> out;
  for (const std::string& t : tenants) {
    const TopologySummary s = SummaryLocked(t);
    for (uint32_t i = 0; i < s.devices.size(); ++i) {
      if (s.devices[i] == kOtherHostDevice) continue;
      out.emplace_back(TenantId(t), cluster_.device(s.devices[i]).bdf, i);
    }
  }
  return out;
}

StatusOr<DeviceLoss> Scheduler::FailLocked(std::unique_lock<std::mutex>& lock, DeviceRef d,
                                           uint64_t errors, bool publish_failure) {
  Status s;
  const std::string bdf = cluster_.device(d).bdf;
  if (allocator_.IsFailed(d)) return DeviceLoss{};
  allocator_.SetFailed(d, true);
  // While its allocation's devices leave the VM, what that release does
  // decides what is left to do here (it may free the device).
  uint64_t owner = 0;
  while (detaching_.count(owner = allocator_.Owner(d))) done_detaching_.wait(lock);
  if (owner == 0) {
    if (!(s = Persist()).ok()) return s;
    return DeviceLoss{};
  }

  const Allocation a = *allocator_.Find(owner);
  Status detach = DetachUnlocked(lock, owner, {d});
  if (!detach.ok()) {
    // The device is gone either way; it stays failed and leaves the allocation.
    spdlog::warn("scheduler: detach of failed device {}: {}", bdf, detach.ToString());
  }
  // Indices as the tenant knows them now (they may have moved meanwhile).
  const uint32_t index = SummaryLocked(a.tenant).IndexOf(d);
  allocator_.RemoveDevice(d);
  if (!allocator_.Find(owner)) {
    for (auto it = reservations_.begin(); it != reservations_.end();) {
      it = it->second == owner ? reservations_.erase(it) : std::next(it);
    }
  }
  if (!(s = Persist()).ok()) return s;
  if (sink_ && publish_failure) {
    s = sink_->Publish(TenantId(a.tenant), ev::MakeFailure(ev::kFailureDeviceFailed, index, errors),
                       nullptr);
    if (!s.ok()) return s;
  }
  const DeviceKind kind = cluster_.device(d).kind;
  if (sink_) {
    // The allocation changed: the tenant re-reads its summary (SPEC.md §7.7).
    s = sink_->Publish(TenantId(a.tenant),
                       ev::MakeAllocationCapacity(ev::kCapacityAllocationChanged, 0, 1,
                                                  HeldLocked(a.tenant, kind), WireKind(kind)),
                       nullptr);
    if (!s.ok()) return s;
  }
  DeviceLoss loss;
  loss.tenant = TenantId(a.tenant);
  loss.kind = kind;
  loss.locality = a.request.locality;
  loss.replaceable = allocator_.FreeOnHost(0, kind) != 0;
  return loss;
}

Status Scheduler::MarkDegraded(const std::string& bdf, uint64_t errors) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceRef d;
  Status s = FindDevice(bdf, &d);
  if (!s.ok()) return s;
  const uint64_t owner = allocator_.Owner(d);
  if (owner == 0 || !sink_) return Status::Ok();
  const std::string tenant = allocator_.Find(owner)->tenant;
  const uint32_t index = SummaryLocked(tenant).IndexOf(d);
  return sink_->Publish(TenantId(tenant),
                        ev::MakeFailure(ev::kFailureDeviceDegraded, index, errors), nullptr);
}

Status Scheduler::Repair(const std::string& bdf) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceRef d;
  Status s = FindDevice(bdf, &d);
  if (!s.ok()) return s;
  if (!allocator_.IsFailed(d)) return Status::Ok();
  // A failed device leaving its VM leaves its allocation next: repaired, it
  // would be free before the guest let go of it.
  if (!(s = CheckNotDetaching(allocator_.Owner(d))).ok()) return s;
  allocator_.SetFailed(d, false);
  return Persist();
}

Status Scheduler::Summary(const TenantId& id, TopologySummary* out) {
  const std::string& tenant = id.name();
  std::lock_guard<std::mutex> lock(mu_);
  *out = SummaryLocked(tenant);
  return Status::Ok();
}

Status Scheduler::TenantIndex(const std::string& bdf, TenantId* tenant, uint32_t* index) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceRef d;
  Status s = FindDevice(bdf, &d);
  if (!s.ok()) return s;
  const uint64_t owner = allocator_.Owner(d);
  if (owner == 0) return Status::NotFound(bdf + " is not allocated");
  const std::string& name = allocator_.Find(owner)->tenant;
  *tenant = TenantId(name);
  *index = SummaryLocked(name).IndexOf(d);
  return Status::Ok();
}

nlohmann::json Scheduler::Inventory() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  const HostInventory& inv = cluster_.host(0);
  for (uint32_t i = 0; i < inv.devices.size(); ++i) {
    const Device& d = inv.devices[i];
    const DeviceRef ref{0, i};
    const uint64_t owner = allocator_.Owner(ref);
    const bool releasing = IsLeaving(ref);
    char ids[16];
    std::snprintf(ids, sizeof(ids), "%04x:%04x", d.vendor, d.device_id);
    nlohmann::json j{{"bdf", d.bdf},
                     {"kind", KindName(d.kind)},
                     {"id", ids},
                     {"numa_node", d.numa_node},
                     {"iommu_group", d.iommu_group},
                     {"switch", d.switch_bdf},
                     {"pcie_path", d.pcie_path},
                     {"link_gts", d.link_gts},
                     {"link_width", d.link_width},
                     {"driver", d.driver},
                     {"island", d.island},
                     {"rail", d.rail},
                     {"serial", d.serial},
                     {"pool", cluster_.PoolOf(ref)},
                     {"state", allocator_.IsFailed(ref) ? "failed"
                               : releasing              ? "releasing"
                               : owner != 0             ? "allocated"
                                                        : "free"}};
    if (owner != 0) {
      j["tenant"] = allocator_.Find(owner)->tenant;
      j["allocation"] = owner;
    }
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json Scheduler::Allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [id, a] : allocator_.allocations()) {
    nlohmann::json devices = nlohmann::json::array();
    for (DeviceRef d : a.devices) devices.push_back(cluster_.device(d).bdf);
    nlohmann::json j{{"id", id},
                     {"tenant", a.tenant},
                     {"gpus", a.request.gpus},
                     {"nics", a.request.nics},
                     {"locality", static_cast<int>(a.request.locality)},
                     {"devices", devices}};
    for (const auto& [rid, aid] : reservations_) {
      if (aid == id) j["reservation"] = rid;
    }
    if (auto leaving = detaching_.find(id); leaving != detaching_.end()) {
      nlohmann::json bdfs = nlohmann::json::array();
      for (DeviceRef d : leaving->second) bdfs.push_back(cluster_.device(d).bdf);
      j["releasing"] = bdfs;
    }
    if (auto e = detach_errors_.find(id); e != detach_errors_.end()) j["detach_error"] = e->second;
    out.push_back(std::move(j));
  }
  return out;
}

void Scheduler::SetCordoned(bool cordoned) {
  std::lock_guard<std::mutex> lock(mu_);
  cordoned_ = cordoned;
}

uint32_t Scheduler::DevicesHeld(const TenantId& id, hz_device_kind kind) const {
  const std::string& tenant = id.name();
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t n = 0;
  for (DeviceRef d : TenantDevices(tenant)) n += WireKind(cluster_.device(d).kind) == kind;
  for (const auto& [aid, devices] : detaching_) {
    if (allocator_.Find(aid)->tenant != tenant) continue;
    for (DeviceRef d : devices) n -= WireKind(cluster_.device(d).kind) == kind;
  }
  return n;
}

}  // namespace hz::scheduler
