// The provider scheduler of one host, as the host service uses it: inventory,
// allocation with crash-safe state, vfio binding, libvirt attach/detach,
// failures with tenant events, topology summaries, and the devices of
// reservations.
//
// Operator API (hzctl through the service): Inventory(), Allocations(),
// Allocate(), Release(), MarkFailed(), MarkDegraded(), Repair(), BindTenant().
//
// The scheduler knows nothing of negotiation. A failure returns what it took
// (DeviceLoss) and the service asks the negotiation engine for a replacement;
// the engine reaches the reservation methods through an adapter in the
// service. So nothing here calls out to another engine.
//
// Thread-safe: every public method takes the scheduler's mutex and calls
// nothing that could call back. Nothing here reads a clock. A detach from a
// running VM waits for the guest to let go of the device (up to the
// attacher's detach_wait); that wait runs with the mutex released, so other
// tenants' allocations, releases and the operator views go on meanwhile.
// The devices being detached stay with their allocation until the detach is
// confirmed (never handed out), shown as "releasing"; a second release of
// that allocation meanwhile gets kBusy, and a failure of one of its devices
// waits for the outcome.
#ifndef HZ_SCHEDULER_SCHEDULER_H_
#define HZ_SCHEDULER_SCHEDULER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_spec.h"
#include "hz/scheduler/allocator.h"
#include "hz/scheduler/cluster.h"
#include "hz/scheduler/cluster_placement.h"
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
  // Source of each new tenant's secret permutation seed; empty: a random
  // draw (std::random_device). Tests inject fixed seeds.
  std::function<uint64_t(const TenantId& tenant)> tenant_seed;
};

// What a device failure took from its tenant: enough for a replacement offer
// (SPEC.md §9.7). `tenant` is empty when the failure took nothing from anyone
// (the device was free, or had failed before).
struct DeviceLoss {
  TenantId tenant;
  DeviceKind kind = DeviceKind::kGpu;
  uint8_t locality = HZ_LOC_ANY;  // of the allocation the device left
  bool replaceable = false;       // a healthy device of that kind is free on the host
};

// Devices taken from one of the cluster's pools (Cluster::pools()).
struct PoolDevices {
  uint32_t pool = 0;
  uint32_t count = 0;
  bool operator==(const PoolDevices&) const = default;
};

// Devices of a started reservation on their way out of the tenant's VM
// (Scheduler::BeginDetachReservation): no longer the tenant's to use, not
// yet anyone else's.
struct ReservationDetach {
  uint64_t reservation_id = 0;
  uint64_t allocation_id = 0;
  std::vector<DeviceRef> devices;
  std::vector<PoolDevices> pools;  // where they came from
};

hz_device_kind WireKind(DeviceKind kind);

class Scheduler {
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
  Status BindTenant(const TenantId& tenant, const std::string& domain);
  // The domain every device of the tenant is attached to; nullopt: none bound.
  std::optional<std::string> DomainOf(const TenantId& tenant) const;
  // While cordoned (the host is under maintenance) nothing new is placed on
  // it: Allocate and AttachReservation fail with kBusy. What is placed
  // stays, and the capacity reservations count on is unchanged (a
  // reservation for after the maintenance must not be revoked). Not
  // persisted: the maintenance workflow sets it again after a restart.
  void SetCordoned(bool cordoned);
  // Places, records (durably), binds to vfio-pci and attaches to the tenant's
  // domain; rolls back when binding or attaching fails.
  Status Allocate(const TenantId& tenant, const Request& request, uint64_t* allocation_id);
  // Detaches, hands the devices back to their host drivers, forgets. Answers
  // once the guest let go; kBusy while another release of the allocation
  // waits for that. A device that did not leave the VM (kTimedOut) keeps the
  // allocation, with the error in Allocations() ("detach_error").
  Status Release(uint64_t allocation_id);

  // A device is lost (health monitor or operator): marked failed (durably),
  // detached from its tenant's VM, FAILURE/DEVICE_FAILED published to that
  // tenant naming only its tenant-visible index, then CAPACITY/
  // ALLOCATION_CHANGED (indices may move). Returns what the tenant lost, for
  // the replacement offer the caller may open.
  StatusOr<DeviceLoss> MarkFailed(const std::string& bdf, uint64_t errors);
  // The same for a failure the health monitor already published (its
  // FailureListener gives the tenant and the tenant-visible index): no
  // second FAILURE event, the rest as MarkFailed.
  StatusOr<DeviceLoss> DeviceLost(const TenantId& tenant, uint32_t device_index);
  // The same, for the device at `bdf` (an index seen earlier may have moved).
  StatusOr<DeviceLoss> DeviceLostAt(const std::string& bdf);
  // Every allocated device with its tenant and current tenant-visible index,
  // for HealthMonitor::Assign after each allocation change.
  std::vector<std::tuple<TenantId, std::string, uint32_t>> Assignments();
  // Uncorrectable non-fatal errors: FAILURE/DEVICE_DEGRADED, stays attached.
  Status MarkDegraded(const std::string& bdf, uint64_t errors);
  // The device can be placed again (it must not be allocated). kBusy while
  // the device is being detached.
  Status Repair(const std::string& bdf);

