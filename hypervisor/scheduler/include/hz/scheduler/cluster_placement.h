// Placement across the hosts of a cluster (when one host cannot hold an
// allocation). Each host publishes a PlacementRecord of its devices in the
// cluster store (through its membership record); any host can then plan an
// allocation over all of them with the same Allocator that places on one
// host, and each host places its part itself.
//
// A record is provider-private, like the inventory it comes from: the
// fields placement looks at (kind, NUMA node, PCIe switch, NVLink island,
// rail), whether each device is free, whether the host is cordoned, and the
// tenants it can attach devices to. It never reaches a tenant. Records come
// from the store and are input: ParsePlacementRecord checks every field.
#ifndef HZ_SCHEDULER_CLUSTER_PLACEMENT_H_
#define HZ_SCHEDULER_CLUSTER_PLACEMENT_H_

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/scheduler/allocator.h"
#include "hz/scheduler/inventory.h"

namespace hz::scheduler {

struct PlacementRecord {
  HostInventory host;      // the placement fields of each device only
  std::vector<bool> free;  // per device of host.devices: healthy and not allocated
  bool cordoned = false;   // under maintenance: places nothing
  bool any_tenant = true;  // false: only `tenants` (those with a VM to attach to)
  std::set<std::string> tenants;
};

// The largest number of devices a record may list.
inline constexpr size_t kMaxPlacementDevices = 4096;

nlohmann::json PlacementRecordJson(const PlacementRecord& record);
// kInvalidArgument, naming the field, for anything that is not a record.
StatusOr<PlacementRecord> ParsePlacementRecord(const std::string& host, const nlohmann::json& j);

// What one host places of an allocation spread over several.
struct HostPart {
  std::string host;
  Request request;
};

// Plans `request` of `tenant` over `hosts`: the parts each host places, on
// as few hosts as the Allocator's placement finds (a single host when one
// can hold it, best fit first; SAME_HOST and SAME_GROUP always on one), on
// hosts that are not cordoned and can attach to the tenant. Among equals,
// earlier hosts win: the caller lists itself first. kLimit when the free
// devices of the cluster cannot hold it.
StatusOr<std::vector<HostPart>> PlanAcrossHosts(const std::vector<PlacementRecord>& hosts,
                                                const std::string& tenant, const Request& request);

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_CLUSTER_PLACEMENT_H_
