#include "hz/scheduler/topology_summary.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

namespace hz::scheduler {

namespace {

using Signature = std::tuple<uint16_t, uint16_t, uint8_t>;  // gpus, nics, intra_bw

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The per-tenant random rank of a device: a keyed hash of its topological
// slot, so it is stable while the device stays allocated, unrelated across
// tenants, and independent of PCI addresses.
uint64_t Rank(const Cluster& cluster, DeviceRef d, uint64_t seed) {
  return SplitMix(seed ^ SplitMix((static_cast<uint64_t>(d.host) << 32) | cluster.Slot(d)));
}

int Find(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

void PutLe16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}
void PutLe32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t GetLe16(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint16_t>(b[at] | (b[at + 1] << 8));
}
uint32_t GetLe32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[at + i]) << (8 * i);
  return v;
}

// A locality group: devices of one host joined by NVLink or a shared PCIe
// switch. A group of another host holds kOtherHostDevice for each device.
struct Group {
  std::vector<DeviceRef> gpus;
  std::vector<DeviceRef> nics;
  uint8_t intra_bw = HZ_BW_NONE;
  uint32_t first_slot = UINT32_MAX;  // orders groups of equal signature
  Signature sig() const {
    return {static_cast<uint16_t>(gpus.size()), static_cast<uint16_t>(nics.size()), intra_bw};
  }
  std::vector<DeviceRef> members() const {
    std::vector<DeviceRef> m = gpus;
    m.insert(m.end(), nics.begin(), nics.end());
    return m;
  }
};

struct HostEntry {
  uint32_t gpus = 0, nics = 0;
  std::vector<Signature> sigs;
  std::vector<Group> groups;  // by decreasing signature
  uint8_t cross_group = HZ_BW_NONE;
};

// The lower of two classes, where NONE means "no path to compare".
uint8_t Lowest(uint8_t a, uint8_t b) {
  if (a == HZ_BW_NONE) return b;
  if (b == HZ_BW_NONE) return a;
  return std::min(a, b);
}

// The class among a set of devices of one host (NONE for fewer than two).
uint8_t ClassAmong(const Cluster& cluster, const std::vector<DeviceRef>& set) {
  uint8_t bw = HZ_BW_NONE;
  for (size_t a = 0; a < set.size(); ++a) {
    for (size_t b = a + 1; b < set.size(); ++b) bw = Lowest(bw, cluster.Bandwidth(set[a], set[b]));
  }
  return bw;
}

// The locality groups of devices (sorted, unique), by host: union-find over
// the pairs with a HIGH or ULTRA path.
std::map<uint32_t, std::vector<Group>> GroupsByHost(const Cluster& cluster,
                                                    const std::vector<DeviceRef>& devices) {
  const int n = static_cast<int>(devices.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (devices[a].host != devices[b].host) continue;
      if (cluster.Bandwidth(devices[a], devices[b]) >= HZ_BW_HIGH) {
        parent[Find(parent, a)] = Find(parent, b);
      }
    }
  }
  std::map<int, std::pair<uint32_t, Group>> by_root;
  for (int i = 0; i < n; ++i) {
    auto& [host, g] = by_root[Find(parent, i)];
    host = devices[i].host;
    g.first_slot = std::min(g.first_slot, cluster.Slot(devices[i]));
    (cluster.device(devices[i]).kind == DeviceKind::kGpu ? g.gpus : g.nics).push_back(devices[i]);
  }
  std::map<uint32_t, std::vector<Group>> by_host;
  for (auto& [root, entry] : by_root) {
    Group& g = entry.second;
    // intra_bw: among the GPUs when the group has two or more (what
    // collectives use), else among all its devices; NONE for one device.
    g.intra_bw = ClassAmong(cluster, g.gpus.size() >= 2 ? g.gpus : g.members());
    by_host[entry.first].push_back(std::move(g));
  }
  return by_host;
}

// The class between a host's groups (the lowest over their pairs).
uint8_t CrossGroupBandwidth(const Cluster& cluster, const std::vector<Group>& groups) {
  uint8_t bw = HZ_BW_NONE;
  for (size_t a = 0; a < groups.size(); ++a) {
    for (size_t b = a + 1; b < groups.size(); ++b) {
      for (DeviceRef x : groups[a].members()) {
        for (DeviceRef y : groups[b].members()) bw = Lowest(bw, cluster.Bandwidth(x, y));
      }
    }
  }
  return bw;
}

std::vector<Group> GroupsOf(const HostShape& shape) {
  std::vector<Group> groups;
  for (const HostShape::Group& s : shape.groups) {
    Group g;
    g.gpus.assign(s.gpus, kOtherHostDevice);
    g.nics.assign(s.nics, kOtherHostDevice);
    g.intra_bw = s.intra_bw;
    groups.push_back(std::move(g));
  }
  return groups;
}

