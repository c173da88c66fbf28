#include "hz/service/service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include "cluster_coll_backend.h"
#include "control_server.h"
#include "host_conditions.h"
#include "hz/common/file.h"
#include "hz/common/idle_class_guard.h"
#include "hz/common/thread_priority.h"
#include "hz/service/connection_loop.h"
#include "hz/service/engine_backend.h"
#include "maintenance.h"
#include "metrics_server.h"
#include "spdlog/spdlog.h"
#include "vdev/post_batch.h"
#include "vdev/server.h"

namespace hz::service {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

ClusterCollOptions ClusterCollOptionsOf(const ServiceConfig& c) {
  ClusterCollOptions o;
  o.store = *cluster::RedisAddress::Parse(c.cluster.store);  // ValidateConfig checked it
  o.key_prefix = c.cluster.key_prefix;
  o.host_name = c.cluster.HostName();
  o.data_address = c.cluster.data_address;
  o.store_timeout = c.cluster.StoreTimeout();
  o.uid_lifetime = std::chrono::seconds(c.coll_unused_uid_lifetime_s);
  o.fabric_window = std::chrono::seconds(c.conditions.congestion_window_s);
  return o;
}

// The guard that keeps bulk threads in the idle class until they starve
// (bulk_idle_class), or none: then they run at their nice values, as they
// must where this process could not take those values back.
std::shared_ptr<IdleClassGuard> BulkIdleGuardOf(const ServiceConfig& c) {
  if (!c.bulk_idle_class) return nullptr;
  for (uint32_t nice : {c.region_thread_nice, c.ckpt_thread_nice, c.coll_worker_nice}) {
    const int n = static_cast<int>(nice);
    if (n == kIdleClassNice || IdleClassGuard::MayLeaveIdleClass(n)) continue;
    spdlog::warn(
        "event=bulk_idle_class_off nice={} reason=\"this process may not leave the kernel's idle "
        "class for that nice value (it needs CAP_SYS_NICE or RLIMIT_NICE of at least {}): bulk "
        "threads run at their nice values\"",
        n, 20 - n);
    return nullptr;
  }
  IdleClassGuard::Options o;
  o.window = std::chrono::milliseconds(c.bulk_idle_window_ms);
  return std::make_shared<IdleClassGuard>(o);
}

// The collective engine's options: [collectives], the device's rank limit
// and the congestion window.
coll::EngineOptions CollEngineOptionsOf(const ServiceConfig& c,
                                        std::shared_ptr<IdleClassGuard> idle_guard) {
  coll::EngineOptions eo;
  eo.max_ranks = c.device.max_comm_ranks;
  eo.unused_uid_lifetime_ms = c.coll_unused_uid_lifetime_s * 1000;
  eo.worker_threads = c.coll_worker_threads;
  eo.worker_nice = static_cast<int>(c.coll_worker_nice);
  eo.worker_poll_us = c.coll_worker_poll_us;
  if (c.coll_stream_min_bytes) eo.stream_min_bytes = *c.coll_stream_min_bytes;
  if (c.coll_single_thread_max_bytes) eo.single_thread_max_bytes = *c.coll_single_thread_max_bytes;
  eo.idle_guard = std::move(idle_guard);
  eo.waiting_window_ms = c.conditions.congestion_window_s * 1000;
  // A worker's delivery of an operation's completions wakes each connection
  // thread once, however many of its VMs the operation had. A connection
  // thread that ran an operation itself delivers as it goes: its posts to
  // its own VMs wake nothing, and other threads' start at once.
  eo.deliver_batch = [](const std::function<void()>& deliver) {
    if (OnConnectionLoop()) {
      deliver();
      return;
    }
    vdev::PostBatch batch;
    deliver();
  };
  return eo;
}

}  // namespace

Service::Service(ServiceConfig config) : config_(std::move(config)) {
  env_.limits = config_.device;
  env_.metrics = &metrics_;
  env_.draining = &draining_;
  env_.registry = &devices_;
}

Service::~Service() {
  if (!stopped_) Shutdown();
  if (state_lock_fd_ >= 0) close(state_lock_fd_);
}

