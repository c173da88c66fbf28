// harmonaized's main(): the command line and configuration file, logging,
// systemd's notifications, a live upgrade's takeover, then start and serve.
#include "daemon_main.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <systemd/sd-daemon.h>
#include <CLI/CLI.hpp>

#include "daemon_log.h"
#include "fmt/format.h"
#include "hz/service/config.h"
#include "hz/service/engines.h"
#include "hz/service/service.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "vdev/upgrade.h"

namespace {

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  stopped gracefully (SIGTERM or SIGINT), or --help / --version\n"
    "  1  the service could not start (socket in use, state directory locked, ...)\n"
    "  2  command-line or configuration error\n"
    "  3  stopped, but a connection thread stuck in a handler had to be left\n"
    "     running ([shutdown] timeout_ms)";

void SetUpLogging(const hz::service::ServiceConfig& c) {
  using hz::service::LogDestination;
  using hz::service::LogFormat;
  auto logger = spdlog::stderr_logger_mt("harmonaized");
  const bool journal = hz::service::IsJournalStream(std::getenv("JOURNAL_STREAM"), STDERR_FILENO);
  logger->set_formatter(
      hz::service::MakeLogFormatter(c.log_format == "json" ? LogFormat::kJson : LogFormat::kText,
                                    journal ? LogDestination::kJournal : LogDestination::kPlain));
  logger->set_level(spdlog::level::from_str(c.log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

// Tells systemd (when NOTIFY_SOCKET names its socket; otherwise nothing).
void Notify(const std::string& state) {
  int rc = sd_notify(0, state.c_str());
  if (rc < 0) spdlog::warn("event=sd_notify_failed error=\"{}\"", std::strerror(-rc));
}

void NotifyOnLifecycle(hz::service::Service& service) {
  hz::service::Service::LifecycleHooks hooks;
  hooks.serving = [&service] {
    nlohmann::json s = service.Status();
    Notify(fmt::format("READY=1\nSTATUS=Serving {} tenants, {} VM sockets; control socket {}",
                       s["tenants"].get<size_t>(), s["vms_bound"].get<size_t>(),
                       s["control_socket"].get<std::string>()));
    spdlog::info("event=ready");
  };
  hooks.stopping = [] { Notify("STOPPING=1\nSTATUS=Draining: finishing in-flight requests"); };
  hooks.handed_over = [](pid_t successor) {
    Notify(fmt::format("MAINPID={}\nSTATUS=Handed over to process {}", successor, successor));
    // systemd must know the new main process before this one exits: else it
    // takes the exit for the service's and stops the unit, successor too.
    if (int rc = sd_notify_barrier(0, 5'000'000); rc < 0 && rc != -ENOENT) {
      spdlog::warn("event=sd_notify_barrier_failed error=\"{}\"", std::strerror(-rc));
    }
    spdlog::info("event=exit_after_upgrade successor={}", successor);
    spdlog::shutdown();
    std::_Exit(0);
  };
  service.SetLifecycleHooks(std::move(hooks));
}

// Each VM connection holds about eight descriptors (socket, memory fds,
// kick/call eventfds), so the usual soft limit of 1024 caps a host near 120
// VMs. Raise the soft limit to the hard one, as systemd's LimitNOFILE would.
void RaiseFdLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t before = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = before;
  }
  spdlog::info("event=fd_limit soft={} hard={} vms_approx={}", rl.rlim_cur, rl.rlim_max,
               rl.rlim_cur / 8);
}

// The program to start for a live upgrade: this one's path as it was
// started, resolved now, since /proc/self/exe names a deleted file once a
// package upgrade replaced the binary.
std::string ProgramPath(const char* argv0) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

// This process's arguments, for its successor: all but --handoff-fd N.
std::vector<std::string> ArgsWithoutHandoff(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == vdev::kHandoffFdOption) {
      ++i;
      continue;
    }
    if (a.rfind(std::string(vdev::kHandoffFdOption) + "=", 0) == 0) continue;
    args.push_back(a);
  }
  return args;
}

// Serves until SIGTERM or SIGINT; the process's exit status.
int Serve(hz::service::Service& service) {
  service.Run();
  if (!service.stopped_cleanly()) {
    // The stuck thread may still use the service: destroying it, or running
    // the exit handlers, could crash or hang under it.
    spdlog::critical("event=exit_unclean status=3");
    spdlog::shutdown();
    std::_Exit(3);
  }
  // Stopped: further SIGTERMs (an impatient supervisor) must not turn the
  // clean exit into a kill while the service object is torn down.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return 0;
}

