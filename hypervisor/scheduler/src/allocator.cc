#include "hz/scheduler/allocator.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace hz::scheduler {

namespace {

constexpr uint32_t kMaxRequest = 4096;

int KindIndex(DeviceKind k) {
  return static_cast<int>(k);
}

}  // namespace

Allocator::Allocator(const Cluster* cluster, Policy policy) : cluster_(cluster), policy_(policy) {
  const size_t n = cluster_->num_hosts();
  owner_.resize(n);
  failed_.resize(n);
  free_on_host_.assign(n, {0, 0});
  for (uint32_t h = 0; h < n; ++h) {
    const auto& devices = cluster_->host(h).devices;
    owner_[h].assign(devices.size(), 0);
    failed_[h].assign(devices.size(), false);
    for (const Device& d : devices) ++free_on_host_[h][KindIndex(d.kind)];
  }
  free_in_pool_.resize(cluster_->pools().size());
  for (size_t p = 0; p < cluster_->pools().size(); ++p) {
    free_in_pool_[p] = static_cast<uint32_t>(cluster_->pools()[p].devices.size());
  }
}

uint32_t Allocator::FreeOnHost(uint32_t host, DeviceKind kind) const {
  return free_on_host_[host][KindIndex(kind)];
}

uint32_t Allocator::TotalFree(DeviceKind kind) const {
  uint32_t total = 0;
  for (const auto& f : free_on_host_) total += f[KindIndex(kind)];
  return total;
}

const Allocation* Allocator::Find(uint64_t id) const {
  auto it = allocations_.find(id);
  return it == allocations_.end() ? nullptr : &it->second;
}

void Allocator::Own(DeviceRef d, uint64_t id) {
  bool was_free = Free(d);
  owner_[d.host][d.index] = id;
  if (was_free) {
    --free_in_pool_[cluster_->PoolOf(d)];
    --free_on_host_[d.host][KindIndex(cluster_->device(d).kind)];
  }
}

void Allocator::Disown(DeviceRef d) {
  owner_[d.host][d.index] = 0;
  if (Free(d)) {
    ++free_in_pool_[cluster_->PoolOf(d)];
    ++free_on_host_[d.host][KindIndex(cluster_->device(d).kind)];
  }
}

bool Allocator::TakeFromPool(uint32_t pool, uint32_t count, std::vector<uint32_t>* out) const {
  const Pool& p = cluster_->pools()[pool];
  // Free devices of the pool, by switch: an island spans switches, and GPUs
  // under one switch also share their PCIe path to the NICs.
  std::map<int, std::vector<uint32_t>> by_switch;
  for (uint32_t i : p.devices) {
    DeviceRef d{p.host, i};
    if (Free(d)) by_switch[cluster_->SwitchOf(d)].push_back(i);
  }
  uint32_t remaining = count;
  while (remaining > 0 && !by_switch.empty()) {
    // Best fit: the switch whose free count is the smallest that holds the
    // rest; when none holds it, the fullest switch.
    auto best = by_switch.end();
    for (auto it = by_switch.begin(); it != by_switch.end(); ++it) {
      if (it->second.size() >= remaining &&
          (best == by_switch.end() || it->second.size() < best->second.size())) {
        best = it;
      }
    }
    if (best == by_switch.end()) {
      for (auto it = by_switch.begin(); it != by_switch.end(); ++it) {
        if (best == by_switch.end() || it->second.size() > best->second.size()) best = it;
      }
    }
    uint32_t take = std::min<uint32_t>(remaining, static_cast<uint32_t>(best->second.size()));
    out->insert(out->end(), best->second.begin(), best->second.begin() + take);
    remaining -= take;
    by_switch.erase(best);
  }
  return remaining == 0;
}

