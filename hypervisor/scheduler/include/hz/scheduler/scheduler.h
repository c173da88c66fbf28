// The provider scheduler of one host, as the host service uses it: inventory,
// allocation with crash-safe state, vfio binding, libvirt attach/detach,
// failures with tenant events and replacement offers, topology summaries, and
// the negotiation engine's ResourceProvider.
//
// Operator API (hzctl through the service): Inventory(), Allocations(),
// Allocate(), Release(), MarkFailed(), MarkDegraded(), Repair(), BindTenant().
//
// Thread-safe: every public method takes the scheduler's mutex. Nothing here
// reads a clock; times are arguments.
#ifndef HZ_SCHEDULER_SCHEDULER_H_
#define HZ_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hz/events/event_spec.h"
#include "hz/events/negotiation.h"
#include "hz/events/resource_provider.h"
#include "hz/scheduler/allocator.h"
#include "hz/scheduler/cluster.h"
#include "hz/scheduler/domain_attacher.h"
#include "hz/scheduler/topology_summary.h"
#include "hz/scheduler/vfio.h"

namespace hz::scheduler {

struct SchedulerOptions {
  std::string sysfs_root = "/sys";
  std::string provider_file;  // optional provider inventory (TOML)
  std::string state_path;     // JSON state; created on first change
  bool bind_vfio = true;      // bind/unbind through driver_override
  // fsync the state file and its directory on every change. Without it a
  // process crash still loses nothing (rename is atomic); power loss may.
  bool sync = true;
  // Length of a replacement offer when the lost device's allocation has no
  // reservation end (a direct operator allocation).
  uint64_t replacement_duration_s = 3600;
  // Source of each new tenant's secret permutation seed; empty: a random
  // draw (std::random_device). Tests inject fixed seeds.
  std::function<uint64_t(const std::string& tenant)> tenant_seed;
};

class Scheduler : public hz::events::ResourceProvider {
 public:
  // Discovers the host from options.sysfs_root (+ provider file) and loads the
  // state. `attacher` and `sink` may be null (no VM attach / no events) and
  // must outlive the scheduler.
  static Status Open(const SchedulerOptions& options, DomainAttacher* attacher,
                     hz::events::EventSink* sink, std::unique_ptr<Scheduler>* out);
  // Same with an inventory the caller built.
  static Status OpenWithInventory(HostInventory inventory, const SchedulerOptions& options,
                                  DomainAttacher* attacher, hz::events::EventSink* sink,
                                  std::unique_ptr<Scheduler>* out);

  // Operator: the tenant's VM (libvirt domain). Persisted.
  Status BindTenant(const std::string& tenant, const std::string& domain);
  // Places, records (durably), binds to vfio-pci and attaches to the tenant's
  // domain; rolls back when binding or attaching fails.
  Status Allocate(const std::string& tenant, const Request& request, uint64_t* allocation_id);
  // Detaches, hands the devices back to their host drivers, forgets.
  Status Release(uint64_t allocation_id);

  // A device is lost (health monitor or operator): marked failed (durably),
  // detached from its tenant's VM, FAILURE/DEVICE_FAILED published to that
  // tenant naming only its tenant-visible index, then CAPACITY/
  // ALLOCATION_CHANGED (indices may move), and, when a healthy device of the
  // kind is free and an engine is set, a replacement offer is opened on the
  // tenant's behalf (NegotiationEngine::OfferReplacement; the engine publishes
  // NEGOTIATION/OFFER_MADE at its next decision point). `now` is unix seconds.
  Status MarkFailed(const std::string& bdf, uint64_t errors, uint64_t now);
  // The same for a failure the health monitor already published (its
  // FailureListener gives the tenant and the tenant-visible index): no
  // second FAILURE event, the rest as MarkFailed.
  Status DeviceLost(const std::string& tenant, uint32_t device_index, uint64_t now);
  // Every allocated device with its tenant and current tenant-visible index,
  // for HealthMonitor::Assign after each allocation change.
  std::vector<std::tuple<std::string, std::string, uint32_t>> Assignments();
  // Uncorrectable non-fatal errors: FAILURE/DEVICE_DEGRADED, stays attached.
  Status MarkDegraded(const std::string& bdf, uint64_t errors);
  // The device can be placed again (it must not be allocated).
  Status Repair(const std::string& bdf);

  // TOPOLOGY_GET result for the tenant's whole allocation on this host.
  Status Summary(const std::string& tenant, TopologySummary* out);
  // Tenant-visible index of a device (for the health monitor's Assign).
  Status TenantIndex(const std::string& bdf, std::string* tenant, uint32_t* index);

  // Operator views (JSON for hzctl): every device with its state and owner;
  // every allocation with its devices.
  nlohmann::json Inventory() const;
  nlohmann::json Allocations() const;

  // Replacement offers through the negotiation engine (optional).
  void SetNegotiationEngine(hz::events::NegotiationEngine* engine);
  // Replacement negotiations opened so far (negotiation id -> tenant).
  std::map<uint64_t, std::string> Replacements() const;

  // ResourceProvider: pools are the cluster's pools; capacity is the healthy
  // devices not held by direct allocations (the engine books its own).
  std::vector<hz::events::Pool> Pools() const override;
  uint32_t Capacity(uint32_t pool, uint64_t window) const override;
  Status Attach(const std::string& tenant, uint64_t reservation_id,
                const std::vector<hz::events::PoolCount>& devices) override;
  // Detaches the reservation's `count` devices with the highest
  // tenant-visible indices.
  Status Detach(const std::string& tenant, uint64_t reservation_id, uint32_t count,
                std::vector<hz::events::PoolCount>* detached) override;
  uint32_t DevicesHeld(const std::string& tenant, hz_device_kind kind) const override;

  const Cluster& cluster() const { return cluster_; }

 private:
  Scheduler(HostInventory inventory, const SchedulerOptions& options, DomainAttacher* attacher,
            hz::events::EventSink* sink);
  Status Load();
  Status Fail(DeviceRef d, uint64_t errors, uint64_t now, bool publish_failure,
              std::unique_lock<std::mutex>& lock);
  Status Persist();
  uint64_t SeedLocked(const std::string& tenant);
  std::vector<DeviceRef> TenantDevices(const std::string& tenant) const;
  Status AttachDevices(const std::string& tenant, const std::vector<DeviceRef>& devices);
  void DetachDevices(const std::string& tenant, const std::vector<DeviceRef>& devices,
                     Status* first_error);
  Status FindDevice(const std::string& bdf, DeviceRef* ref) const;
  bool IsReservationAllocation(uint64_t allocation_id) const;

  mutable std::mutex mu_;
  SchedulerOptions options_;
  Cluster cluster_;
  Allocator allocator_;
  VfioBinder binder_;
  DomainAttacher* attacher_;
  hz::events::EventSink* sink_;
  hz::events::NegotiationEngine* engine_ = nullptr;
  std::map<std::string, uint64_t> seeds_;         // tenant -> summary permutation seed
  std::map<std::string, std::string> domains_;    // tenant -> libvirt domain
  std::map<uint64_t, uint64_t> reservations_;     // reservation id -> allocation id
  std::map<uint64_t, std::string> replacements_;  // negotiation id -> tenant
};

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_SCHEDULER_H_
