// Synthetic inventories for benchmarks and the cluster experiment: hosts
// shaped like an 8-GPU training server, so that large clusters can be built
// without sysfs trees.
#ifndef HZ_SCHEDULER_SYNTHETIC_CLUSTER_H_
#define HZ_SCHEDULER_SYNTHETIC_CLUSTER_H_

#include <string>

#include "hz/scheduler/cluster.h"
#include "hz/scheduler/inventory.h"

namespace hz::scheduler {

// A host shaped like the hgx8 fixture: GPUs and NICs in pairs under PCIe
// switches, switches split over two NUMA nodes, NVLink islands of up to 4.
// `host_number` makes the serials unique across a cluster.
HostInventory SyntheticHost(const std::string& name, int gpus, int host_number);

// `hosts` such hosts of `gpus` GPUs each, named node-0000, node-0001, ...
Cluster UniformCluster(int hosts, int gpus);

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_SYNTHETIC_CLUSTER_H_