bool Allocator::PickGpus(uint32_t host, uint32_t count, int only_pool,
                         std::vector<uint32_t>* out) const {
  if (count == 0) return true;
  if (only_pool >= 0) return TakeFromPool(static_cast<uint32_t>(only_pool), count, out);
  std::vector<uint32_t> pools;
  for (uint32_t p : cluster_->host_pools(host)) {
    if (cluster_->pools()[p].kind == DeviceKind::kGpu && free_in_pool_[p] > 0) pools.push_back(p);
  }
  uint32_t remaining = count;
  while (remaining > 0 && !pools.empty()) {
    // Same rule as within a pool: best fit for the rest, else the largest.
    size_t best = pools.size();
    for (size_t i = 0; i < pools.size(); ++i) {
      uint32_t f = free_in_pool_[pools[i]];
      if (f >= remaining && (best == pools.size() || f < free_in_pool_[pools[best]])) best = i;
    }
    if (best == pools.size()) {
      for (size_t i = 0; i < pools.size(); ++i) {
        if (best == pools.size() || free_in_pool_[pools[i]] > free_in_pool_[pools[best]]) {
          best = i;
        }
      }
    }
    uint32_t take = std::min(remaining, free_in_pool_[pools[best]]);
    if (!TakeFromPool(pools[best], take, out)) return false;
    remaining -= take;
    pools.erase(pools.begin() + static_cast<std::ptrdiff_t>(best));
  }
  return remaining == 0;
}

bool Allocator::PickNics(uint32_t host, uint32_t count, const std::vector<uint32_t>& gpus,
                         std::vector<uint32_t>* out) const {
  if (count == 0) return true;
  const HostInventory& inv = cluster_->host(host);
  std::vector<uint32_t> free_nics;
  for (uint32_t i = 0; i < inv.devices.size(); ++i) {
    if (inv.devices[i].kind == DeviceKind::kNic && Free({host, i})) free_nics.push_back(i);
  }
  if (free_nics.size() < count) return false;
  // Ties go to the earlier topological slot, never to the lower address.
  std::sort(free_nics.begin(), free_nics.end(), [&](uint32_t a, uint32_t b) {
    return cluster_->Slot({host, a}) < cluster_->Slot({host, b});
  });
  std::vector<bool> used(free_nics.size(), false);
  if (gpus.empty()) {
    // NICs alone: best-fit by switch pool, like GPUs.
    std::map<uint32_t, std::vector<size_t>> by_pool;
    for (size_t k = 0; k < free_nics.size(); ++k) {
      by_pool[cluster_->PoolOf({host, free_nics[k]})].push_back(k);
    }
    uint32_t remaining = count;
    while (remaining > 0) {
      auto best = by_pool.end();
      for (auto it = by_pool.begin(); it != by_pool.end(); ++it) {
        if (it->second.size() >= remaining &&
            (best == by_pool.end() || it->second.size() < best->second.size())) {
          best = it;
        }
      }
      if (best == by_pool.end()) {
        for (auto it = by_pool.begin(); it != by_pool.end(); ++it) {
          if (best == by_pool.end() || it->second.size() > best->second.size()) best = it;
        }
      }
      uint32_t take = std::min<uint32_t>(remaining, static_cast<uint32_t>(best->second.size()));
      for (uint32_t t = 0; t < take; ++t) out->push_back(free_nics[best->second[t]]);
      remaining -= take;
      by_pool.erase(best);
    }
    return true;
  }
  // One NIC per GPU in turn: the rail-aligned NIC under the GPU's switch,
  // then the same switch, the same rail, the same NUMA node, anything.
  for (uint32_t t = 0; t < count; ++t) {
    const uint32_t g = gpus[t % gpus.size()];
    const Device& gpu = inv.devices[g];
    const int gsw = cluster_->SwitchOf({host, g});
    size_t best = free_nics.size();
    int best_score = std::numeric_limits<int>::max();
    for (size_t k = 0; k < free_nics.size(); ++k) {
      if (used[k]) continue;
      const Device& nic = inv.devices[free_nics[k]];
      const int nsw = cluster_->SwitchOf({host, free_nics[k]});
      const bool same_switch = gsw >= 0 && nsw == gsw;
      const bool same_rail = gpu.rail >= 0 && nic.rail == gpu.rail;
      int score = 5;
      if (same_switch && same_rail) {
        score = 0;
      } else if (same_switch) {
        score = 1;
      } else if (same_rail) {
        score = 2;
      } else if (nic.numa_node == gpu.numa_node) {
        score = 3;
      }
      if (score < best_score) {
        best_score = score;
        best = k;
      }
    }
    used[best] = true;
    out->push_back(free_nics[best]);
  }
  return true;
}