// Fills config from the command line and the configuration file it names.
// Returns -1 to go on, or the exit status (--help, --version, an error).
int ParseCommandLine(int argc, char** argv, hz::service::ServiceConfig* config, int* handoff_fd) {
  CLI::App app{"harmonaized: the HarmonAIze host service"};
  app.set_version_flag("--version", "harmonaized " HZ_PROJECT_VERSION);
  app.footer(kExitCodes);
  // A flag given twice takes its last value: the systemd unit names the
  // socket locations and HARMONAIZED_ARGS, after them, may move them.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string config_file;
  std::string state_dir, control_socket, vm_socket_dir, log_level, log_format;
  int metrics_port = -1;
  uint32_t workers = 0;
  int poll_us = -1;
  bool foreground = false, no_metrics = false, fd_store = false;
  app.add_option("-c,--config", config_file,
                 "TOML configuration file (default " HZ_DEFAULT_CONFIG
                 " when it exists; --config /dev/null reads none)");
  app.add_option("--state-dir", state_dir, "state directory (default /var/lib/harmonaize)");
  app.add_option("--control-socket", control_socket,
                 "operator socket (default <state-dir>/control.sock)");
  app.add_option("--vm-socket-dir", vm_socket_dir,
                 "directory for relative VM socket paths (default <state-dir>/vms)");
  app.add_option("--metrics-port", metrics_port, "Prometheus port on 127.0.0.1 (0: any free)")
      ->check(CLI::Range(0, 65535));
  app.add_flag("--no-metrics", no_metrics, "do not serve /metrics");
  app.add_option("--worker-threads", workers, "threads serving VM connections")
      ->check(CLI::Range(1, 256));
  app.add_option("--connection-poll-us", poll_us,
                 "how long a connection thread keeps polling after work before it sleeps")
      ->check(CLI::Range(0, 100000));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--log-format", log_format, "text (key=value) or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--fd-store", fd_store,
               "keep VM sessions in systemd's fd store and serve them on after a crash "
               "(the unit needs FileDescriptorStoreMax=)");
  app.add_flag("-f,--foreground", foreground,
               "stay in the foreground (the only mode; systemd runs it so)");
  app.add_option(vdev::kHandoffFdOption, *handoff_fd,
                 "take the service over from the running process through this descriptor "
                 "(a live upgrade starts the new program so)")
      ->check(CLI::Range(0, 1 << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  std::string error;
  // As most daemons do, the system's configuration file is read unless
  // another is named.
  if (config_file.empty() && access(HZ_DEFAULT_CONFIG, F_OK) == 0) config_file = HZ_DEFAULT_CONFIG;
  if (!config_file.empty() && !hz::service::LoadConfigFile(config_file, config, &error)) {
    std::fprintf(stderr, "harmonaized: config error: %s\n", error.c_str());
    return 2;
  }
  if (!state_dir.empty()) config->state_dir = state_dir;
  if (!control_socket.empty()) config->control_socket = control_socket;
  if (!vm_socket_dir.empty()) config->vm_socket_dir = vm_socket_dir;
  if (metrics_port >= 0) config->metrics_port = static_cast<uint16_t>(metrics_port);
  if (no_metrics) config->metrics_enabled = false;
  if (fd_store) config->fd_store = true;
  if (workers > 0) config->worker_threads = workers;
  if (poll_us >= 0) config->connection_poll_us = static_cast<uint32_t>(poll_us);
  if (!log_level.empty()) config->log_level = log_level;
  if (!log_format.empty()) config->log_format = log_format;
  if (!hz::service::ValidateConfig(*config, &error)) {
    std::fprintf(stderr, "harmonaized: config error: %s\n", error.c_str());
    return 2;
  }
  return -1;
}

}  // namespace

namespace hz::service {

int RunDaemon(int argc, char** argv, const std::function<void(Service&)>& before_serving) {
  // Heap memory below 4 MiB comes from the heap and stays there once freed,
  // up to 64 MiB free at its top, instead of being mapped and unmapped each
  // time: on a virtualised host every fresh page costs a fault of some ten
  // microseconds, and the connection thread that many VMs share would pay
  // them for every table a VM builds (a region index of 16384 extents is
  // 96 pages), delaying every other VM's requests.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  ServiceConfig config;
  int handoff_fd = -1;
  if (int rc = ParseCommandLine(argc, argv, &config, &handoff_fd); rc >= 0) return rc;
  SetUpLogging(config);
  RaiseFdLimit();

  Service service(config);
  NotifyOnLifecycle(service);
  service.SetCommandLine(ProgramPath(argv[0]), ArgsWithoutHandoff(argc, argv));
  // A live upgrade's successor: the snapshot first, since the state lock
  // and the listeners it holds come with it.
  std::unique_ptr<vdev::Takeover> takeover;
  if (handoff_fd >= 0) {
    // What does not touch the state directory is done before the
    // predecessor freezes its tenants: faulting in the staging memory is
    // most of the service's start-up.
    Engines::ReserveStaging(config);
    takeover = std::make_unique<vdev::Takeover>(handoff_fd);
    if (std::string e = takeover->Receive(std::chrono::seconds(30)); !e.empty()) {
      spdlog::critical("event=takeover_failed error=\"{}\"", e);
      return 1;
    }
    service.TakeOverFrom(takeover.get());
  }
  Notify("STATUS=Starting: restoring tenants and VM sockets from " + config.state_dir);
  if (hz::Status s = service.Start(); !s.ok()) {
    spdlog::critical("event=start_failed error=\"{}\"", s.message());
    Notify("STATUS=Start failed: " + s.message());
    return 1;
  }
  if (before_serving) before_serving(service);
  return Serve(service);
}

}  // namespace hz::service
