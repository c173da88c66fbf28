// harmonaized as a library: tenants, VM socket bindings (one vdev::Server per
// bound socket, one HzDevice per connection), the collective engine, the
// operator's control socket, the Prometheus endpoint and graceful shutdown.
//
// Threads: Run() drives the main io_context (control socket, metrics,
// signals); worker_threads connection threads drive the vhost-user
// connections, each with an io_context of its own, and every VM of a tenant
// is served by the same one (see BindVm); the collective engine has its own
// workers.
#ifndef HZ_SERVICE_SERVICE_H_
#define HZ_SERVICE_SERVICE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "hz/cluster/host_commands.h"
#include "hz/libvirt/domain_definitions.h"
#include "hz/service/cluster_control.h"
#include "hz/service/coll_backend.h"
#include "hz/service/command_registry.h"
#include "hz/service/config.h"
#include "hz/service/connection_loop.h"
#include "hz/service/control_api.h"
#include "hz/service/engines.h"
#include "hz/service/hz_device.h"
#include "hz/service/metrics.h"
#include "hz/service/provider.h"
#include "hz/service/tenants.h"
#include "vdev/crash_recovery.h"
#include "vdev/fd_store.h"
#include "vdev/server.h"

namespace vdev {
class Server;
class SnapshotFds;
class Takeover;
struct Snapshot;
}  // namespace vdev

namespace hz::service {

class ClusterCollBackend;
class ControlServer;
class HostConditions;
class MaintenanceWorkflow;
class MetricsServer;

class Service : public ControlTarget {
 public:
  explicit Service(ServiceConfig config);
  ~Service() override;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Creates the directories, starts the engine, the connection threads, the
  // control socket and the metrics endpoint, and restores saved tenants and
  // bindings. Fails when the service cannot run.
  hz::Status Start();
  // Serves until SIGTERM/SIGINT or RequestStop(), then shuts down gracefully.
  void Run();
  // What the process tells its supervisor (systemd's sd_notify), called on
  // Run()'s thread: `serving` once, when Run()'s loop is running with every
  // listener Start() opened and the stop signals handled; `stopping` when a
  // drain begins.
  // `handed_over` when a live upgrade succeeded: the successor (its pid)
  // serves every VM now; the process must end at once, without stopping
  // anything (the default does std::_Exit(0)).
  struct LifecycleHooks {
    std::function<void()> serving;
    std::function<void()> stopping;
    std::function<void(pid_t successor)> handed_over;
  };
  void SetLifecycleHooks(LifecycleHooks hooks) { hooks_ = std::move(hooks); }
  // False after a shutdown that had to leave a connection thread running (a
  // handler that never returned). The thread cannot be joined and may still
  // use the service, so the process must end without destroying it.
  bool stopped_cleanly() const { return stuck_threads_.load() == 0; }
  // Asks Run() to shut down (any thread).
  void RequestStop();

  // Live upgrade (service_upgrade.cc), in the manner of nginx's binary
  // upgrade: the running service starts `program` with this command line
  // plus --handoff-fd and hands it the VM sessions, the listeners and the
  // state directory's lock (vdev/upgrade.h).
  void SetCommandLine(std::string program, std::vector<std::string> args);
  // The successor's side: Start() takes over from t instead of binding.
  void TakeOverFrom(vdev::Takeover* t) { takeover_ = t; }

  // Runs fn on connection thread i and returns at once. A test seam: the
  // daemon built for tests/integration/service holds a thread with it, as a
  // handler stuck in a system call would.
  void PostToConnectionThread(size_t i, std::function<void()> fn);

  uint16_t metrics_port() const { return metrics_port_; }
  bool draining() const { return draining_.load(); }
  const ServiceConfig& config() const { return config_; }
  std::string MetricsText() const;

  // ControlTarget
  hz::Status CreateTenant(const TenantSpec& spec) override;
  hz::Status RemoveTenant(const std::string& name, bool purge) override;
  hz::Status SetTenantFeatures(const std::string& name, uint64_t features) override;
  hz::StatusOr<std::string> BindVm(const std::string& tenant, const std::string& socket_path,
                                   const std::string& domain) override;
  hz::Status UnbindVm(const std::string& socket_path, const std::string& domain) override;
  hz::StatusOr<VmAttachment> AttachVm(const VmAttachRequest& req) override;
  hz::StatusOr<VmAttachment> DetachVm(const std::string& domain) override;
  std::vector<std::shared_ptr<Tenant>> Tenants() const override { return tenants_.List(); }
  std::vector<VmView> Vms() const override;
  std::vector<CommSummary> Communicators() const override;
  nlohmann::json Status() const override;
  nlohmann::json Counters() const override;
  TenantLimits DefaultTenantLimits() const override { return config_.tenant_defaults; }
  std::optional<CommandResult> EngineCommand(const std::string& cmd,
                                             const nlohmann::json& req) override;
  // Starts a live upgrade to binary (empty: the program this one was
  // started as) and returns at once; `status` tells how it went.
  hz::StatusOr<nlohmann::json> StartUpgrade(const std::string& binary) override;