bool Allocator::Place(const Request& request, std::vector<DeviceRef>* devices) const {
  devices->clear();
  if (request.gpus + request.nics == 0) return false;
  if (request.gpus > TotalFree(DeviceKind::kGpu) || request.nics > TotalFree(DeviceKind::kNic)) {
    return false;
  }
  bool ok = policy_ == Policy::kFirstFit ? PlaceFirstFit(request, devices)
                                         : PlaceTopology(request, devices);
  if (ok) ok = AddGroupMates(devices).ok();
  if (!ok) {
    devices->clear();
    return false;
  }
  std::sort(devices->begin(), devices->end());
  return true;
}

bool Allocator::PlaceTopology(const Request& request, std::vector<DeviceRef>* out) const {
  const uint32_t g = request.gpus;
  const uint32_t n = request.nics;
  const size_t hosts = cluster_->num_hosts();
  auto emit = [&](uint32_t h, const std::vector<uint32_t>& idx) {
    for (uint32_t i : idx) out->push_back({h, i});
  };

  if (request.locality == HZ_LOC_SAME_GROUP) {
    // One pool of the leading kind must hold the request; best fit across all
    // hosts, then the busiest host (keeps empty hosts empty).
    const DeviceKind kind = g > 0 ? DeviceKind::kGpu : DeviceKind::kNic;
    const uint32_t need = g > 0 ? g : n;
    const auto& pools = cluster_->pools();
    std::tuple<uint32_t, uint32_t, uint32_t> best_key{UINT32_MAX, UINT32_MAX, UINT32_MAX};
    int best = -1;
    for (uint32_t p = 0; p < pools.size(); ++p) {
      if (pools[p].kind != kind || free_in_pool_[p] < need) continue;
      const uint32_t h = pools[p].host;
      if (g > 0 && FreeOnHost(h, DeviceKind::kNic) < n) continue;
      std::tuple<uint32_t, uint32_t, uint32_t> key{free_in_pool_[p] - need, FreeOnHost(h, kind), p};
      if (key < best_key) {
        best_key = key;
        best = static_cast<int>(p);
      }
    }
    if (best < 0) return false;
    const uint32_t h = pools[best].host;
    std::vector<uint32_t> gpus, nics;
    if (g > 0) {
      if (!TakeFromPool(static_cast<uint32_t>(best), g, &gpus)) return false;
      if (!PickNics(h, n, gpus, &nics)) return false;
    } else if (!TakeFromPool(static_cast<uint32_t>(best), n, &nics)) {
      return false;
    }
    emit(h, gpus);
    emit(h, nics);
    return true;
  }

  // One host: prefer a host where the GPUs fit in one pool, then the host
  // whose free count best matches.
  int best_host = -1;
  std::tuple<int, uint32_t, uint32_t> best_key{INT32_MAX, UINT32_MAX, UINT32_MAX};
  for (uint32_t h = 0; h < hosts; ++h) {
    const uint32_t fg = FreeOnHost(h, DeviceKind::kGpu);
    const uint32_t fn = FreeOnHost(h, DeviceKind::kNic);
    if (fg < g || fn < n) continue;
    int spread = 1;
    if (g > 0) {
      for (uint32_t p : cluster_->host_pools(h)) {
        if (cluster_->pools()[p].kind == DeviceKind::kGpu && free_in_pool_[p] >= g) {
          spread = 0;
          break;
        }
      }
    } else {
      spread = 0;
    }
    std::tuple<int, uint32_t, uint32_t> key{spread, g > 0 ? fg - g : fn - n, h};
    if (key < best_key) {
      best_key = key;
      best_host = static_cast<int>(h);
    }
  }
  if (best_host >= 0) {
    const uint32_t h = static_cast<uint32_t>(best_host);
    std::vector<uint32_t> gpus, nics;
    if (!PickGpus(h, g, -1, &gpus) || !PickNics(h, n, gpus, &nics)) return false;
    emit(h, gpus);
    emit(h, nics);
    return true;
  }
  if (request.locality == HZ_LOC_SAME_HOST) return false;

  // ANY across hosts: best-fit host for the rest, else the host with the most
  // free GPUs; NICs follow the GPUs, spread in the same proportion.
  std::vector<std::pair<uint32_t, uint32_t>> plan;  // (host, gpus)
  std::vector<bool> chosen(hosts, false);
  uint32_t remaining = g;
  while (remaining > 0) {
    int best = -1;
    for (uint32_t h = 0; h < hosts; ++h) {
      if (chosen[h]) continue;
      uint32_t f = FreeOnHost(h, DeviceKind::kGpu);
      if (f >= remaining &&
          (best < 0 || f < FreeOnHost(static_cast<uint32_t>(best), DeviceKind::kGpu))) {
        best = static_cast<int>(h);
      }
    }
    if (best < 0) {
      for (uint32_t h = 0; h < hosts; ++h) {
        if (chosen[h] || FreeOnHost(h, DeviceKind::kGpu) == 0) continue;
        if (best < 0 || FreeOnHost(h, DeviceKind::kGpu) >
                            FreeOnHost(static_cast<uint32_t>(best), DeviceKind::kGpu)) {
          best = static_cast<int>(h);
        }
      }
    }
    if (best < 0) return false;
    const uint32_t h = static_cast<uint32_t>(best);
    const uint32_t take = std::min(remaining, FreeOnHost(h, DeviceKind::kGpu));
    chosen[h] = true;
    plan.push_back({h, take});
    remaining -= take;
  }
  if (plan.empty()) {
    // NICs only, more than any host holds: take them host by host.
    uint32_t left = n;
    for (uint32_t h = 0; h < hosts && left > 0; ++h) {
      uint32_t take = std::min(left, FreeOnHost(h, DeviceKind::kNic));
      std::vector<uint32_t> nics;
      if (take > 0 && !PickNics(h, take, {}, &nics)) return false;
      emit(h, nics);
      left -= take;
    }
    return left == 0;
  }
  uint32_t nics_left = n;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto [h, count] = plan[i];
    // NICs in proportion to the GPUs, the last host taking the rest.
    uint32_t want = i + 1 == plan.size()
                        ? nics_left
                        : static_cast<uint32_t>((static_cast<uint64_t>(n) * count) / g);
    want = std::min(want, nics_left);
    std::vector<uint32_t> gpus, nics;
    if (!PickGpus(h, count, -1, &gpus) || !PickNics(h, want, gpus, &nics)) return false;
    nics_left -= want;
    emit(h, gpus);
    emit(h, nics);
  }
  return nics_left == 0;
}

