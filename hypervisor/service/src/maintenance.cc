#include "maintenance.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "command_args.h"
#include "hz/common/file.h"
#include "hz/common/thread_priority.h"
#include "metrics_families.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace hz::service {

using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxSeconds = uint64_t{1} << 40;
// SPEC §8.3.2: the notice concerns the whole VM, not one device.
constexpr uint32_t kWholeVm = 0xFFFFFFFF;

std::set<std::string> VmSet(const Maintenance& m) {
  return std::set<std::string>(m.vms.begin(), m.vms.end());
}

std::set<std::string> TenantsTold(const Maintenance& m) {
  std::set<std::string> tenants;
  for (const Maintenance::Told& t : m.told) tenants.insert(t.tenant);
  return tenants;
}

// The hook's command line: HOOK PHASE ID HOST. Runs it and waits at most
// timeout_s (then kills it); what happened, for the operator.
std::string RunCommand(const std::string& hook, const std::string& phase, uint64_t id,
                       const std::string& host, uint32_t timeout_s) {
  const std::string ids = std::to_string(id);
  char* argv[] = {const_cast<char*>(hook.c_str()), const_cast<char*>(phase.c_str()),
                  const_cast<char*>(ids.c_str()), const_cast<char*>(host.c_str()), nullptr};
  pid_t pid = 0;
  if (int err = posix_spawn(&pid, hook.c_str(), nullptr, nullptr, argv, environ); err != 0) {
    return phase + ": cannot run " + hook + ": " + std::strerror(err);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return phase + ": waitpid failed";
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return phase + ": killed after " + std::to_string(timeout_s) + " s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) return phase + ": exit " + std::to_string(WEXITSTATUS(status));
  return phase + ": signal " + std::to_string(WTERMSIG(status));
}

}  // namespace

MaintenanceWorkflow::MaintenanceWorkflow(std::string path, MaintenanceHooks hooks)
    : path_(std::move(path)), hooks_(std::move(hooks)) {}

MaintenanceWorkflow::~MaintenanceWorkflow() {
  std::list<std::thread> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running.swap(hooks_running_);
  }
  for (std::thread& t : running) t.join();
}

Status MaintenanceWorkflow::Load() {
  StatusOr<std::string> text = ReadFile(path_);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return Status::Ok();
  if (!text.ok()) return Status(text.status().code(), path_ + ": " + text.status().message());
  StatusOr<MaintenancePlan> plan = MaintenancePlan::FromJson(*text);
  if (!plan.ok()) {
    return Status::Corruption(path_ + ": " + plan.status().message() +
                              " (left as it is; repair or remove it)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(*plan);
  if (plan_.UnderWay(hooks_.host)) hooks_.cordon(true);
  return Status::Ok();
}

Status MaintenanceWorkflow::PersistLocked() {
  Status s = WriteFileAtomic(path_, plan_.ToJson().dump(2) + "\n");
  if (!s.ok()) spdlog::error("event=maintenance_persist_failed error=\"{}\"", s.ToString());
  return s;
}

void MaintenanceWorkflow::OnApproval(const TenantId& tenant, const hz_event& event) {
  if (event.topic != HZ_TOPIC_MAINTENANCE) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Maintenance* m = plan_.Approve(tenant.name(), event.seq, hooks_.unix_now());
    if (m == nullptr) {
      early_approvals_.insert({tenant.name(), event.seq});
      return;
    }
    spdlog::info("event=maintenance_approved maintenance={} tenant={}", m->id, tenant.name());
    (void)PersistLocked();
  }
  hooks_.post([this] { Tick(); });
}

void MaintenanceWorkflow::OnPublished(const TenantId& tenant, const hz_event& event) {
  // JIT_SAVED is followed by DURABLE (SPEC §8.3.6): DURABLE alone counts.
  if (event.topic != HZ_TOPIC_CHECKPOINT || event.kind != events::kCheckpointDurable) return;
  std::lock_guard<std::mutex> lock(mu_);
  plan_.NoteCheckpoint(tenant.name());
}

void MaintenanceWorkflow::Tick() {
  std::vector<std::pair<uint64_t, bool>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t now = hooks_.unix_now();
    for (uint64_t id : plan_.Due(now)) due.push_back({id, now < plan_.Find(id)->at_s});
  }
  for (const auto& [id, early] : due) Start(id, early);
}

