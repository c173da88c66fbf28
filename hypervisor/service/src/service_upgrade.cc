// harmonaized's live upgrade (SPEC.md §2.9), in the manner of nginx's binary
// upgrade, on vdev's hand-over (vdev/upgrade.h).
//
// The old process starts the new binary with its own command line plus
// --handoff-fd. Once the successor said hello, it freezes every VM session
// (a collective waiting for peers goes back to its ring), waits until no
// checkpoint is being persisted, and hands over each session with the
// device's state, the control and metrics listeners and the lock of the
// state directory. The successor loads the state directory (nobody writes it
// meanwhile: the old process runs only read-only commands and its timers
// stand still), serves every session from where it stopped, tells the
// tenants, and confirms; the old process then leaves without stopping
// anything. Until the confirmation the old process can still thaw and carry
// on, which it does when the successor fails in any way.
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "control_server.h"
#include "hz/common/thread_priority.h"
#include "hz/events/event_spec.h"
#include "hz/service/service.h"
#include "metrics_server.h"
#include "upgrade_state.h"
#include "vdev/upgrade.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

// What the service hands over besides its servers, by position in the
// snapshot's application_fds: the state directory's lock and the control
// listener always, the metrics listener when it serves one.
constexpr size_t kLockFd = 0;
constexpr size_t kControlFd = 1;
constexpr size_t kMetricsFd = 2;

}  // namespace

void Service::SetCommandLine(std::string program, std::vector<std::string> args) {
  program_ = std::move(program);
  args_ = std::move(args);
}

bool Service::ReadOnlyCommand(const std::string& line) {
  static const std::set<std::string> kReadOnly = {"ping",        "status",  "counters",
                                                  "tenant.list", "vm.list", "comm.list"};
  json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  return req.is_object() && req.contains("cmd") && req["cmd"].is_string() &&
         kReadOnly.count(req["cmd"].get<std::string>()) != 0 && !req.contains("on_host");
}

json Service::UpgradeStatus() const {
  std::lock_guard<std::mutex> lock(upgrade_mu_);
  return last_upgrade_.is_null() ? json{{"state", "none"}} : last_upgrade_;
}

hz::StatusOr<json> Service::StartUpgrade(const std::string& binary) {
  if (draining_) return hz::Status::Shutdown("the service is stopping");
  const std::string program = binary.empty() ? program_ : binary;
  if (program.empty()) {
    return hz::Status::NotSupported("the service does not know the program it runs");
  }
  struct stat st;
  if (stat(program.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || access(program.c_str(), X_OK)) {
    return hz::Status::InvalidArgument(program + " is not an executable file");
  }
  bool idle = false;
  if (!upgrading_.compare_exchange_strong(idle, true)) {
    return hz::Status::Busy("an upgrade is already under way");
  }
  if (upgrade_thread_.joinable()) upgrade_thread_.join();  // an earlier one, finished
  {
    std::lock_guard<std::mutex> lock(upgrade_mu_);
    last_upgrade_ = {{"state", "running"}, {"binary", program}};
  }
  // The hand-over waits for the connection threads and the successor, so it
  // runs on a thread of its own; `status` tells how it went.
  upgrade_thread_ = NamedThread("hz-upgrade", [this, program] { RunUpgrade(program); });
  return json{{"started", true}, {"pid", getpid()}, {"binary", program}};
}

std::vector<vdev::Server*> Service::BoundServers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<vdev::Server*> servers;
  for (const auto& [path, b] : bindings_) servers.push_back(b.server.get());
  return servers;
}

void Service::WaitForUpgradeSignal() {
  upgrade_signal_->async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    hz::StatusOr<json> started = StartUpgrade("");
    if (!started.ok()) {
      spdlog::error("event=upgrade_refused signal=SIGUSR2 error=\"{}\"",
                    started.status().ToString());
    }
    WaitForUpgradeSignal();
  });
}