bool Allocator::PlaceFirstFit(const Request& request, std::vector<DeviceRef>* out) const {
  const uint32_t g = request.gpus;
  const uint32_t n = request.nics;
  auto take_first = [&](uint32_t h, DeviceKind kind, uint32_t count) {
    const auto& devices = cluster_->host(h).devices;
    for (uint32_t i = 0; i < devices.size() && count > 0; ++i) {
      if (devices[i].kind == kind && Free({h, i})) {
        out->push_back({h, i});
        --count;
      }
    }
    return count == 0;
  };
  if (request.locality == HZ_LOC_SAME_GROUP) {
    const DeviceKind kind = g > 0 ? DeviceKind::kGpu : DeviceKind::kNic;
    const uint32_t need = g > 0 ? g : n;
    for (uint32_t p = 0; p < cluster_->pools().size(); ++p) {
      const Pool& pool = cluster_->pools()[p];
      if (pool.kind != kind || free_in_pool_[p] < need) continue;
      if (g > 0 && FreeOnHost(pool.host, DeviceKind::kNic) < n) continue;
      uint32_t left = need;
      for (uint32_t i : pool.devices) {
        if (left > 0 && Free({pool.host, i})) {
          out->push_back({pool.host, i});
          --left;
        }
      }
      return g > 0 ? take_first(pool.host, DeviceKind::kNic, n) : true;
    }
    return false;
  }
  for (uint32_t h = 0; h < cluster_->num_hosts(); ++h) {
    if (FreeOnHost(h, DeviceKind::kGpu) >= g && FreeOnHost(h, DeviceKind::kNic) >= n) {
      return take_first(h, DeviceKind::kGpu, g) && take_first(h, DeviceKind::kNic, n);
    }
  }
  if (request.locality == HZ_LOC_SAME_HOST) return false;
  uint32_t gl = g, nl = n;
  for (uint32_t h = 0; h < cluster_->num_hosts() && (gl > 0 || nl > 0); ++h) {
    uint32_t tg = std::min(gl, FreeOnHost(h, DeviceKind::kGpu));
    uint32_t tn = std::min(nl, FreeOnHost(h, DeviceKind::kNic));
    take_first(h, DeviceKind::kGpu, tg);
    take_first(h, DeviceKind::kNic, tn);
    gl -= tg;
    nl -= tn;
  }
  return gl == 0 && nl == 0;
}

