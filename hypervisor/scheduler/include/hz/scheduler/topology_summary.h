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

struct TopologySummary {
  std::vector<uint8_t> bytes;      // the TOPOLOGY_GET result
  std::vector<DeviceRef> devices;  // tenant index -> physical device (private)
  // Tenant-visible index of a device, or kNoIndex when it is not in the summary.
  uint32_t IndexOf(DeviceRef device) const;
};

// Builds the summary of `devices` (the tenant's whole allocation, any order,
// no duplicates; at most 65535 devices).
TopologySummary BuildTopologySummary(const Cluster& cluster, const std::vector<DeviceRef>& devices,
                                     uint64_t tenant_seed);

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
