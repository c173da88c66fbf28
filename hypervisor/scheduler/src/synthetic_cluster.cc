#include "hz/scheduler/synthetic_cluster.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace hz::scheduler {

HostInventory SyntheticHost(const std::string& name, int gpus, int host_number) {
  HostInventory inv;
  inv.name = name;
  const int switches = std::max(1, (gpus + 1) / 2);
  int gpu = 0;
  for (int s = 0; s < switches; ++s) {
    const int base = 0x18 + 0x20 * s;
    char sw[32];
    std::snprintf(sw, sizeof(sw), "0000:%02x:00.0", base + 1);
    for (int port = 0; port < 4; ++port) {
      const bool is_gpu = port < 2;
      if (is_gpu && gpu >= gpus) continue;
      if (!is_gpu && port - 2 >= std::min(2, gpus - 2 * s)) continue;
      Device d;
      char bdf[32];
      std::snprintf(bdf, sizeof(bdf), "0000:%02x:00.0", base + 3 + port);
      d.bdf = bdf;
      d.kind = is_gpu ? DeviceKind::kGpu : DeviceKind::kNic;
      d.vendor = is_gpu ? 0x10de : 0x15b3;
      d.pci_class = is_gpu ? 0x030200 : 0x020700;
      d.numa_node = s < (switches + 1) / 2 ? 0 : 1;
      d.iommu_group = 10 + 8 * s + port;
      d.pcie_path = {"root", sw, "down"};
      d.switch_bdf = sw;
      d.link_gts = 32;
      d.link_width = 16;
      d.rail = is_gpu ? 2 * s + port : 2 * s + port - 2;
      char serial[32];
      std::snprintf(serial, sizeof(serial), "SN%05d%03d", host_number, 8 * s + port);
      d.serial = serial;
      if (is_gpu) ++gpu;
      inv.devices.push_back(std::move(d));
    }
  }
  std::sort(inv.devices.begin(), inv.devices.end(),
            [](const Device& a, const Device& b) { return a.bdf < b.bdf; });
  // Islands: consecutive GPUs in groups of 4 (2 for a 2-GPU host).
  std::vector<int> gpu_idx;
  for (int i = 0; i < static_cast<int>(inv.devices.size()); ++i) {
    if (inv.devices[i].kind == DeviceKind::kGpu) gpu_idx.push_back(i);
  }
  for (size_t k = 0; k + 1 < gpu_idx.size(); k += 4) {
    std::vector<int> island;
    for (size_t j = k; j < std::min(gpu_idx.size(), k + 4); ++j) island.push_back(gpu_idx[j]);
    for (int i : island) inv.devices[i].island = static_cast<int>(inv.islands.size());
    inv.islands.push_back(island);
  }
  return inv;
}

Cluster UniformCluster(int hosts, int gpus) {
  std::vector<HostInventory> list;
  for (int h = 0; h < hosts; ++h) {
    char name[32];
    std::snprintf(name, sizeof(name), "node-%04d", h);
    list.push_back(SyntheticHost(name, gpus, h));
  }
  return Cluster(std::move(list));
}

}  // namespace hz::scheduler