HostEntry MakeHost(std::vector<Group> groups, uint8_t cross_group) {
  // Equal signatures are interchangeable in the bytes; which physical group
  // takes the lower indices follows the topological slot, not the address.
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.sig() != b.sig()) return a.sig() > b.sig();
    return a.first_slot < b.first_slot;
  });
  HostEntry e;
  for (const Group& g : groups) {
    e.gpus += static_cast<uint32_t>(g.gpus.size());
    e.nics += static_cast<uint32_t>(g.nics.size());
    e.sigs.push_back(g.sig());
  }
  e.groups = std::move(groups);
  e.cross_group = cross_group;
  return e;
}

// The bytes of hosts (in canonical order), and the private index map.
TopologySummary Encode(const Cluster& cluster, const std::vector<HostEntry>& hosts,
                       uint64_t tenant_seed) {
  size_t num_groups = 0, num_devices = 0;
  uint8_t cross_group = HZ_BW_NONE;
  for (const HostEntry& h : hosts) {
    num_groups += h.groups.size();
    num_devices += h.gpus + h.nics;
    cross_group = Lowest(cross_group, h.cross_group);
  }
  TopologySummary out;
  out.bytes.assign(sizeof(hz_topo_header) + 8 * num_groups + 8 * num_devices, 0);
  std::vector<uint8_t>& b = out.bytes;
  PutLe32(b, 0, 1);
  PutLe16(b, 4, static_cast<uint16_t>(num_devices));
  PutLe16(b, 6, static_cast<uint16_t>(num_groups));
  b[8] = cross_group;
  b[9] = hosts.size() > 1 ? HZ_BW_LOW : HZ_BW_NONE;
  PutLe16(b, 10, static_cast<uint16_t>(hosts.size()));
  size_t group_at = sizeof(hz_topo_header);
  size_t device_at = group_at + 8 * num_groups;
  uint16_t group_no = 0;
  for (size_t hi = 0; hi < hosts.size(); ++hi) {
    for (const Group& g : hosts[hi].groups) {
      PutLe16(b, group_at, group_no);
      PutLe16(b, group_at + 2, static_cast<uint16_t>(g.gpus.size()));
      PutLe16(b, group_at + 4, static_cast<uint16_t>(g.nics.size()));
      b[group_at + 6] = g.intra_bw;
      b[group_at + 7] = static_cast<uint8_t>(hi);
      group_at += 8;
      for (const auto* list : {&g.gpus, &g.nics}) {
        std::vector<std::pair<uint64_t, DeviceRef>> ranked;
        for (DeviceRef d : *list) {
          ranked.push_back({d == kOtherHostDevice ? 0 : Rank(cluster, d, tenant_seed), d});
        }
        std::sort(ranked.begin(), ranked.end());
        for (const auto& [rank, d] : ranked) {
          const uint16_t index = static_cast<uint16_t>(out.devices.size());
          PutLe16(b, device_at, index);
          b[device_at + 2] = list == &g.gpus ? HZ_DEV_GPU : HZ_DEV_NIC;
          PutLe16(b, device_at + 4, group_no);
          device_at += 8;
          out.devices.push_back(d);
        }
      }
      ++group_no;
    }
  }
  return out;
}

}  // namespace

uint32_t HostShape::devices() const {
  uint32_t n = 0;
  for (const Group& g : groups) n += g.gpus + g.nics;
  return n;
}

uint32_t TopologySummary::IndexOf(DeviceRef device) const {
  if (device == kOtherHostDevice) return kNoIndex;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == device) return static_cast<uint32_t>(i);
  }
  return kNoIndex;
}

HostShape ShapeOf(const Cluster& cluster, const std::vector<DeviceRef>& input) {
  std::vector<DeviceRef> devices = input;
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  HostShape shape;
  for (auto& [h, groups] : GroupsByHost(cluster, devices)) {
    const HostEntry e = MakeHost(std::move(groups), HZ_BW_NONE);
    shape.cross_group_bw = Lowest(shape.cross_group_bw, CrossGroupBandwidth(cluster, e.groups));
    for (const Group& g : e.groups) {
      shape.groups.push_back(
          {static_cast<uint16_t>(g.gpus.size()), static_cast<uint16_t>(g.nics.size()), g.intra_bw});
    }
  }
  return shape;
}