  // TOPOLOGY_GET result for the tenant's whole allocation: its devices on
  // this host, and on the other hosts of a cluster as SetOtherHosts gave them.
  Status Summary(const TenantId& tenant, TopologySummary* out);

  // In a cluster of hosts (scheduler_other_hosts.cc). The shape of each
  // tenant's devices on this host, for the other hosts; tenants without
  // devices here are absent.
  std::map<std::string, HostShape> LocalShapes() const;
  // The tenant's devices on the other hosts, one shape per host that holds
  // some, in any order. When that changes the tenant's summary, the tenant
  // gets CAPACITY/ALLOCATION_CHANGED (one per device kind whose count
  // changed, else one for GPUs), since its indices may have moved.
  Status SetOtherHosts(const TenantId& tenant, std::vector<HostShape> shapes);
  // What this host tells the other hosts of its devices, so that any of
  // them can plan an allocation spread over several (cluster_placement.h).
  PlacementRecord LocalPlacement() const;
  // Tenant-visible index of a device (for the health monitor's Assign).
  Status TenantIndex(const std::string& bdf, TenantId* tenant, uint32_t* index);

  // Operator views (JSON for hzctl): every device with its state and owner
  // ("releasing" while it leaves the VM); every allocation with its devices,
  // "releasing": the devices leaving the VM meanwhile, and "detach_error"
  // when the last detach failed (the devices may still be attached: they
  // stay).
  nlohmann::json Inventory() const;
  nlohmann::json Allocations() const;

  // Reservations (scheduler_reservations.cc). The pools are the cluster's
  // (cluster().pools()); a pool's reservable devices are its healthy ones
  // not held by direct allocations (the negotiation engine books its own
  // among them), nor leaving a VM, nor kept after a failed detach.
  uint32_t ReservableDevices(uint32_t pool) const;
  // Allocates, binds and attaches a starting reservation's devices. kTryAgain
  // when the pool's devices it needs are still leaving another VM (a
  // release under way): the start is due again once they left.
  Status AttachReservation(const TenantId& tenant, uint64_t reservation_id,
                           const std::vector<PoolDevices>& devices);
  // A detach of the reservation's `count` devices with the highest
  // tenant-visible indices, in two steps, so that whoever decides it need
  // not hold its locks while the guest lets go. Begin, at once: the devices
  // are chosen and marked leaving ("releasing"): no longer counted as the
  // tenant's (DevicesHeld), never handed out. Finish waits for the guest
  // (up to the attacher's detach_wait), then the devices are free; if they
  // did not leave, they stay with the allocation as after a failed Release.
  // Every Begin that succeeded must be finished.
  StatusOr<ReservationDetach> BeginDetachReservation(const TenantId& tenant,
                                                     uint64_t reservation_id, uint32_t count);
  Status FinishDetachReservation(const ReservationDetach& detach);
  // The service is stopping: detaches under way and later ones no longer
  // wait for their guests (DomainAttacher::StopWaiting); the devices stay
  // as when a guest does not let go.
  void StopWaitingForGuests();
  // Tenant-visible indices of a started reservation's devices (kNotFound
  // when it holds none or is another tenant's).
  StatusOr<std::vector<uint32_t>> ReservationIndices(const TenantId& tenant,
                                                     uint64_t reservation_id);
  // Allocations the tenant holds (direct ones and those of reservations).
  uint32_t TenantAllocations(const TenantId& tenant) const;
  // The tenant is removed: its allocations are released (detached and handed
  // back), its VM and its permutation seed forgotten, durably, so that a
  // tenant created later under the same name draws a new seed. A device that
  // fails to detach stays recorded (it may still be attached) and the error
  // is returned; nothing is forgotten then, nor while one of its allocations
  // is being released (kBusy).
  Status ForgetTenant(const TenantId& tenant);
  // Devices of `kind` the tenant holds, from every allocation, less those
  // leaving its VM.
  uint32_t DevicesHeld(const TenantId& tenant, hz_device_kind kind) const;

