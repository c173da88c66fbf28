// What the hosts of a cluster tell each other of the tenants' devices, so
// that each host's topology summaries (SPEC.md §7.7) cover a tenant's whole
// allocation: per tenant, the shape of its devices on the host (group
// signatures and classes, hz/scheduler/topology_summary.h). The shapes ride in
// each host's membership record as its "tenants" attribute.
//
// A record in the store is input like any other: a malformed tenant entry is
// left out (and counted), never trusted.
#ifndef HZ_SERVICE_CLUSTER_TOPOLOGY_H_
#define HZ_SERVICE_CLUSTER_TOPOLOGY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/cluster/membership.h"
#include "hz/scheduler/topology_summary.h"

namespace hz::service {

using TenantShapes = std::map<std::string, scheduler::HostShape>;

// The attribute value of this host's shapes: {"tenants": {name: shape}}.
nlohmann::json ShapesAttribute(const TenantShapes& shapes);

// Per tenant, its shapes on the hosts of `hosts` other than this one.
// *malformed counts the entries left out.
std::map<std::string, std::vector<scheduler::HostShape>> OtherHostsShapes(
    const std::vector<cluster::HostInfo>& hosts, uint64_t* malformed);

}  // namespace hz::service

#endif  // HZ_SERVICE_CLUSTER_TOPOLOGY_H_