Status Allocator::Allocate(const std::string& tenant, const Request& request, Allocation* out) {
  if (request.gpus + request.nics == 0 || request.gpus > kMaxRequest ||
      request.nics > kMaxRequest) {
    return Status::InvalidArgument("a request asks for 1 to 4096 GPUs and NICs");
  }
  if (request.locality > HZ_LOC_SAME_GROUP) return Status::InvalidArgument("unknown locality");
  std::vector<DeviceRef> devices;
  if (!Place(request, &devices)) {
    return Status::Limit("not enough free devices for " + std::to_string(request.gpus) +
                         " GPUs and " + std::to_string(request.nics) + " NICs");
  }
  return AllocateDevices(tenant, request, devices, out);
}

Status Allocator::AddGroupMates(std::vector<DeviceRef>* devices) const {
  std::set<DeviceRef> have(devices->begin(), devices->end());
  for (size_t k = 0; k < devices->size(); ++k) {  // grows while it runs
    const DeviceRef d = (*devices)[k];
    const HostInventory& inv = cluster_->host(d.host);
    const int group = inv.devices[d.index].iommu_group;
    if (group < 0) continue;
    for (uint32_t i = 0; i < inv.devices.size(); ++i) {
      const DeviceRef m{d.host, i};
      if (inv.devices[i].iommu_group != group || have.count(m)) continue;
      if (!Free(m)) {
        return Status::State("IOMMU group " + std::to_string(group) + " of " +
                             inv.devices[d.index].bdf + " also holds " + inv.devices[i].bdf +
                             ", which is not free");
      }
      have.insert(m);
      devices->push_back(m);
    }
  }
  return Status::Ok();
}