  const Cluster& cluster() const { return cluster_; }

 private:
  Scheduler(HostInventory inventory, const SchedulerOptions& options, DomainAttacher* attacher,
            hz::events::EventSink* sink);
  Status Load();
  // `lock` holds mu_; released while the device leaves the VM.
  StatusOr<DeviceLoss> FailLocked(std::unique_lock<std::mutex>& lock, DeviceRef d, uint64_t errors,
                                  bool publish_failure);
  Status Persist();
  // The state and the allocator keep tenants by name.
  uint64_t SeedLocked(const std::string& tenant);
  std::vector<DeviceRef> TenantDevices(const std::string& tenant) const;
  TopologySummary SummaryLocked(const std::string& tenant);
  // Devices of kind the tenant holds here and on the other hosts.
  uint32_t HeldLocked(const std::string& tenant, DeviceKind kind) const;
  // Binds `devices` and attaches them to the tenant's VM. On failure,
  // *attached lists those the VM got before the error (still bound); the
  // others are handed back to their host drivers.
  Status AttachDevices(const std::string& tenant, const std::vector<DeviceRef>& devices,
                       std::vector<DeviceRef>* attached);
  // Undoes allocation `allocation_id` after AttachDevices failed: the
  // devices the VM got leave it (DetachUnlocked, so without mu_ meanwhile)
  // and the allocation is dropped, durably. If one does not leave, the
  // allocation stays, kept as after a failed detach.
  void RollBackAttach(std::unique_lock<std::mutex>& lock, uint64_t allocation_id,
                      const std::vector<DeviceRef>& attached);
  // Detaches `devices` of allocation `allocation_id` from the tenant's VM and
  // hands them back to their host drivers. `lock` holds mu_ on entry and on
  // return; it is released while the guest lets go, with the allocation in
  // detaching_ (its caller checked it was not). The first error is returned.
  Status DetachUnlocked(std::unique_lock<std::mutex>& lock, uint64_t allocation_id,
                        const std::vector<DeviceRef>& devices);
  // The two halves of DetachUnlocked: MarkLeaving adds the devices to
  // detaching_ (durably: after a crash meanwhile they come back as a failed
  // detach, since the guest may still hold them); LeaveVmUnlocked detaches
  // them without mu_ and takes them out of detaching_ again.
  void MarkLeaving(uint64_t allocation_id, const std::vector<DeviceRef>& devices);
  Status LeaveVmUnlocked(std::unique_lock<std::mutex>& lock, uint64_t allocation_id,
                         const std::vector<DeviceRef>& devices);
  // Devices of a reservation's detach that did not leave the VM: they move
  // to an allocation of their own (no reservation's, so never reservable),
  // kept as after a failed Release for the operator to release again.
  void KeepReservationDevices(const ReservationDetach& detach, const Status& error);
  // A detach failed: the devices stay with the allocation (they may still be
  // attached), logged and shown in Allocations().
  void KeepAfterFailedDetach(uint64_t allocation_id, const Status& error);
  // kBusy when a detach from the allocation is under way.
  Status CheckNotDetaching(uint64_t allocation_id) const;
  // The device is leaving its VM (in detaching_).
  bool IsLeaving(DeviceRef d) const;
  Status FindDevice(const std::string& bdf, DeviceRef* ref) const;
  bool IsReservationAllocation(uint64_t allocation_id) const;

  mutable std::mutex mu_;
  SchedulerOptions options_;
  Cluster cluster_;
  Allocator allocator_;
  VfioBinder binder_;
  DomainAttacher* attacher_;
  hz::events::EventSink* sink_;
  std::map<std::string, uint64_t> seeds_;                      // tenant -> summary permutation seed
  std::map<std::string, std::string> domains_;                 // tenant -> libvirt domain
  std::map<uint64_t, uint64_t> reservations_;                  // reservation id -> allocation id
  std::map<std::string, std::vector<HostShape>> other_hosts_;  // tenant -> its other hosts
  bool cordoned_ = false;                                      // SetCordoned
  // Allocations some of whose devices are leaving their VM (DetachUnlocked,
  // BeginDetachReservation), with those devices; done_detaching_ is
  // signalled when some are done.
  std::map<uint64_t, std::vector<DeviceRef>> detaching_;
  std::condition_variable done_detaching_;
  // Allocation -> its last failed detach. Persisted, with the allocations
  // in detaching_ as failed (the service stopped while they were leaving).
  std::map<uint64_t, std::string> detach_errors_;
};

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_SCHEDULER_H_