void Service::StartConnectionThreads() {
  // One thread prepares every VM's region registrations (one per VM at a
  // time, VMs in turn): the connection threads only install them.
  background_ = std::make_unique<boost::asio::thread_pool>(1);
  // Preparing one VM's registration gives way to serving every VM's requests.
  const BulkPriority priority(static_cast<int>(config_.region_thread_nice), idle_guard_);
  boost::asio::post(*background_, [priority] {
    NameThisThread("hz-regions");
    SetThisThreadPriority(priority);
  });
  env_.background = [pool = background_.get()](std::function<void()> fn) {
    boost::asio::post(*pool, std::move(fn));
  };
  for (uint32_t i = 0; i < config_.worker_threads; ++i) {
    auto t = std::make_unique<VdevThread>();
    t->work =
        std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(
            t->io.get_executor());
    t->exited = t->exit_signal.get_future();
    t->thread =
        NamedThread("hz-conn-" + std::to_string(i),
                    [t = t.get(), poll = std::chrono::microseconds(config_.connection_poll_us)] {
                      RunConnectionLoop(t->io, poll, &t->loop);
                      t->exit_signal.set_value();
                    });
    vdev_threads_.push_back(std::move(t));
  }
}

hz::Status Service::LockStateDir() {
  // The successor of a live upgrade holds the lock it was handed, and a
  // process restarted after a crash the lock its predecessor stored.
  if (takeover_ != nullptr) return AdoptHandedOver();
  if (recovery_ != nullptr) return AdoptStoredLockAndListeners();
  const std::string lock_path = config_.state_dir + "/harmonaized.lock";
  hz::StatusOr<int> lock = LockFile(lock_path);
  if (!lock.ok()) {
    if (!lock.status().IsBusy()) return lock.status();
    return hz::Status::Busy("state directory " + config_.state_dir +
                            " is in use by another harmonaized: " + lock.status().message());
  }
  state_lock_fd_ = *lock;
  return hz::Status::Ok();
}

hz::Status Service::StartListeners() {
  const std::string& group = config_.control_socket_group;
  control_ = std::make_unique<ControlServer>(
      io_, config_.ControlSocketPath(),
      SocketAccessFor(group.empty() ? 0600 : 0660, config_.control_socket_owner, group),
      config_.control_max_line_bytes, config_.control_max_clients,
      [this](const std::string& line) { return HandleControl(line); });
  const bool adopt = handed_control_.valid();
  if (hz::Status s = adopt ? control_->Adopt(handed_control_.release()) : control_->Start();
      !s.ok()) {
    return s;
  }
  if (config_.metrics_enabled) {
    metrics_server_ = std::make_unique<MetricsServer>(
        io_, [this] { return MetricsText(); }, config_.metrics_max_connections);
    hz::Status s = adopt && handed_metrics_.valid()
                       ? metrics_server_->Adopt(handed_metrics_.release())
                       : metrics_server_->Start(config_.metrics_address, config_.metrics_port);
    if (!s.ok()) return s;
    metrics_port_ = metrics_server_->port();
  }
  return hz::Status::Ok();
}