 private:
  struct Binding {
    std::string tenant;
    std::string domain;  // the VM's libvirt domain; empty: not told
    std::shared_ptr<Tenant> tenant_ptr;
    size_t thread = 0;  // index into vdev_threads_
    std::unique_ptr<vdev::Server> server;
  };
  // A connection thread with its own io_context. A shared io_context would
  // let a handler posted for one VM (a collective's completion for each of
  // its ranks) wake a second, idle thread: a wake-up on the critical path of
  // every operation. With one context per thread, the completions for the
  // ranks of a tenant run one after another on the thread that posted them.
  struct VdevThread {
    boost::asio::io_context io{1};
    // Shares the thread's time between the tenants of its VMs by weight.
    std::shared_ptr<vdev::TurnScheduler> turns = std::make_shared<vdev::TurnScheduler>();
    std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
    std::thread thread;
    std::promise<void> exit_signal;  // set when the thread's loop has returned
    std::future<void> exited;
    bool stuck = false;  // did not answer within the shutdown timeout
    ConnectionLoopStats loop;
  };
  using Clock = std::chrono::steady_clock;
  struct ThreadCall;  // service_shutdown.cc

  // One service per state directory, before anything in it is touched: a
  // second one would take the control socket and recover (delete) the first
  // one's checkpoints in progress.
  hz::Status LockStateDir();
  // The control socket and the metrics endpoint (adopted in a live upgrade).
  hz::Status StartListeners();
  // The connection threads, and the thread that prepares region
  // registrations for them.
  void StartConnectionThreads();

  // service_shutdown.cc
  void Shutdown();
  // Shutdown steps, each waiting at most shutdown_timeout_ms: every device
  // answers what it has in flight; the VM connections close; the connection
  // threads end; the engines stop.
  void DrainDevices();
  void CloseConnections();
  void StopConnectionThreads();
  void StopEngines();
  void MarkStuck(size_t i, const char* step);
  // Runs fn on connection thread i and waits for it until deadline; false
  // when it has not run by then (if it had not started, it never will).
  bool OnVdevThread(size_t i, std::function<void()> fn,
                    Clock::time_point deadline = Clock::time_point::max());
  std::shared_ptr<ThreadCall> PostCall(size_t i, std::function<void()> fn);
  // How long an operator's command waits for a connection thread: the
  // bound of each shutdown step ([shutdown] timeout_ms).
  Clock::time_point ControlDeadline() const {
    return Clock::now() + std::chrono::milliseconds(config_.shutdown_timeout_ms);
  }
  static bool WaitCall(ThreadCall& call, Clock::time_point deadline);
  // The connection thread for a new VM of tenant: the one already serving
  // its VMs, else the one serving the fewest VMs. Called with mu_ held.
  size_t ThreadForTenantLocked(const std::string& tenant) const;
  std::string ResolveSocketPath(const std::string& path) const;
  // service_conditions.cc: energy schedule, congestion, energy slack.
  hz::Status StartConditions();
  void ArmConditions();
  void PollConditions();
  // service_maintenance.cc: the maintenance workflow.
  hz::Status StartMaintenance();
  void ArmMaintenance();
  void StopMaintenance();
  // Tenants with a VM bound or devices allocated on this host.
  std::set<std::string> HostTenants() const;
  // The VMs (socket paths) a notice published without any concerns
  // (Engines::SetNoticeScope): for a preemption, the VMs of the tenant's
  // domain; nullopt (every VM of the tenant) otherwise.
  std::optional<std::set<std::string>> VmsOfNotice(const TenantId& tenant,
                                                   const hz_event& ev) const;
  // The tenants of the VMs (socket paths); HostTenants() when vms is empty.
  hz::StatusOr<std::set<std::string>> TenantsOfVms(const std::vector<std::string>& vms) const;
  // service_cluster.cc: the service in a cluster; commands across hosts.
  ClusterHooks ClusterHooksFor(ClusterCollBackend* cross_host);
  hz::Status StartHostCommands();
  std::string HandleControl(const std::string& line);
  nlohmann::json ServeForwarded(nlohmann::json request, const std::string& from);
  // service_upgrade.cc. The old process: the hand-over, on its own thread,
  // and what the service adds to the snapshot; then it leaves (on io_).
  void RunUpgrade(const std::string& binary);
  std::string ExportForUpgrade(vdev::SnapshotFds& fds, vdev::Snapshot* snapshot);
  void LeaveAfterUpgrade(pid_t successor);
  void WaitForUpgradeSignal();
  // Every bound VM socket's server: what an upgrade hands over or takes.
  std::vector<vdev::Server*> BoundServers() const;
  // The successor: the lock, the listeners and the cluster lease's holder
  // from the snapshot.
  hz::Status AdoptHandedOver();
  // The successor of an upgrade, or a process restarted after a crash: once
  // the bindings are loaded, the VM sessions its predecessor left are served
  // and the tenants are told.
  void ServeInherited();
  // service_crash.cc: surviving a crash under systemd ([service] fd_store).
  // Opens the unit's fd store, and takes back what a crashed process left.
  hz::Status OpenFdStore();
  // The lock and listeners a crashed process kept in the store, when it did.
  hz::Status AdoptStoredLockAndListeners();
  // Keeps the lock and the listeners in the store from now on, and no more.
  void StoreLockAndListeners();
  void ForgetStoredLockAndListeners();

