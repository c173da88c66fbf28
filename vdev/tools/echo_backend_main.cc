// vdev-echo-backend: serves the echo device on a vhost-user socket, for
// real-QEMU handshake tests and benchmarks. Logs every vhost-user message at
// debug level (--log-level debug) and exits cleanly on SIGTERM / SIGINT.
#include <csignal>
#include <cstdio>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "CLI/CLI.hpp"
#include "spdlog/spdlog.h"
#include "vdev/echo_device.h"
#include "vdev/server.h"

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
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));

  vdev::EchoDevice::Options device_options;
  device_options.queues = static_cast<uint16_t>(queues);
  device_options.config_size = static_cast<uint32_t>(config_size);
  device_options.max_queue_size = static_cast<uint16_t>(max_queue_size);

  vdev::ServerOptions options;
  options.mode = client ? vdev::ServerOptions::Mode::kClient : vdev::ServerOptions::Mode::kServer;
  options.session.busy_poll = busy_poll;
  options.session.require_sealed_memory = require_sealed || !allow_unsealed;

  boost::asio::io_context io;
  vdev::Server server(
      io, socket_path,
      [device_options](const std::string&) {
        return std::make_unique<vdev::EchoDevice>(device_options);
      },
      options);
  std::string error;
  if (!server.Start(&error)) {
    spdlog::error("vdev-echo-backend: {}", error);
    return 1;
  }
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
  spdlog::info("vdev-echo-backend: exited");
  return 0;
}