hz::Status Service::Start() {
  started_ = std::chrono::steady_clock::now();
  std::error_code fec;
  for (const std::string& dir : {config_.state_dir, config_.VmSocketDir()}) {
    fs::create_directories(dir, fec);
    if (fec) return hz::Status::IoError(dir + ": " + fec.message());
  }
  fs::create_directories(fs::path(config_.ControlSocketPath()).parent_path(), fec);
  if (hz::Status s = OpenFdStore(); !s.ok()) return s;
  if (hz::Status s = LockStateDir(); !s.ok()) return s;

  idle_guard_ = BulkIdleGuardOf(config_);
  coll_ = std::make_unique<EngineBackend>(CollEngineOptionsOf(config_, idle_guard_));
  if (config_.cluster.enabled) {
    // Communicators may span hosts: the engine serves the ranks on this host.
    coll_ = std::make_unique<ClusterCollBackend>(std::move(coll_), ClusterCollOptionsOf(config_));
  }
  env_.coll = coll_.get();
  engines_ = std::make_unique<Engines>(config_, idle_guard_);
  const bool after_crash = recovery_ != nullptr;
  if (hz::Status s = engines_->Start(after_crash); !s.ok()) return s;
  env_.ckpt = engines_->checkpoints();
  env_.events = engines_->events();
  commands_.Add(engines_.get(), Engines::Commands());
  if (config_.scheduler.enabled) {
    provider_ = std::make_unique<Provider>(config_, io_, engines_->sink());
    if (hz::Status s = provider_->Start(); !s.ok()) return s;
    env_.provider = provider_.get();
    commands_.Add(provider_.get(), Provider::Commands());
    engines_->SetNoticeScope(
        [this](const TenantId& tenant, const hz_event& ev) { return VmsOfNotice(tenant, ev); });
  } else {
    commands_.AddUnavailable(Provider::Commands(),
                             "the scheduler is disabled ([scheduler] enabled = false)");
  }

  if (hz::Status s = StartConditions(); !s.ok()) return s;
  if (hz::Status s = StartMaintenance(); !s.ok()) return s;
  cluster_ = std::make_unique<ClusterControl>(
      config_.cluster, ClusterHooksFor(dynamic_cast<ClusterCollBackend*>(coll_.get())));
  commands_.Add(cluster_.get(), ClusterControl::Commands());

  StartConnectionThreads();

  if (hz::Status s = StartListeners(); !s.ok()) return s;
  StoreLockAndListeners();
  if (hz::Status s = LoadState(); !s.ok()) return s;
  if (takeover_ != nullptr || recovery_ != nullptr) ServeInherited();
  if (after_crash) engines_->PrepareStaging();  // once the tenants are served
  if (hz::Status s = StartHostCommands(); !s.ok()) return s;
  // Last: the other hosts see this one once it can serve.
  if (hz::Status s = cluster_->Start(handed_cluster_instance_); !s.ok()) return s;
  spdlog::info("event=started state_dir={} control_socket={} metrics={}:{} workers={} engine={}",
               config_.state_dir, config_.ControlSocketPath(), config_.metrics_address,
               metrics_port_, config_.worker_threads, coll_ ? "yes" : "no");
  return hz::Status::Ok();
}

void Service::Run() {
  // Kept until the Service goes, so a second SIGTERM during the drain finds
  // a handler instead of the default action.
  signals_ = std::make_unique<boost::asio::signal_set>(io_, SIGTERM, SIGINT);
  signals_->async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("event=signal signal={}", sig);
    RequestStop();
  });
  // SIGUSR2 upgrades to the program this one was started as, as nginx's
  // binary upgrade does.
  upgrade_signal_ = std::make_unique<boost::asio::signal_set>(io_, SIGUSR2);
  WaitForUpgradeSignal();
  // The first handler the loop runs: by then the control socket and the
  // metrics endpoint accept on it, and a SIGTERM drains instead of killing.
  boost::asio::post(io_, [this] {
    if (hooks_.serving && !stopped_) hooks_.serving();
  });
  io_.run();
  if (!stopped_) Shutdown();
}

std::string Service::ResolveSocketPath(const std::string& path) const {
  if (path.empty()) return {};
  if (path[0] == '/') return fs::path(path).lexically_normal().string();
  return (fs::path(config_.VmSocketDir()) / path).lexically_normal().string();
}

