// vdev-echo-backend: serves the echo device on a vhost-user socket, for
// real-QEMU handshake tests and benchmarks. Logs every vhost-user message at
// debug level (--log-level debug) and exits cleanly on SIGTERM / SIGINT.
//
// SIGUSR2 upgrades it live (upgrade.h), as nginx does: it starts
// --upgrade-binary (by default the program it was started as) with the same
// arguments and hands it the socket and the connected front-end, which keeps
// its device. If the successor does not take over, this process carries on.
//
// With --fd-store, run as a systemd service (NOTIFY_SOCKET set, the unit with
// FileDescriptorStoreMax=), it survives its own crash: it keeps the socket,
// the front-end's connection and a journal of the session in the unit's fd
// store, and the process systemd restarts serves on from there
// (crash_recovery.h).
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include "CLI/CLI.hpp"
#include "spdlog/spdlog.h"
#include "vdev/crash_recovery.h"
#include "vdev/echo_device.h"
#include "vdev/server.h"
#include "vdev/upgrade.h"

namespace {

// The program this process runs, resolved now: after a package upgrade
// replaces the file, /proc/self/exe names the deleted old one.
std::string OwnBinary() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return {};
  path[n] = 0;
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vhost-user echo back-end (vdev)"};
  std::string socket_path;
  int queues = 1;
  int config_size = 8;
  int max_queue_size = 1024;
  bool busy_poll = false;
  bool client = false;
  bool require_sealed = false;
  bool allow_unsealed = false;
  std::string log_level = "info";
  app.add_option("--socket", socket_path, "vhost-user socket path")->required();
  app.add_option("--queues", queues, "number of virtqueues")->check(CLI::Range(1, 256));
  app.add_option("--config-size", config_size, "config space bytes")->check(CLI::Range(0, 256));
  app.add_option("--max-queue-size", max_queue_size, "largest ring accepted")
      ->check(CLI::Range(1, 32768));
  app.add_flag("--busy-poll", busy_poll, "poll every ring instead of waiting for kicks");
  app.add_flag("--client", client, "connect to the socket instead of listening on it");
  app.add_flag("--require-sealed-memory", require_sealed,
               "refuse guest memory that is not sealed against shrinking (the default)");
  app.add_flag("--allow-unsealed-memory", allow_unsealed,
               "accept guest memory that cannot be sealed against shrinking: trusts the "
               "front-end never to truncate it (a truncation crashes this process)")
      ->excludes("--require-sealed-memory");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  std::string upgrade_binary = OwnBinary();
  int handoff_fd = -1;
  app.add_option("--upgrade-binary", upgrade_binary, "the program SIGUSR2 upgrades to");
  app.add_option(vdev::kHandoffFdOption, handoff_fd,
                 "take over from a predecessor on this descriptor (set by the predecessor)");
  bool fd_store = false;
  std::string crash_marker;
  app.add_option("--crash-once-on-queue-start", crash_marker,
                 "fault injection for tests: SIGKILL this process when a queue starts (after "
                 "serving the requests already posted), unless FILE exists (it is created "
                 "first, so the restarted process carries on)");
  app.add_flag("--fd-store", fd_store,
               "keep the session in systemd's fd store and recover it after a crash");
  CLI11_PARSE(app, argc, argv);
  // The successor gets the same arguments, less the hand-over descriptor.
  std::vector<std::string> successor_args;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == vdev::kHandoffFdOption) {
      ++i;
      continue;
    }
    successor_args.emplace_back(argv[i]);
  }

  spdlog::set_level(spdlog::level::from_str(log_level));

  vdev::EchoDevice::Options device_options;
  device_options.queues = static_cast<uint16_t>(queues);
  device_options.config_size = static_cast<uint32_t>(config_size);
  device_options.max_queue_size = static_cast<uint16_t>(max_queue_size);
  if (!crash_marker.empty()) {
    device_options.on_queue_started = [crash_marker](uint16_t) {
      const int fd = open(crash_marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
      if (fd < 0) return;  // crashed here once already
      close(fd);
      raise(SIGKILL);
    };
  }

  vdev::ServerOptions options;
  options.mode = client ? vdev::ServerOptions::Mode::kClient : vdev::ServerOptions::Mode::kServer;
  options.session.busy_poll = busy_poll;
  options.session.require_sealed_memory = require_sealed || !allow_unsealed;
  if (fd_store) {
    options.fd_store = vdev::SystemdFdStore();
    if (options.fd_store == nullptr) {
      spdlog::error("vdev-echo-backend: --fd-store needs a service manager (NOTIFY_SOCKET)");
      return 1;
    }
  }

  boost::asio::io_context io;
  vdev::Server server(
      io, socket_path,
      [device_options](const std::string&) {
        return std::make_unique<vdev::EchoDevice>(device_options);
      },
      options);
  std::string error;
  vdev::Server* servers[] = {&server};
  if (handoff_fd >= 0) {
    vdev::Takeover takeover(handoff_fd);
    if (std::string e = takeover.Receive(std::chrono::seconds(10)); !e.empty()) {
      spdlog::error("vdev-echo-backend: no take-over: {}", e);
      return 1;
    }
    if (!takeover.Serve(servers, &error)) spdlog::error("vdev-echo-backend: {}", error);
  } else if (fd_store) {
    // After a crash the store holds what the previous process kept.
    vdev::CrashRecovery recovery(options.fd_store, vdev::TakeStoredFds());
    if (!recovery.Serve(servers, &error)) {
      spdlog::error("vdev-echo-backend: {}", error);
      return 1;
    }
  } else if (!server.Start(&error)) {
    spdlog::error("vdev-echo-backend: {}", error);
    return 1;
  }

  bool handed_over = false;
  std::thread upgrader;
  boost::asio::signal_set upgrade_signal(io, SIGUSR2);
  std::function<void()> await_upgrade = [&] {
    upgrade_signal.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      if (upgrader.joinable()) upgrader.join();
      // The hand-over waits for work on the io_context: run it off it.
      upgrader = std::thread([&] {
        vdev::UpgradeOptions upgrade;
        upgrade.binary = upgrade_binary;
        upgrade.args = successor_args;
        spdlog::info("vdev-echo-backend: upgrading to {}", upgrade.binary);
        vdev::UpgradeResult r = vdev::HandOver(servers, nullptr, upgrade);
        boost::asio::post(io, [&, r] {
          if (!r.error.empty()) {
            spdlog::error("vdev-echo-backend: upgrade failed, still serving: {}", r.error);
            await_upgrade();
            return;
          }
          handed_over = true;
          io.stop();
        });
      });
    });
  };
  await_upgrade();

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("vdev-echo-backend: signal {}, shutting down", signo);
    server.Stop();
    // Busy-poll loops and kick waits end with the connection; stop the loop
    // too so shutdown never waits on a front-end.
    io.stop();
  });
  io.run();
  if (upgrader.joinable()) upgrader.join();
  if (handed_over) {
    spdlog::info("vdev-echo-backend: handed over to its successor; exiting");
    spdlog::shutdown();
    // The successor serves everything now: leave without the destructors,
    // which would tear down what it took over.
    std::_Exit(0);
  }
  spdlog::info("vdev-echo-backend: exited");
  return 0;
}
