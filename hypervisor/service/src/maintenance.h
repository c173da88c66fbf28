// Maintenance as a workflow (hzctl maintenance ...): the operator schedules
// a maintenance of this host, or of some of its VMs; every tenant with a VM
// or a device there is told (MAINTENANCE/SCHEDULED, approvable, SPEC §8.3.2),
// and no other tenant is; the notice starts the just-in-time saves of the
// VMs concerned (Engines::Publish). When every tenant told has approved
// early, or the start time comes, the maintenance starts: nothing new is
// placed on the host (Scheduler::SetCordoned), STARTED goes out, and the
// operator's hook runs. The operator completes it (COMPLETED, placements
// resume) or cancels it before it starts (CANCELLED).
//
// The plan is kept in <state_dir>/maintenance.json (WriteFileAtomic), so a
// restarted service carries on where it stopped; a file it cannot read stops
// the service at start, named, and is left as it is.
//
// Threads: commands and Tick on the service's main thread; OnApproval and
// OnPublished on the event bus's threads. Nothing is published while mu_ is
// held: publishing calls OnPublished back.
#ifndef HZ_SERVICE_MAINTENANCE_H_
#define HZ_SERVICE_MAINTENANCE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_spec.h"
#include "hz/service/command_registry.h"
#include "hz/service/maintenance_plan.h"
#include "protocol/harmonaize.h"

namespace prometheus {
class Registry;
}

namespace hz::service {

struct MaintenanceHooks {
  std::function<uint64_t()> unix_now;
  std::string host;  // this host's name, as the operator names it
  std::string hook;  // the operator's command; empty: none
  uint32_t hook_timeout_s = 60;
  // The tenants of the VMs named (socket paths), or with a VM or device on
  // this host when vms is empty; kNotFound for a VM that is not bound.
  std::function<StatusOr<std::set<std::string>>(const std::vector<std::string>& vms)> affected;
  // Engines::Publish: the event into the tenant's log, the saves of vms.
  std::function<Status(const std::string& tenant, const events::EventSpec& spec, uint64_t* seq,
                       const std::set<std::string>& vms)>
      publish;
  std::function<void(bool cordoned)> cordon;
  std::function<void(std::function<void()>)> post;  // onto the main thread
};

class MaintenanceWorkflow {
 public:
  MaintenanceWorkflow(std::string path, MaintenanceHooks hooks);
  ~MaintenanceWorkflow();  // waits for the hooks still running
  MaintenanceWorkflow(const MaintenanceWorkflow&) = delete;
  MaintenanceWorkflow& operator=(const MaintenanceWorkflow&) = delete;

  // Reads the plan (none yet is an empty one) and cordons the host again if
  // a maintenance of it is under way.
  Status Load();
  // The tenant approved an event early (EventBus::SetApprovalCallback).
  void OnApproval(const TenantId& tenant, const hz_event& event);
  // An event was published to the tenant (Engines' observer).
  void OnPublished(const TenantId& tenant, const hz_event& event);
  // Starts what is due. Main thread, every poll and after approvals.
  void Tick();

  static std::span<const CommandSpec<MaintenanceWorkflow>> Commands();
  // Prometheus text: maintenances by state; tenants told of a scheduled one
  // that have not approved it yet.
  void CollectMetrics(prometheus::Registry* r);

 private:
  CommandResult Schedule(const nlohmann::json& req);
  CommandResult Show(const nlohmann::json& req);
  CommandResult Cancel(const nlohmann::json& req);
  CommandResult Complete(const nlohmann::json& req);
  // Moves a maintenance from `from` to `to` (cancelled or completed) and
  // tells the tenants.
  CommandResult End(const nlohmann::json& req, MaintenanceState from, MaintenanceState to);

  // Publishes kind to `tenants` (for SCHEDULED, those to tell; later, those
  // told); returns each tenant's seq. Without mu_.
  std::vector<Maintenance::Told> Tell(const Maintenance& m, events::MaintenanceKind kind,
                                      const std::set<std::string>& tenants);
  void Start(uint64_t id, bool early);
  void RunHook(uint64_t id, const std::string& phase);
  Status PersistLocked();

  const std::string path_;
  const MaintenanceHooks hooks_;
  std::mutex mu_;  // everything below
  MaintenancePlan plan_;
  // Approvals of maintenance notices not yet matched to a maintenance (the
  // tenant answered before Schedule recorded the seq it was told).
  std::set<std::pair<std::string, uint64_t>> early_approvals_;
  // Hook threads, running or finished; a finished one (its id in
  // hooks_finished_) is joined by the next RunHook, the rest on destruction.
  std::list<std::thread> hooks_running_;
  std::vector<std::thread::id> hooks_finished_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_MAINTENANCE_H_