hz::Status Service::CreateTenant(const TenantSpec& spec) {
  if (draining_) return hz::Status::Shutdown("the service is stopping");
  if (spec.latency_poll_us && *spec.latency_poll_us > kMaxPollUs) {
    return hz::Status::InvalidArgument("latency_poll_us " + std::to_string(*spec.latency_poll_us) +
                                       " is above " + std::to_string(kMaxPollUs));
  }
  if (engines_) {
    if (hz::Status s = engines_->CheckTenantLimits(spec); !s.ok()) return s;
  }
  if (hz::Status s = tenants_.Create(spec); !s.ok()) return s;
  {
    std::map<std::string, TenantTurns> charged = ChargedTurns();
    std::lock_guard<std::mutex> lock(mu_);
    turns_before_[spec.name] = charged[spec.name];
  }
  if (coll_) coll_->SetTenantWeight(TenantId(spec.name), spec.weight);
  if (engines_) engines_->SetTenantLimits(spec);
  spdlog::info(
      "event=tenant_created tenant={} weight={} priority={} max_regions={} "
      "max_region_bytes={} max_extents={} disk_bytes={} staging_bytes={}",
      spec.name, spec.weight, spec.priority, spec.limits.max_regions, spec.limits.max_region_bytes,
      spec.limits.max_extents, spec.ckpt_disk_bytes, spec.ckpt_staging_bytes);
  SaveState();
  return hz::Status::Ok();
}

vdev::ServerOptions Service::VmServerOptions(const Tenant& tenant, size_t thread) const {
  vdev::ServerOptions opts;
  // A turn that runs out of its budget gives way to the thread's other VMs;
  // which VM goes next is the tenants' weighted share of the thread's time.
  opts.session.turn_scheduler = vdev_threads_[thread]->turns;
  opts.session.share_key = tenant.name();
  opts.session.share_weight = tenant.spec().weight;
  // Each connection thread runs an io_context of its own.
  opts.one_thread_io = true;
  opts.session.require_sealed_memory = config_.device.require_sealed_memory;
  opts.min_connect_interval = std::chrono::milliseconds(config_.device.min_connect_interval_ms);
  opts.session.queue_limits.max_chains_per_turn = config_.device.chains_per_turn;
  opts.session.queue_limits.max_turn_time = std::chrono::microseconds(config_.device.turn_time_us);
  opts.access =
      SocketAccessFor(config_.vm_socket_mode, config_.vm_socket_owner, config_.vm_socket_group);
  opts.fd_store = fd_store_;
  return opts;
}

hz::StatusOr<std::string> Service::BindVm(const std::string& tenant, const std::string& socket_path,
                                          const std::string& domain) {
  if (draining_) return hz::Status::Shutdown("the service is stopping");
  if (vdev_threads_.empty()) return hz::Status::State("the service is not started");
  std::string path = ResolveSocketPath(socket_path);
  if (path.empty()) return hz::Status::InvalidArgument("empty socket path");
  if (path.size() > 107) return hz::Status::InvalidArgument("socket path is longer than 107 bytes");
  if (domain.size() > 256)
    return hz::Status::InvalidArgument("domain name is longer than 256 bytes");
  std::shared_ptr<Tenant> t = tenants_.Find(tenant);
  if (!t) return hz::Status::NotFound("no tenant " + tenant);
  size_t thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = bindings_.find(path); it != bindings_.end()) {
      // Binding again what is bound is a no-op, so that the libvirt hook
      // may bind at every start what `vm attach` bound already.
      if (it->second.tenant == tenant && it->second.domain == domain) return path;
      return hz::Status::Exists(
          path + " is already bound, for tenant " + it->second.tenant +
          (it->second.domain.empty() ? "" : " and domain " + it->second.domain));
    }
    thread = ThreadForTenantLocked(tenant);
  }
  std::error_code fec;
  fs::create_directories(fs::path(path).parent_path(), fec);
  DeviceEnv env = env_;
  vdev::DeviceFactory factory = [env, t](const std::string& p) {
    return std::make_unique<HzDevice>(env, t, p);
  };
  const vdev::ServerOptions opts = VmServerOptions(*t, thread);
  // Made on the thread that will serve it. The operator waits a bounded
  // time: a late start is undone on that thread, never half recorded here.
  struct BindCall {
    std::mutex mu;
    bool gave_up = false;
    std::unique_ptr<vdev::Server> server;
    std::string error;
  };
  auto start = std::make_shared<BindCall>();
  boost::asio::io_context& io = vdev_threads_[thread]->io;
  // An upgrade's successor, or a process restarted after a crash, starts the
  // servers once every binding is loaded (ServeInherited).
  const bool taken_over = takeover_ != nullptr || recovery_ != nullptr;
  const bool answered = OnVdevThread(
      thread,
      [start, &io, path, factory, opts, taken_over] {
        auto server = std::make_unique<vdev::Server>(io, path, factory, opts);
        std::string error;
        if (!taken_over && !server->Start(&error)) server.reset();
        std::lock_guard<std::mutex> lock(start->mu);
        if (start->gave_up) {
          if (server) server->Stop();
          return;
        }
        start->server = std::move(server);
        start->error = std::move(error);
      },
      ControlDeadline());
  if (!answered) {
    std::lock_guard<std::mutex> lock(start->mu);  // the call may be running still
    start->gave_up = true;
    return hz::Status::TimedOut(
        fmt::format("{}: connection thread {} did not answer within {} ms; the VM is not bound",
                    path, thread, config_.shutdown_timeout_ms));
  }
  if (!start->server) return hz::Status::IoError(path + ": " + start->error);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Binding& b = bindings_[path];
    b.tenant = tenant;
    b.domain = domain;
    b.tenant_ptr = t;
    b.thread = thread;
    b.server = std::move(start->server);
  }
  spdlog::info("event=vm_bound tenant={} socket={} domain={}", tenant, path, domain);
  SaveState();
  return path;
}

