// harmonaized's main() as a function, so that a test can build a daemon that
// differs in one step (tests/integration/service/stuck_thread_main.cc).
#ifndef HZ_SERVICE_DAEMON_MAIN_H_
#define HZ_SERVICE_DAEMON_MAIN_H_

#include <functional>

#include "hz/service/service.h"

namespace hz::service {

// Parses the command line, starts the service and serves until SIGTERM or
// SIGINT; returns the process's exit status (main.cc lists them).
// `before_serving`, when set, runs once the service has started, just before
// it serves.
int RunDaemon(int argc, char** argv, const std::function<void(Service&)>& before_serving = nullptr);

}  // namespace hz::service

#endif  // HZ_SERVICE_DAEMON_MAIN_H_
