// Device allocation over a Cluster.
//
// The topology-aware policy places a request (GPUs, NICs, locality) so that
// the GPUs share the best interconnect available: one NVLink island or PCIe
// switch when they fit, best-fit among the pools that can hold them (so whole
// islands stay free for big requests), and the host whose free count best
// matches. NICs follow the GPUs: the NIC on the GPU's rail under the same
// switch first, then the same switch, the same rail, the same NUMA node.
//
// Devices of one IOMMU group cannot be isolated from each other: a GPU or NIC
// is only ever allocated together with the other GPUs and NICs of its group
// (an allocation may then hold more devices than it asked for), and refused
// when one of them is taken or failed.
//
// The first-fit policy ignores topology (first host, first free devices); the
// benchmark compares against it.
//
// The allocator is plain state: callers serialize access (the Scheduler holds
// a mutex) and persist it (ToJson/FromJson; Scheduler writes it crash-safely).
#ifndef HZ_SCHEDULER_ALLOCATOR_H_
#define HZ_SCHEDULER_ALLOCATOR_H_

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "hz/scheduler/cluster.h"
#include "protocol/harmonaize.h"

namespace hz::scheduler {

struct Request {
  uint32_t gpus = 0;
  uint32_t nics = 0;
  // enum hz_locality; a plain byte so an out-of-range wire value can be
  // rejected instead of becoming an invalid enum.
  uint8_t locality = HZ_LOC_ANY;
};

struct Allocation {
  uint64_t id = 0;
  std::string tenant;
  Request request;
  std::vector<DeviceRef> devices;  // ascending
};

enum class Policy { kTopologyAware, kFirstFit };

class Allocator {
 public:
  explicit Allocator(const Cluster* cluster, Policy policy = Policy::kTopologyAware);

  // Chooses devices for `request` without changing state; false when the
  // free healthy devices cannot satisfy it.
  bool Place(const Request& request, std::vector<DeviceRef>* devices) const;

  // Places and records an allocation. kLimit when it does not fit,
  // kInvalidArgument for an empty or oversized request.
  Status Allocate(const std::string& tenant, const Request& request, Allocation* out);
  // Records an allocation of these devices (all free and healthy) and the
  // other GPUs and NICs of their IOMMU groups (which must be free too).
  Status AllocateDevices(const std::string& tenant, const Request& request,
                         const std::vector<DeviceRef>& devices, Allocation* out);
  Status Release(uint64_t allocation_id);
  // Takes one device out of its allocation (a failed device after detach).
  // An allocation left empty is removed.
  Status RemoveDevice(DeviceRef device);
  // Moves `devices`, all of one allocation, to a new allocation of the same
  // tenant and locality; they are never free in between, whatever their
  // IOMMU groups. An allocation left empty is removed.
  Status SplitOff(const std::vector<DeviceRef>& devices, Allocation* out);

  // A failed device is never placed; repair makes it placeable again.
  Status SetFailed(DeviceRef device, bool failed);
  bool IsFailed(DeviceRef device) const { return failed_[device.host][device.index]; }
  // Allocation id owning the device, 0 when free.
  uint64_t Owner(DeviceRef device) const { return owner_[device.host][device.index]; }

  const std::map<uint64_t, Allocation>& allocations() const { return allocations_; }
  const Allocation* Find(uint64_t id) const;
  // Free healthy devices of a pool / of a kind on a host.
  uint32_t FreeInPool(uint32_t pool) const { return free_in_pool_[pool]; }
  uint32_t FreeOnHost(uint32_t host, DeviceKind kind) const;
  uint32_t TotalFree(DeviceKind kind) const;
  const Cluster& cluster() const { return *cluster_; }

  // Durable form: devices named by (host name, bdf) so the file stays valid
  // when discovery order changes. FromJson replaces the state; it rejects
  // unknown devices and a device owned twice (kCorruption).
  void ToJson(nlohmann::json* out) const;
  Status FromJson(const nlohmann::json& in);

 private:
  bool Free(DeviceRef d) const { return owner_[d.host][d.index] == 0 && !failed_[d.host][d.index]; }
  // Adds the other devices of the IOMMU groups of `devices`; fails naming the
  // first one that is not free.
  Status AddGroupMates(std::vector<DeviceRef>* devices) const;
  bool PlaceTopology(const Request& request, std::vector<DeviceRef>* out) const;
  bool PlaceFirstFit(const Request& request, std::vector<DeviceRef>* out) const;
  // GPUs of one host: from `only_pool` when >= 0, else spread best-fit.
  bool PickGpus(uint32_t host, uint32_t count, int only_pool, std::vector<uint32_t>* out) const;
  bool TakeFromPool(uint32_t pool, uint32_t count, std::vector<uint32_t>* out) const;
  bool PickNics(uint32_t host, uint32_t count, const std::vector<uint32_t>& gpus,
                std::vector<uint32_t>* out) const;
  void Own(DeviceRef d, uint64_t id);
  void Disown(DeviceRef d);
  std::string HostName(uint32_t h) const;

  const Cluster* cluster_;
  Policy policy_;
  uint64_t next_id_ = 1;
  std::vector<std::vector<uint64_t>> owner_;
  std::vector<std::vector<bool>> failed_;
  std::vector<uint32_t> free_in_pool_;
  std::vector<std::array<uint32_t, 2>> free_on_host_;  // [host][kind]
  std::map<uint64_t, Allocation> allocations_;
};

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_ALLOCATOR_H_