TopologySummary BuildTopologySummary(const Cluster& cluster, const std::vector<DeviceRef>& input,
                                     uint64_t tenant_seed,
                                     const std::vector<HostShape>& other_hosts) {
  std::vector<DeviceRef> devices = input;
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  if (devices.size() > kMaxSummaryDevices) devices.resize(kMaxSummaryDevices);

  std::vector<HostEntry> hosts;
  for (auto& [h, groups] : GroupsByHost(cluster, devices)) {
    const uint8_t cross_group = CrossGroupBandwidth(cluster, groups);
    hosts.push_back(MakeHost(std::move(groups), cross_group));
  }
  // Other hosts follow while the format's counts allow (16-bit devices and
  // groups, 8-bit host numbers); this host's devices always fit.
  size_t total = devices.size(), num_groups = 0;
  for (const HostEntry& h : hosts) num_groups += h.groups.size();
  for (const HostShape& shape : other_hosts) {
    if (hosts.size() >= kMaxSummaryHosts || shape.groups.empty()) continue;
    if (total + shape.devices() > kMaxSummaryDevices ||
        num_groups + shape.groups.size() > kMaxSummaryDevices) {
      continue;
    }
    total += shape.devices();
    num_groups += shape.groups.size();
    hosts.push_back(MakeHost(GroupsOf(shape), shape.cross_group_bw));
  }
  // Canonical order: hosts by decreasing (GPUs, NICs, sorted signatures).
  std::stable_sort(hosts.begin(), hosts.end(), [](const HostEntry& a, const HostEntry& b) {
    return std::tie(a.gpus, a.nics, a.sigs) > std::tie(b.gpus, b.nics, b.sigs);
  });
  return Encode(cluster, hosts, tenant_seed);
}

Status ParseTopologySummary(const std::vector<uint8_t>& b, SummaryView* out) {
  if (b.size() < sizeof(hz_topo_header)) return Status::InvalidArgument("summary too short");
  SummaryView v;
  v.header.version = GetLe32(b, 0);
  v.header.num_devices = GetLe16(b, 4);
  v.header.num_groups = GetLe16(b, 6);
  v.header.cross_group_bw = b[8];
  v.header.cross_host_bw = b[9];
  v.header.num_hosts = GetLe16(b, 10);
  v.header.reserved = GetLe32(b, 12);
  if (v.header.version != 1) return Status::InvalidArgument("summary version is not 1");
  if (v.header.reserved != 0) return Status::InvalidArgument("reserved header bytes not zero");
  const size_t want = sizeof(hz_topo_header) + 8u * v.header.num_groups + 8u * v.header.num_devices;
  if (b.size() != want) return Status::InvalidArgument("summary size does not match its counts");
  if (v.header.cross_group_bw > HZ_BW_ULTRA || v.header.cross_host_bw > HZ_BW_ULTRA) {
    return Status::InvalidArgument("unknown bandwidth class");
  }
  size_t at = sizeof(hz_topo_header);
  std::vector<uint32_t> gpus(v.header.num_groups), nics(v.header.num_groups);
  for (uint16_t i = 0; i < v.header.num_groups; ++i, at += 8) {
    hz_topo_group g{};
    g.group = GetLe16(b, at);
    g.gpus = GetLe16(b, at + 2);
    g.nics = GetLe16(b, at + 4);
    g.intra_bw = b[at + 6];
    g.host = b[at + 7];
    if (g.group != i) return Status::InvalidArgument("group numbers out of order");
    if (g.host >= v.header.num_hosts) return Status::InvalidArgument("group host out of range");
    if (g.intra_bw > HZ_BW_ULTRA) return Status::InvalidArgument("unknown bandwidth class");
    v.groups.push_back(g);
  }
  for (uint16_t i = 0; i < v.header.num_devices; ++i, at += 8) {
    hz_topo_device d{};
    d.index = GetLe16(b, at);
    d.kind = b[at + 2];
    d.reserved = b[at + 3];
    d.group = GetLe16(b, at + 4);
    d.reserved2 = GetLe16(b, at + 6);
    if (d.index != i) return Status::InvalidArgument("device indices out of order");
    if (d.kind > HZ_DEV_NIC || d.reserved != 0 || d.reserved2 != 0) {
      return Status::InvalidArgument("bad device record");
    }
    if (d.group >= v.header.num_groups) return Status::InvalidArgument("device group out of range");
    (d.kind == HZ_DEV_GPU ? gpus : nics)[d.group]++;
    v.devices.push_back(d);
  }
  for (uint16_t i = 0; i < v.header.num_groups; ++i) {
    if (gpus[i] != v.groups[i].gpus || nics[i] != v.groups[i].nics) {
      return Status::InvalidArgument("group counts do not match the device records");
    }
  }
  *out = std::move(v);
  return Status::Ok();
}

}  // namespace hz::scheduler
