// The tenant's view of its allocation: the TOPOLOGY_GET result of SPEC.md
// §7.7 (hz_topo_header, groups, devices) in canonical form, and the
// provider-private map from tenant-visible indices to physical devices.
//
// The bytes depend only on the shape of the allocation (counts, locality
// groups, bandwidth classes), never on PCI addresses, serials, switch, NUMA or
// IOMMU numbers, host names or other tenants, so topologically equivalent
// allocations give byte-identical summaries. Which physical device receives
// which index inside a group follows a per-tenant random order derived from
// the tenant's secret seed, stable while the device stays allocated.
#ifndef HZ_SCHEDULER_TOPOLOGY_SUMMARY_H_
#define HZ_SCHEDULER_TOPOLOGY_SUMMARY_H_

#include <cstdint>
#include <vector>

#include "hz/scheduler/cluster.h"
#include "protocol/harmonaize.h"

namespace hz::scheduler {

inline constexpr uint32_t kNoIndex = 0xffffffffu;

// The limits of the summary's format: 16-bit device and group counts, 8-bit
// host numbers.
inline constexpr uint32_t kMaxSummaryDevices = 65535;
inline constexpr uint32_t kMaxSummaryHosts = 256;

// Stands, in TopologySummary::devices, for a device on another host.
inline constexpr DeviceRef kOtherHostDevice{0xffffffffu, 0xffffffffu};

// A tenant's devices on one host as the other hosts of a cluster learn them:
// the signatures of its locality groups and the class between them. Nothing
// in it identifies a device or the host, so it may travel through the
// cluster store.
struct HostShape {
  struct Group {
    uint16_t gpus = 0;
    uint16_t nics = 0;
    uint8_t intra_bw = HZ_BW_NONE;
    bool operator==(const Group&) const = default;
  };
  std::vector<Group> groups;            // in the summary's order within a host
  uint8_t cross_group_bw = HZ_BW_NONE;  // between its groups; NONE for one group
  bool operator==(const HostShape&) const = default;
  uint32_t devices() const;
};

struct TopologySummary {
  std::vector<uint8_t> bytes;      // the TOPOLOGY_GET result
  std::vector<DeviceRef> devices;  // tenant index -> physical device (private)
  // Tenant-visible index of a device, or kNoIndex when it is not in the summary.
  uint32_t IndexOf(DeviceRef device) const;
};

// Builds the summary of `devices` (the tenant's allocation on the cluster's
// hosts, any order, no duplicates; at most 65535 devices) and, in a cluster of
// hosts, of its devices on other hosts, each host's given by its shape. Those
// take their place in the canonical order like any host and appear in
// `devices` as kOtherHostDevice; hosts that would overflow the format's counts
// are left out.
TopologySummary BuildTopologySummary(const Cluster& cluster, const std::vector<DeviceRef>& devices,
                                     uint64_t tenant_seed,
                                     const std::vector<HostShape>& other_hosts = {});

// The shape of `devices` (on one host of cluster), as another host puts it
// into its summaries.
HostShape ShapeOf(const Cluster& cluster, const std::vector<DeviceRef>& devices);

// A decoded summary, as a tenant reads it.
struct SummaryView {
  hz_topo_header header{};
  std::vector<hz_topo_group> groups;
  std::vector<hz_topo_device> devices;
};

// Decodes and checks a summary (sizes, group and index numbering, kinds,
// counts that add up). Tenant-side code and tests use it.
Status ParseTopologySummary(const std::vector<uint8_t>& bytes, SummaryView* out);

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_TOPOLOGY_SUMMARY_H_