  // Only commands that change nothing run while an upgrade is under way.
  static bool ReadOnlyCommand(const std::string& line);
  nlohmann::json UpgradeStatus() const;

  // service_state.cc
  void SaveState();
  hz::Status LoadState();

  ServiceConfig config_;
  // While LoadState re-creates the saved objects, their Create/Bind calls
  // do not save: the file would be rewritten (and fsynced) once per object,
  // and a crash half-way would leave only the objects loaded so far.
  std::atomic<bool> loading_state_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<size_t> stuck_threads_{0};  // connection threads left running
  // <state_dir>/harmonaized.lock, locked while this service owns state_dir.
  int state_lock_fd_ = -1;
  std::chrono::steady_clock::time_point started_;

  TenantRegistry tenants_;
  Metrics metrics_;
  DeviceRegistry devices_;
  // Bulk threads wait in the idle class until they starve (none: they run
  // at their nice values). Outlives the engines that enrol threads in it.
  std::shared_ptr<IdleClassGuard> idle_guard_;
  std::unique_ptr<CollBackend> coll_;
  std::unique_ptr<Engines> engines_;                      // event bus, checkpoints
  std::unique_ptr<Provider> provider_;                    // scheduler, negotiation, hints, health
  std::unique_ptr<ClusterControl> cluster_;               // membership of a cluster ([cluster])
  std::unique_ptr<cluster::HostCommands> host_commands_;  // commands for other hosts
  CommandRegistry commands_;                              // the engines' operator commands
  DeviceEnv env_;

  boost::asio::io_context io_;  // control, metrics, signals
  // After io_ (its timer runs there), before the devices that reach it.
  std::unique_ptr<HostConditions> conditions_;
  std::unique_ptr<boost::asio::steady_timer> conditions_timer_;
  std::shared_ptr<MaintenanceWorkflow> maintenance_;
  std::unique_ptr<boost::asio::steady_timer> maintenance_timer_;
  std::unique_ptr<boost::asio::signal_set> signals_;
  LifecycleHooks hooks_;
  std::vector<std::unique_ptr<VdevThread>> vdev_threads_;  // vhost-user connections
  std::unique_ptr<boost::asio::thread_pool> background_;   // env_.background

  mutable std::mutex mu_;                    // bindings_, turns_before_
  std::map<std::string, Binding> bindings_;  // socket path -> binding
  // The connection threads charge turns by tenant name for the process's
  // life; a tenant created under the name of a removed one starts from
  // what that one was charged, so that it inherits nothing.
  std::map<std::string, TenantTurns> turns_before_;
  // Each tenant name's charges summed over the connection threads.
  std::map<std::string, TenantTurns> ChargedTurns() const;

  // libvirt's domain definitions ([scheduler] libvirt_uri), opened at the
  // first `vm attach` or `vm detach` and again after libvirtd went away.
  // How a VM socket of tenant, on connection thread `thread`, is served
  // ([device], [vm] socket access; the thread's time by the tenant's weight).
  vdev::ServerOptions VmServerOptions(const Tenant& tenant, size_t thread) const;
  hz::Status OpenDefinitions(hz::libvirt::DomainDefinitions** out);
  hz::StatusOr<std::string> AttachSocketPath(const VmAttachRequest& req) const;
  std::mutex libvirt_mu_;
  std::unique_ptr<hz::libvirt::Connection> libvirt_;
  std::unique_ptr<hz::libvirt::DomainDefinitions> definitions_;

  // Live upgrade.
  std::string program_;
  std::vector<std::string> args_;
  vdev::Takeover* takeover_ = nullptr;  // the successor, until it serves
  vdev::UniqueFd handed_control_;       // the listeners it was handed
  vdev::UniqueFd handed_metrics_;
  std::string handed_cluster_instance_;  // the predecessor's lease holder id
  // Crash recovery: the unit's fd store, and what a crashed process left in
  // it until the VM sessions are served again.
  std::shared_ptr<vdev::FdStore> fd_store_;
  std::unique_ptr<vdev::CrashRecovery> recovery_;
  std::atomic<bool> upgrading_{false};
  pid_t successor_ = -1;  // set once handed over (upgrade thread, then io_)
  std::thread upgrade_thread_;
  mutable std::mutex upgrade_mu_;
  nlohmann::json last_upgrade_;                              // how the last one went, for `status`
  std::unique_ptr<boost::asio::signal_set> upgrade_signal_;  // SIGUSR2

  ControlApi api_{this};
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<MetricsServer> metrics_server_;
  uint16_t metrics_port_ = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_SERVICE_H_
