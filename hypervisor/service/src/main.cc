// harmonaized: the HarmonAIze host service.
//
//   harmonaized [--config FILE] [--state-dir DIR] [--control-socket PATH]
//   (FILE defaults to /etc/harmonaize/harmonaized.toml, under the install
//   prefix's sysconfdir, when that exists)
//               [--metrics-port N] [--log-level LEVEL] [--foreground] ...
//
// Exit codes (also in --help): 0 after a graceful stop (and for --help and
// --version), 1 when the service cannot start, 2 for command-line or
// configuration errors, 3 after a stop that had to leave a connection thread
// stuck in a handler ([shutdown] timeout_ms).
//
// Under systemd (Type=notify) it tells the manager READY=1 once every
// listener is up, STOPPING=1 when a drain begins, MAINPID= when a live
// upgrade handed the service to a new process, and STATUS= lines.
//
// SIGUSR2 or `hzctl upgrade` upgrades it live: the program it was started as
// (or the one named) is started with the same command line plus
// --handoff-fd, and takes every VM's session over (service_upgrade.cc).
#include "daemon_main.h"

int main(int argc, char** argv) {
  return hz::service::RunDaemon(argc, argv);
}
