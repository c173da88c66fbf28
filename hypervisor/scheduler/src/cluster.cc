#include "hz/scheduler/cluster.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <tuple>

namespace hz::scheduler {

namespace {

// PCIe payload bandwidth of a link in GB/s (128b/130b encoding from Gen3 on).
double LinkGBs(const Device& d) {
  double gts = d.link_gts > 0 ? d.link_gts : 16.0;
  double width = d.link_width > 0 ? d.link_width : 16.0;
  double enc = gts >= 8.0 ? 128.0 / 130.0 : 0.8;
  return gts * width * enc / 8.0;
}

constexpr double kNvlinkGBs = 450.0;    // NVLink 4 class, one direction
constexpr double kCrossHostGBs = 25.0;  // one 200 Gb/s rail, after protocol overhead

}  // namespace

Cluster::Cluster(std::vector<HostInventory> hosts) : hosts_(std::move(hosts)) {
  const size_t n = hosts_.size();
  host_pools_.resize(n);
  pool_of_.resize(n);
  switch_of_.resize(n);
  slot_.resize(n);
  for (uint32_t h = 0; h < n; ++h) {
    const HostInventory& inv = hosts_[h];
    // Switches are numbered by the lowest NVLink island below them, then
    // their NUMA node, then address. Placement breaks ties in this order, so
    // two machines with the same topology but other PCI addresses make the
    // same choices (what a tenant sees never depends on an address).
    std::map<std::string, std::tuple<int, int, std::string>> keys;
    for (const Device& d : inv.devices) {
      if (d.switch_bdf.empty()) continue;
      auto [it, fresh] = keys.emplace(
          d.switch_bdf, std::tuple<int, int, std::string>{INT32_MAX, d.numa_node, d.switch_bdf});
      if (d.kind == DeviceKind::kGpu && d.island >= 0) {
        std::get<0>(it->second) = std::min(std::get<0>(it->second), d.island);
      }
      (void)fresh;
    }
    std::vector<std::tuple<int, int, std::string>> order;
    for (const auto& [bdf, key] : keys) order.push_back(key);
    std::sort(order.begin(), order.end());
    std::map<std::string, int> switches;
    for (size_t k = 0; k < order.size(); ++k) switches[std::get<2>(order[k])] = static_cast<int>(k);
    switch_of_[h].assign(inv.devices.size(), -1);
    pool_of_[h].assign(inv.devices.size(), 0);
    // Pool keys: (kind, 0 island / 1 switch / 2 single, number), in a fixed order.
    std::map<std::tuple<int, int, int>, std::vector<uint32_t>> keyed;
    for (uint32_t i = 0; i < inv.devices.size(); ++i) {
      const Device& d = inv.devices[i];
      if (!d.switch_bdf.empty()) switch_of_[h][i] = switches[d.switch_bdf];
      int kind = static_cast<int>(d.kind);
      std::tuple<int, int, int> key;
      if (d.kind == DeviceKind::kGpu && d.island >= 0) {
        key = {kind, 0, d.island};
      } else if (switch_of_[h][i] >= 0) {
        key = {kind, 1, switch_of_[h][i]};
      } else {
        key = {kind, 2, static_cast<int>(i)};
      }
      keyed[key].push_back(i);
    }
    // Slots: by switch, island, kind; the address only breaks ties between
    // devices in the same place (which are interchangeable).
    std::vector<std::tuple<int, int, int, uint32_t>> by_place;
    for (uint32_t i = 0; i < inv.devices.size(); ++i) {
      const Device& d = inv.devices[i];
      by_place.push_back({switch_of_[h][i] < 0 ? INT32_MAX : switch_of_[h][i],
                          d.island < 0 ? INT32_MAX : d.island, static_cast<int>(d.kind), i});
    }
    std::sort(by_place.begin(), by_place.end());
    slot_[h].assign(inv.devices.size(), 0);
    for (uint32_t k = 0; k < by_place.size(); ++k) slot_[h][std::get<3>(by_place[k])] = k;
    for (auto& [key, members] : keyed) {
      uint32_t id = static_cast<uint32_t>(pools_.size());
      Pool p;
      p.host = h;
      p.kind = static_cast<DeviceKind>(std::get<0>(key));
      p.island = std::get<1>(key) == 0;
      p.devices = members;
      for (uint32_t m : members) pool_of_[h][m] = id;
      host_pools_[h].push_back(id);
      pools_.push_back(std::move(p));
    }
  }
}

hz_bw_class Cluster::Bandwidth(DeviceRef a, DeviceRef b) const {
  if (a.host != b.host) return HZ_BW_LOW;
  const Device& da = device(a);
  const Device& db = device(b);
  if (a.index == b.index) return HZ_BW_NONE;
  if (da.kind == DeviceKind::kGpu && db.kind == DeviceKind::kGpu && da.island >= 0 &&
      da.island == db.island) {
    return HZ_BW_ULTRA;
  }
  int sa = SwitchOf(a);
  if (sa >= 0 && sa == SwitchOf(b)) return HZ_BW_HIGH;
  return HZ_BW_MEDIUM;
}

double Cluster::TrueBandwidthGBs(DeviceRef a, DeviceRef b) const {
  if (a.host != b.host) return kCrossHostGBs;
  const Device& da = device(a);
  const Device& db = device(b);
  double link = std::min(LinkGBs(da), LinkGBs(db));
  switch (Bandwidth(a, b)) {
    case HZ_BW_ULTRA:
      return kNvlinkGBs;
    case HZ_BW_HIGH:
      return 0.8 * link;  // switch peer-to-peer, close to line rate
    default:
      break;
  }
  // Through the host bridge: within one socket, or across the CPU interconnect.
  bool same_node = da.numa_node == db.numa_node;
  return same_node ? 0.6 * link : 0.35 * link;
}

}  // namespace hz::scheduler
