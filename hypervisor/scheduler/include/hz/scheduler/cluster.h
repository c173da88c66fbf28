// The physical topology the allocator and the summaries work on: one or more
// hosts (the service runs one; the benchmark simulates many), their devices,
// and the derived locality structure.
//
// A pool is one locality unit of one device kind on one host: an NVLink
// island of GPUs, else the GPUs (or NICs) under one PCIe switch, else a single
// device. Pools are what the negotiation engine counts (ResourceProvider) and
// what the allocator fills best-fit.
#ifndef HZ_SCHEDULER_CLUSTER_H_
#define HZ_SCHEDULER_CLUSTER_H_

#include <compare>
#include <cstdint>
#include <vector>

#include "hz/scheduler/inventory.h"
#include "protocol/harmonaize.h"

namespace hz::scheduler {

struct DeviceRef {
  uint32_t host = 0;
  uint32_t index = 0;  // into HostInventory::devices
  auto operator<=>(const DeviceRef&) const = default;
};

struct Pool {
  uint32_t host = 0;
  DeviceKind kind = DeviceKind::kGpu;
  bool island = false;            // an NVLink island (else a switch or a single device)
  std::vector<uint32_t> devices;  // device indices on the host, ascending
};

class Cluster {
 public:
  Cluster() = default;
  explicit Cluster(std::vector<HostInventory> hosts);

  size_t num_hosts() const { return hosts_.size(); }
  const HostInventory& host(uint32_t h) const { return hosts_[h]; }
  const Device& device(DeviceRef ref) const { return hosts_[ref.host].devices[ref.index]; }
  bool Valid(DeviceRef ref) const {
    return ref.host < hosts_.size() && ref.index < hosts_[ref.host].devices.size();
  }

  const std::vector<Pool>& pools() const { return pools_; }
  // Pool ids of one host, in id order.
  const std::vector<uint32_t>& host_pools(uint32_t h) const { return host_pools_[h]; }
  uint32_t PoolOf(DeviceRef ref) const { return pool_of_[ref.host][ref.index]; }
  // Host-local switch number of a device, or -1 when it sits on a root port.
  int SwitchOf(DeviceRef ref) const { return switch_of_[ref.host][ref.index]; }
  // The device's position on its host in an order built from topology only
  // (switch, island, kind), never from addresses. Summaries derive the
  // per-tenant index permutation from it.
  uint32_t Slot(DeviceRef ref) const { return slot_[ref.host][ref.index]; }

  // Bandwidth class of the path between two devices (SPEC.md §7.7).
  hz_bw_class Bandwidth(DeviceRef a, DeviceRef b) const;
  // A finer model of the same path in GB/s (what the topology really offers):
  // distinguishes a NUMA-local from a cross-socket host-bridge path, and uses
  // the PCIe link speed and width. The planner's ground truth.
  double TrueBandwidthGBs(DeviceRef a, DeviceRef b) const;

 private:
  std::vector<HostInventory> hosts_;
  std::vector<Pool> pools_;
  std::vector<std::vector<uint32_t>> host_pools_;
  std::vector<std::vector<uint32_t>> pool_of_;
  std::vector<std::vector<int>> switch_of_;
  std::vector<std::vector<uint32_t>> slot_;
};

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_CLUSTER_H_
