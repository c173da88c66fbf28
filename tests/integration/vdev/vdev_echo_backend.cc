// vdev_echo_backend: the real vhost-user back-end (vdev::Server) with the
// echo device on one or more socket paths, for tests that need the back-end
// in another process. Runs until SIGTERM or SIGINT.
#include <sched.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "echo_device.h"
#include "vdev/server.h"

int main(int argc, char** argv) {
  CLI::App app{"vhost-user echo back-end for vdev tests"};
  std::vector<std::string> sockets;
  bool busy_poll = false;
  int cpu = -1;
  app.add_option("--socket", sockets, "socket path to serve (repeatable)")->required();
  app.add_flag("--busy-poll", busy_poll, "poll every queue instead of waiting for kicks");
  app.add_option("--cpu", cpu, "pin the back-end thread to this CPU");
  CLI11_PARSE(app, argc, argv);

  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("sched_setaffinity");
  }
  boost::asio::io_context io;
  vdev::ServerOptions options;
  options.session.busy_poll = busy_poll;
  std::vector<std::unique_ptr<vdev::Server>> servers;
  for (const std::string& path : sockets) {
    servers.push_back(
        std::make_unique<vdev::Server>(io, path, vdev::testing::MakeEchoFactory(), options));
    std::string error;
    if (!servers.back()->Start(&error)) {
      std::fprintf(stderr, "vdev_echo_backend: %s: %s\n", path.c_str(), error.c_str());
      return 1;
    }
  }
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) {
    for (auto& s : servers) s->Stop();
    io.stop();
  });
  io.run();
  return 0;
}