Status Allocator::AllocateDevices(const std::string& tenant, const Request& request,
                                  const std::vector<DeviceRef>& requested, Allocation* out) {
  if (requested.empty()) return Status::InvalidArgument("no devices");
  std::set<DeviceRef> seen;
  for (DeviceRef d : requested) {
    if (!cluster_->Valid(d)) return Status::InvalidArgument("unknown device");
    if (!Free(d)) {
      return Status::State(cluster_->device(d).bdf + " is not free");
    }
    if (!seen.insert(d).second) return Status::InvalidArgument("device listed twice");
  }
  // An IOMMU group goes to one tenant whole: its other devices join the allocation.
  std::vector<DeviceRef> devices = requested;
  if (Status s = AddGroupMates(&devices); !s.ok()) return s;
  seen.insert(devices.begin(), devices.end());
  Allocation a;
  a.id = next_id_++;
  a.tenant = tenant;
  a.request = request;
  a.devices.assign(seen.begin(), seen.end());
  for (DeviceRef d : a.devices) Own(d, a.id);
  if (out) *out = a;
  allocations_.emplace(a.id, std::move(a));
  return Status::Ok();
}

Status Allocator::Release(uint64_t allocation_id) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) {
    return Status::NotFound("no allocation " + std::to_string(allocation_id));
  }
  for (DeviceRef d : it->second.devices) Disown(d);
  allocations_.erase(it);
  return Status::Ok();
}

Status Allocator::RemoveDevice(DeviceRef device) {
  if (!cluster_->Valid(device)) return Status::InvalidArgument("unknown device");
  uint64_t id = Owner(device);
  if (id == 0) return Status::State(cluster_->device(device).bdf + " is not allocated");
  Allocation& a = allocations_.at(id);
  std::erase(a.devices, device);
  Disown(device);
  if (a.devices.empty()) allocations_.erase(id);
  return Status::Ok();
}

Status Allocator::SplitOff(const std::vector<DeviceRef>& moving, Allocation* out) {
  // A copy: `moving` may be the source allocation's own list, changed below.
  const std::vector<DeviceRef> devices = moving;
  if (devices.empty()) return Status::InvalidArgument("no devices");
  for (DeviceRef d : devices) {
    if (!cluster_->Valid(d)) return Status::InvalidArgument("unknown device");
  }
  const uint64_t from = Owner(devices.front());
  for (DeviceRef d : devices) {
    if (from == 0 || Owner(d) != from) {
      return Status::InvalidArgument("the devices are not all of one allocation");
    }
  }
  Allocation& source = allocations_.at(from);
  Allocation a;
  a.id = next_id_++;
  a.tenant = source.tenant;
  a.request.locality = source.request.locality;
  for (DeviceRef d : devices) {
    if (std::find(a.devices.begin(), a.devices.end(), d) != a.devices.end()) continue;
    (cluster_->device(d).kind == DeviceKind::kGpu ? a.request.gpus : a.request.nics) += 1;
    std::erase(source.devices, d);
    Own(d, a.id);  // owned all along: no free count moves
    a.devices.push_back(d);
  }
  std::sort(a.devices.begin(), a.devices.end());
  if (source.devices.empty()) allocations_.erase(from);
  if (out) *out = a;
  allocations_.emplace(a.id, std::move(a));
  return Status::Ok();
}

Status Allocator::SetFailed(DeviceRef device, bool failed) {
  if (!cluster_->Valid(device)) return Status::InvalidArgument("unknown device");
  if (failed_[device.host][device.index] == failed) return Status::Ok();
  bool was_free = Free(device);
  failed_[device.host][device.index] = failed;
  bool now_free = Free(device);
  const int k = KindIndex(cluster_->device(device).kind);
  if (was_free && !now_free) {
    --free_in_pool_[cluster_->PoolOf(device)];
    --free_on_host_[device.host][k];
  } else if (!was_free && now_free) {
    ++free_in_pool_[cluster_->PoolOf(device)];
    ++free_on_host_[device.host][k];
  }
  return Status::Ok();
}

std::string Allocator::HostName(uint32_t h) const {
  const std::string& name = cluster_->host(h).name;
  return name.empty() ? "#" + std::to_string(h) : name;
}

