// Inventory of passthrough devices on one host: GPUs and NICs discovered
// from sysfs, completed by the provider inventory file for what sysfs cannot
// show (NVLink/xGMI islands, NIC rails, serial numbers, excluded devices).
//
// Everything here is provider-private. Nothing in a HostInventory may reach a
// tenant; topology_summary.h is the only path from it to tenant-visible bytes.
#ifndef HZ_SCHEDULER_INVENTORY_H_
#define HZ_SCHEDULER_INVENTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hz/common/status.h"

namespace hz::scheduler {

enum class DeviceKind : uint8_t { kGpu = 0, kNic = 1 };
const char* KindName(DeviceKind kind);

struct Device {
  std::string bdf;  // "dddd:bb:dd.f"
  DeviceKind kind = DeviceKind::kGpu;
  uint16_t vendor = 0;
  uint16_t device_id = 0;
  uint32_t pci_class = 0;  // 24-bit class code
  int numa_node = -1;      // -1: unknown or single-node machine
  int iommu_group = -1;    // -1: no IOMMU group (no IOMMU)
  // Bridges from the root port down to the device's parent, in order.
  std::vector<std::string> pcie_path;
  // Upstream port of the nearest PCIe switch above the device; empty when the
  // device sits directly on a root port.
  std::string switch_bdf;
  std::string driver;       // bound driver name; empty when unbound
  double link_gts = 0;      // current_link_speed in GT/s; 0 when unknown
  uint32_t link_width = 0;  // current_link_width; 0 when unknown
  int island = -1;          // NVLink/xGMI island (index into islands); -1 none
  int rail = -1;            // NIC rail, or the rail a GPU is aligned with; -1 none
  std::string serial;       // from the provider file; empty when unknown
};

struct HostInventory {
  std::string name;                       // the provider's host name (never shown to tenants)
  std::vector<Device> devices;            // sorted by bdf
  std::vector<std::vector<int>> islands;  // device indices per NVLink island

  // Index of the device with this bdf, or -1.
  int Find(const std::string& bdf) const;
  size_t Count(DeviceKind kind) const;
};

// True for a PCI address "dddd:bb:dd.f" (lower-case hex).
bool IsBdf(const std::string& s);

// Which PCI functions are passthrough candidates: GPUs are display-class
// (VGA 0x0300, 3D 0x0302) functions of NVIDIA or AMD; NICs are Ethernet
// (0x0200) or InfiniBand (0x0207) functions of any vendor.
bool IsGpu(uint16_t vendor, uint32_t pci_class);
bool IsNic(uint32_t pci_class);

// Kinds the provider file assigns by PCI id, (vendor << 16) | device, for
// functions the class-code rules above do not recognise (an accelerator with a
// vendor-specific class, or an emulated stand-in). They win over those rules.
using KindOverrides = std::map<uint32_t, DeviceKind>;

// Discovers GPUs and NICs under <sysfs_root>/bus/pci/devices. Errors name the
// offending path: an unreadable or malformed attribute, a dangling link.
//
// The nearest PCIe switch above a device is the deepest upstream port on its
// path, read from the port type in each bridge's PCIe capability
// (<dev>/config; the kernel shows the capabilities to root only). When a
// bridge's config cannot be read that far, the path is assumed to be made of
// PCIe ports only: [root port, upstream, downstream, ...], and the switch is
// the bridge two levels above the device.
Status DiscoverPci(const std::string& sysfs_root, HostInventory* out);
Status DiscoverPci(const std::string& sysfs_root, const KindOverrides& kinds, HostInventory* out);

// Reads the [kinds] table of a provider file:
//   [kinds] "vvvv:dddd" = "gpu" | "nic"      (lower-case hex vendor:device)
// Other keys are left to ApplyProviderText.
Status ReadProviderKinds(const std::string& text, const std::string& what, KindOverrides* out);

// Applies a provider inventory file (TOML):
//   host = "name"
//   exclude = ["bdf", ...]                  devices that stay with the host
//   nvlink_islands = [["bdf", ...], ...]     GPUs joined by NVLink/xGMI
//   [rails]   "bdf" = n                      NIC rail; for a GPU, its aligned rail
//   [serials] "bdf" = "serial"
//   [kinds]   "vvvv:dddd" = "gpu"|"nic"      read at discovery (ReadProviderKinds)
// Every bdf must name a discovered device (islands: GPUs only, each in at
// most one island).
Status ApplyProviderFile(const std::string& path, HostInventory* inventory);
Status ApplyProviderText(const std::string& text, const std::string& what,
                         HostInventory* inventory);

// DiscoverPci (with the provider file's [kinds]) then, when provider_file is
// not empty, ApplyProviderText.
Status LoadHostInventory(const std::string& sysfs_root, const std::string& provider_file,
                         HostInventory* out);

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_INVENTORY_H_