std::vector<Maintenance::Told> MaintenanceWorkflow::Tell(const Maintenance& m,
                                                         events::MaintenanceKind kind,
                                                         const std::set<std::string>& tenants) {
  const bool scheduled = kind == events::kMaintenanceScheduled;
  const events::EventSpec spec =
      events::MakeMaintenance(kind, scheduled ? m.at_s : 0, m.duration_s, kWholeVm, scheduled);
  std::vector<Maintenance::Told> told;
  for (const std::string& t : tenants) {
    uint64_t seq = 0;
    Status s = hooks_.publish(t, spec, &seq, VmSet(m));
    if (!s.ok()) {
      spdlog::error("event=maintenance_notice_failed maintenance={} tenant={} kind={} error=\"{}\"",
                    m.id, t, static_cast<int>(kind), s.ToString());
      continue;
    }
    told.push_back({t, seq, 0, 0});
  }
  return told;
}

void MaintenanceWorkflow::Start(uint64_t id, bool early) {
  Maintenance copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Maintenance* m = plan_.Find(id);
    if (m == nullptr || m->state != MaintenanceState::kScheduled) return;
    m->state = MaintenanceState::kStarted;
    m->started_s = hooks_.unix_now();
    m->started_early = early;
    if (m->host == hooks_.host) hooks_.cordon(true);
    (void)PersistLocked();
    copy = *m;
  }
  spdlog::info("event=maintenance_started maintenance={} host={} early={}", id, copy.host, early);
  Tell(copy, events::kMaintenanceStarted, TenantsTold(copy));
  RunHook(id, "start");
}

void MaintenanceWorkflow::RunHook(uint64_t id, const std::string& phase) {
  if (hooks_.hook.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Hooks that have finished are joined here, so their threads do not pile up.
  for (std::thread::id done : hooks_finished_) {
    auto it = std::find_if(hooks_running_.begin(), hooks_running_.end(),
                           [done](const std::thread& t) { return t.get_id() == done; });
    if (it == hooks_running_.end()) continue;
    it->join();  // it has left mu_ and is returning
    hooks_running_.erase(it);
  }
  hooks_finished_.clear();
  const std::string host = plan_.Find(id)->host;
  hooks_running_.push_back(NamedThread("hz-maint-hook", [this, id, phase, host] {
    std::string what = RunCommand(hooks_.hook, phase, id, host, hooks_.hook_timeout_s);
    spdlog::info("event=maintenance_hook maintenance={} result=\"{}\"", id, what);
    std::lock_guard<std::mutex> l(mu_);
    if (Maintenance* m = plan_.Find(id)) {
      m->hook = what;
      (void)PersistLocked();
    }
    hooks_finished_.push_back(std::this_thread::get_id());
  }));
}

// {"cmd": "maintenance.schedule", "host": H, "at_s": T | "in_s": S,
//  "duration_s": D, "vms": [socket paths]}
CommandResult MaintenanceWorkflow::Schedule(const json& req) {
  if (Status s = OnlyFields(req, {"host", "at_s", "in_s", "duration_s", "vms"}); !s.ok()) return s;
  std::string host;
  uint64_t at = 0, in = 0, duration = 0;
  if (Status s = GetString(req, "host", &host); !s.ok()) return s;
  if (Status s = GetUInt(req, "at_s", 0, kMaxSeconds, &at); !s.ok()) return s;
  if (Status s = GetUInt(req, "in_s", 0, kMaxSeconds, &in); !s.ok()) return s;
  if (Status s = GetUInt(req, "duration_s", 0, kMaxSeconds, &duration); !s.ok()) return s;
  std::vector<std::string> vms;
  if (req.contains("vms")) {
    if (!req["vms"].is_array()) return Status::InvalidArgument("\"vms\" must be a list of sockets");
    for (const json& v : req["vms"]) {
      if (!v.is_string()) return Status::InvalidArgument("\"vms\" must be a list of sockets");
      vms.push_back(v.get<std::string>());
    }
  }
  if (host != hooks_.host) {
    return Status::InvalidArgument(
        "this is host \"" + hooks_.host + "\", not \"" + host +
        "\": a maintenance is kept by its host's harmonaized (send it with \"on_host\")");
  }
  const uint64_t now = hooks_.unix_now();
  if (req.contains("at_s") == req.contains("in_s")) {
    return Status::InvalidArgument("give the start as \"at_s\" (unix seconds) or \"in_s\"");
  }
  if (req.contains("in_s")) at = now + in;
  if (at < now) return Status::InvalidArgument("the start is in the past");
  StatusOr<std::set<std::string>> tenants = hooks_.affected(vms);
  if (!tenants.ok()) return tenants.status();
  Maintenance copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy = plan_.Add(host, vms, at, duration, now);
    if (Status s = PersistLocked(); !s.ok()) return s;
  }
  std::vector<Maintenance::Told> told = Tell(copy, events::kMaintenanceScheduled, *tenants);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Maintenance* m = plan_.Find(copy.id);
    m->told = std::move(told);
    for (Maintenance::Told& t : m->told) {
      if (early_approvals_.erase({t.tenant, t.seq}) != 0) t.approved_s = now;
    }
    (void)PersistLocked();
    copy = *m;
  }
  spdlog::info("event=maintenance_scheduled maintenance={} host={} at_s={} tenants={}", copy.id,
               host, at, copy.told.size());
  Tick();  // nobody to wait for: it starts now
  return json{{"maintenance", copy.id}, {"at_s", at}, {"told", copy.told.size()}};
}