void Allocator::ToJson(nlohmann::json* out) const {
  using nlohmann::json;
  auto ref = [&](DeviceRef d) {
    return json{{"host", HostName(d.host)}, {"bdf", cluster_->device(d).bdf}};
  };
  json failed = json::array();
  for (uint32_t h = 0; h < failed_.size(); ++h) {
    for (uint32_t i = 0; i < failed_[h].size(); ++i) {
      if (failed_[h][i]) failed.push_back(ref({h, i}));
    }
  }
  json allocs = json::array();
  for (const auto& [id, a] : allocations_) {
    json devices = json::array();
    for (DeviceRef d : a.devices) devices.push_back(ref(d));
    allocs.push_back({{"id", id},
                      {"tenant", a.tenant},
                      {"gpus", a.request.gpus},
                      {"nics", a.request.nics},
                      {"locality", static_cast<int>(a.request.locality)},
                      {"devices", std::move(devices)}});
  }
  *out = json{{"next_id", next_id_}, {"failed", std::move(failed)}, {"allocations", allocs}};
}

Status Allocator::FromJson(const nlohmann::json& in) {
  Allocator fresh(cluster_, policy_);
  std::map<std::string, uint32_t> hosts;
  for (uint32_t h = 0; h < cluster_->num_hosts(); ++h) hosts[HostName(h)] = h;
  auto find = [&](const nlohmann::json& j, DeviceRef* d) -> Status {
    if (!j.is_object() || !j.contains("host") || !j.contains("bdf") || !j["host"].is_string() ||
        !j["bdf"].is_string()) {
      return Status::Corruption("device entry is not {host, bdf}");
    }
    auto h = hosts.find(j["host"].get<std::string>());
    if (h == hosts.end()) {
      return Status::Corruption("state names unknown host " + j["host"].get<std::string>());
    }
    int index = cluster_->host(h->second).Find(j["bdf"].get<std::string>());
    if (index < 0) {
      return Status::Corruption("state names unknown device " + j["bdf"].get<std::string>());
    }
    *d = {h->second, static_cast<uint32_t>(index)};
    return Status::Ok();
  };
  try {
    if (!in.is_object()) return Status::Corruption("allocator state is not an object");
    for (const auto& f : in.at("failed")) {
      DeviceRef d;
      Status s = find(f, &d);
      if (!s.ok()) return s;
      fresh.SetFailed(d, true);
    }
    uint64_t max_id = 0;
    for (const auto& a : in.at("allocations")) {
      Allocation al;
      al.id = a.at("id").get<uint64_t>();
      al.tenant = a.at("tenant").get<std::string>();
      al.request.gpus = a.at("gpus").get<uint32_t>();
      al.request.nics = a.at("nics").get<uint32_t>();
      int loc = a.at("locality").get<int>();
      if (loc < 0 || loc > HZ_LOC_SAME_GROUP) return Status::Corruption("bad locality");
      al.request.locality = static_cast<uint8_t>(loc);
      if (al.id == 0 || fresh.allocations_.count(al.id)) {
        return Status::Corruption("allocation id " + std::to_string(al.id) + " invalid or reused");
      }
      for (const auto& dj : a.at("devices")) {
        DeviceRef d;
        Status s = find(dj, &d);
        if (!s.ok()) return s;
        if (fresh.Owner(d) != 0) {
          return Status::Corruption(cluster_->device(d).bdf + " is owned by two allocations");
        }
        fresh.Own(d, al.id);
        al.devices.push_back(d);
      }
      if (al.devices.empty()) return Status::Corruption("allocation without devices");
      std::sort(al.devices.begin(), al.devices.end());
      max_id = std::max(max_id, al.id);
      fresh.allocations_.emplace(al.id, std::move(al));
    }
    fresh.next_id_ = std::max(in.at("next_id").get<uint64_t>(), max_id + 1);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(std::string("allocator state: ") + e.what());
  }
  *this = std::move(fresh);
  return Status::Ok();
}

}  // namespace hz::scheduler