void Service::RunUpgrade(const std::string& binary) {
  spdlog::info("event=upgrade_started binary={}", binary);
  const std::vector<vdev::Server*> servers = BoundServers();
  vdev::UpgradeOptions options;
  options.binary = binary;
  options.args = args_;
  options.freeze_timeout = std::chrono::milliseconds(config_.shutdown_timeout_ms);
  vdev::UpgradeResult r = vdev::HandOver(
      servers,
      [this](vdev::SnapshotFds& fds, vdev::Snapshot* s) { return ExportForUpgrade(fds, s); },
      options);
  if (!r.error.empty()) {
    spdlog::error("event=upgrade_failed binary={} error=\"{}\"", binary, r.error);
    std::lock_guard<std::mutex> lock(upgrade_mu_);
    last_upgrade_ = {{"state", "failed"}, {"binary", binary}, {"error", r.error}};
    upgrading_ = false;
    return;
  }
  spdlog::info("event=upgrade_handed_over successor={} paused_us={} lost={}", r.successor,
               r.paused.count(), r.lost.size());
  successor_ = r.successor;
  {
    std::lock_guard<std::mutex> lock(upgrade_mu_);
    last_upgrade_ = {{"state", "handed_over"},
                     {"binary", binary},
                     {"successor", r.successor},
                     {"paused_us", r.paused.count()},
                     {"lost", r.lost}};
  }
  boost::asio::post(io_, [this, successor = r.successor] { LeaveAfterUpgrade(successor); });
}

std::string Service::ExportForUpgrade(vdev::SnapshotFds& fds, vdev::Snapshot* snapshot) {
  // A save acknowledged to a guest may still be on its way to disk; the
  // successor recovers what it finds there, so it must all be there.
  const auto wait = std::chrono::milliseconds(config_.shutdown_timeout_ms);
  if (hz::Status s = engines_->FlushCheckpoints(wait); !s.ok()) {
    return "checkpoints are still being persisted: " + s.ToString();
  }
  snapshot->application_fds.push_back(fds.Add(state_lock_fd_));
  snapshot->application_fds.push_back(fds.Add(control_->listener()));
  if (metrics_server_) snapshot->application_fds.push_back(fds.Add(metrics_server_->listener()));
  if (fds.failed()) return "out of descriptors";
  snapshot->application_state = EncodeUpgradeState({cluster_->Instance()});
  return {};
}

void Service::LeaveAfterUpgrade(pid_t successor) {
  // The successor accepts on the same listening sockets now; this process
  // lets go of them without removing the control socket's file.
  control_->Release();
  if (metrics_server_) metrics_server_->Stop();
  if (hooks_.handed_over) hooks_.handed_over(successor);
  std::_Exit(0);
}

hz::Status Service::AdoptHandedOver() {
  const vdev::Snapshot& s = takeover_->snapshot();
  // Without a cluster instance (single host, or an earlier release's
  // snapshot) the successor joins with a new one once the old lease ends.
  StatusOr<UpgradeState> state = ParseUpgradeState(s.application_state);
  if (!state.ok()) return state.status();
  handed_cluster_instance_ = state->cluster_instance;
  if (s.application_fds.size() <= kControlFd) {
    return hz::Status::InvalidArgument("the snapshot holds no lock and control socket");
  }
  vdev::UniqueFd lock = takeover_->TakeApplicationFd(kLockFd);
  // The lock must be this state directory's: the same file, still held.
  struct stat held, here;
  const std::string lock_path = config_.state_dir + "/harmonaized.lock";
  if (fstat(lock.get(), &held) != 0 || stat(lock_path.c_str(), &here) != 0 ||
      held.st_dev != here.st_dev || held.st_ino != here.st_ino) {
    return hz::Status::InvalidArgument("the lock handed over is not " + lock_path);
  }
  state_lock_fd_ = lock.release();
  handed_control_ = takeover_->TakeApplicationFd(kControlFd);
  if (s.application_fds.size() > kMetricsFd)
    handed_metrics_ = takeover_->TakeApplicationFd(kMetricsFd);
  return hz::Status::Ok();
}

void Service::ServeInherited() {
  const std::vector<vdev::Server*> servers = BoundServers();
  // From the predecessor's hand-over, or from what a crashed one stored.
  const bool upgrade = takeover_ != nullptr;
  std::string error;
  if (!(upgrade ? takeover_->Serve(servers, &error) : recovery_->Serve(servers, &error))) {
    spdlog::error("event={} error=\"{}\"",
                  upgrade ? "takeover_incomplete" : "crash_recovery_incomplete", error);
  }
  takeover_ = nullptr;
  recovery_ = nullptr;
  // Every tenant with a VM here learns that the service changed under it.
  const events::EventSpec spec = events::MakeMaintenance(events::kMaintenanceServiceRestarted, 0, 0,
                                                         events::kAllDevices, false);
  for (const std::string& tenant : HostTenants()) {
    uint64_t seq = 0;
    if (hz::Status st = engines_->Publish(TenantId(tenant), spec, &seq); !st.ok()) {
      spdlog::warn("event=restart_notice_failed tenant={} error=\"{}\"", tenant, st.ToString());
    }
  }
  spdlog::info("event={} vms={}", upgrade ? "upgrade_serving" : "crash_recovery_serving",
               servers.size());
}

}  // namespace hz::service