// {"cmd": "maintenance.status"}: every maintenance, who was told, who
// approved and checkpointed, when it starts.
CommandResult MaintenanceWorkflow::Show(const json& req) {
  if (Status s = OnlyFields(req, {}); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  return json{{"host", hooks_.host}, {"maintenances", plan_.ToJson()["maintenances"]}};
}

CommandResult MaintenanceWorkflow::Cancel(const json& req) {
  return End(req, MaintenanceState::kScheduled, MaintenanceState::kCancelled);
}

CommandResult MaintenanceWorkflow::Complete(const json& req) {
  return End(req, MaintenanceState::kStarted, MaintenanceState::kCompleted);
}

// {"cmd": "maintenance.cancel" | "maintenance.complete", "maintenance": ID}
CommandResult MaintenanceWorkflow::End(const json& req, MaintenanceState from,
                                       MaintenanceState to) {
  if (Status s = OnlyFields(req, {"maintenance"}); !s.ok()) return s;
  uint64_t id = 0;
  if (Status s = GetUInt(req, "maintenance", 0, UINT64_MAX, &id); !s.ok()) return s;
  Maintenance copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Maintenance* m = plan_.Find(id);
    if (m == nullptr) return Status::NotFound("no maintenance " + std::to_string(id));
    if (m->state != from) {
      return Status::State(std::string("maintenance is ") + MaintenanceStateName(m->state) +
                           ": only a " + MaintenanceStateName(from) + " one can be " +
                           MaintenanceStateName(to));
    }
    m->state = to;
    m->ended_s = hooks_.unix_now();
    // Placements resume once no maintenance of this host is under way.
    if (m->host == hooks_.host && !plan_.UnderWay(m->host)) hooks_.cordon(false);
    if (Status s = PersistLocked(); !s.ok()) return s;
    copy = *m;
  }
  const bool completed = to == MaintenanceState::kCompleted;
  Tell(copy, completed ? events::kMaintenanceCompleted : events::kMaintenanceCancelled,
       TenantsTold(copy));
  if (completed) RunHook(id, "complete");
  return json{{"maintenance", id}, {"state", MaintenanceStateName(to)}};
}

void MaintenanceWorkflow::CollectMetrics(prometheus::Registry* r) {
  uint64_t by_state[4] = {};
  uint64_t waiting = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Maintenance& m : plan_.all()) {
      ++by_state[static_cast<size_t>(m.state)];
      if (m.state != MaintenanceState::kScheduled) continue;
      for (const Maintenance::Told& t : m.told) waiting += t.approved_s == 0 ? 1 : 0;
    }
  }
  auto& states = GaugeFamily(r, "hz_maintenances", "Maintenances of this host, by state.");
  for (MaintenanceState s : {MaintenanceState::kScheduled, MaintenanceState::kStarted,
                             MaintenanceState::kCompleted, MaintenanceState::kCancelled}) {
    SetGauge(states, {{"state", MaintenanceStateName(s)}},
             static_cast<double>(by_state[static_cast<size_t>(s)]));
  }
  AddGauge(r, "hz_maintenance_tenants_unapproved",
           "Tenants told of a scheduled maintenance that have not approved it.",
           static_cast<double>(waiting));
}

std::span<const CommandSpec<MaintenanceWorkflow>> MaintenanceWorkflow::Commands() {
  static const CommandSpec<MaintenanceWorkflow> kCommands[] = {
      {"maintenance.schedule", false, &MaintenanceWorkflow::Schedule},
      {"maintenance.status", false, &MaintenanceWorkflow::Show},
      {"maintenance.cancel", false, &MaintenanceWorkflow::Cancel},
      {"maintenance.complete", false, &MaintenanceWorkflow::Complete},
  };
  return kCommands;
}

}  // namespace hz::service