size_t Service::ThreadForTenantLocked(const std::string& tenant) const {
  std::vector<size_t> vms(vdev_threads_.size(), 0);
  for (const auto& [path, b] : bindings_) {
    if (b.tenant == tenant) return b.thread;
    vms[b.thread]++;
  }
  return static_cast<size_t>(std::min_element(vms.begin(), vms.end()) - vms.begin());
}

hz::Status Service::UnbindVm(const std::string& socket_path, const std::string& domain) {
  std::string path = ResolveSocketPath(socket_path);
  std::unique_ptr<vdev::Server> server;
  size_t thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bindings_.find(path);
    if (it == bindings_.end()) return hz::Status::NotFound(path + " is not bound");
    if (!domain.empty() && it->second.domain != domain) {
      return hz::Status::State(path + " is bound for domain '" + it->second.domain + "', not '" +
                               domain + "'");
    }
    server = std::move(it->second.server);
    thread = it->second.thread;
    bindings_.erase(it);
  }
  if (server) {
    // The server is stopped and destroyed on its own thread, whenever that
    // thread gets to it (the function is its only owner, and ~Server stops
    // it); the operator waits for that a bounded time only.
    std::function<void()> stop =
        [owned = std::shared_ptr<vdev::Server>(std::move(server))]() mutable { owned.reset(); };
    const bool answered = OnVdevThread(thread, std::move(stop), ControlDeadline());
    if (!answered) {
      spdlog::warn("event=vm_unbind_late socket={} thread={} timeout_ms={}", path, thread,
                   config_.shutdown_timeout_ms);
    }
  }
  spdlog::info("event=vm_unbound socket={}", path);
  SaveState();
  return hz::Status::Ok();
}

std::vector<VmView> Service::Vms() const {
  std::vector<VmView> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, b] : bindings_) {
      VmView v;
      v.socket_path = path;
      v.tenant = b.tenant;
      v.domain = b.domain;
      v.listening = b.server != nullptr;
      v.thread = b.thread;
      out.push_back(std::move(v));
    }
  }
  devices_.ForEach([&](HzDevice& d) {
    for (VmView& v : out) {
      if (v.socket_path == d.socket_path()) v.devices.push_back(d.Info());
    }
  });
  return out;
}

std::vector<CommSummary> Service::Communicators() const {
  return coll_ ? coll_->Communicators() : std::vector<CommSummary>{};
}

std::optional<CommandResult> Service::EngineCommand(const std::string& cmd, const json& req) {
  const CommandRegistry::Command* c = commands_.Find(cmd);
  if (c == nullptr) return std::nullopt;
  if (auto t = req.find("tenant"); c->names_tenant && t != req.end() && t->is_string()) {
    if (!tenants_.Find(t->get<std::string>())) {
      return hz::Status::NotFound("no tenant " + t->get<std::string>());
    }
  }
  return c->run(req);
}

}  // namespace hz::service
