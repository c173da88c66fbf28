// Runs the real vhost-user back-end (vdev::Server with the echo device) for
// the integration tests: in this process on its own io_context thread, or in
// a child process (the vdev-echo-backend program).
#ifndef TESTS_INTEGRATION_VDEV_BACKEND_HARNESS_H_
#define TESTS_INTEGRATION_VDEV_BACKEND_HARNESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "hz_test/service_manager.h"
#include "vdev/device.h"
#include "vdev/server.h"

namespace vdev::testing {

// A fresh socket path under /tmp, unique per process and call.
std::string TempSocketPath(const std::string& tag);

// The echo device used by every integration test.
DeviceFactory EchoFactory();

// One io_context thread serving one vdev::Server per path.
class InProcessBackend {
 public:
  explicit InProcessBackend(std::vector<std::string> paths, ServerOptions options = {});
  ~InProcessBackend();
  InProcessBackend(const InProcessBackend&) = delete;
  InProcessBackend& operator=(const InProcessBackend&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& path(size_t i = 0) const { return paths_[i]; }
  Server& server(size_t i = 0) { return *servers_[i]; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::thread thread_;
  bool ok_ = true;
  std::string error_;
};

// The vdev-echo-backend program in a child process.
class ChildBackend {
 public:
  // extra_args are passed to the helper (e.g. "--busy-poll").
  explicit ChildBackend(const std::string& path, std::vector<std::string> extra_args = {});
  ~ChildBackend();  // SIGTERM, then reap
  bool ok() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& path() const { return path_; }
  // Kills it hard (a crashed back-end).
  void Kill();
  // SIGTERM and reap; returns the exit status (0 for a clean exit, which in
  // the sanitizer build also means LeakSanitizer found nothing), or -1.
  int Stop();

 private:
  std::string path_;
  pid_t pid_ = -1;
};

// The pids of this process's live children, found through /proc.
std::vector<pid_t> Children();

// vdev-echo-backend in a child process, followed across the live upgrades it
// makes on SIGUSR2: this process becomes a child subreaper, so each
// successor is re-parented here once its predecessor exits. Construct it
// before this process starts threads (it forks).
class UpgradableBackend {
 public:
  explicit UpgradableBackend(const std::string& path, std::vector<std::string> extra_args = {});
  ~UpgradableBackend();  // SIGTERM to every child, then reap
  UpgradableBackend(const UpgradableBackend&) = delete;
  UpgradableBackend& operator=(const UpgradableBackend&) = delete;
  pid_t pid() const { return pid_; }
  // SIGUSR2, then waits (bounded) for the process to exit and its successor
  // to be the one child left. Returns why not, or an empty string.
  std::string Upgrade();

 private:
  pid_t pid_ = -1;
};

// vdev-echo-backend --fd-store under a service manager that speaks the
// sd_notify protocol (hz_test/service_manager.h), killed and restarted as
// systemd restarts a crashed service: the next process gets the store back.
class RestartingBackend {
 public:
  RestartingBackend(const std::string& path, const std::string& notify_path,
                    std::vector<std::string> extra_args = {});
  ~RestartingBackend();  // SIGTERM and reap
  RestartingBackend(const RestartingBackend&) = delete;
  RestartingBackend& operator=(const RestartingBackend&) = delete;
  bool ok() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The manager reads on a thread of its own: Pause it before looking.
  hz::testing::FakeServiceManager& manager() { return manager_; }
  // SIGKILL and reap: nothing of the process runs any more.
  void Kill();
  // Starts the next process with the store (after Kill); false when it
  // could not be started.
  bool Restart();
  // SIGTERM and reap; the exit status, or -1.
  int Stop();

 private:
  hz::testing::FakeServiceManager manager_;
  std::string path_;
  std::vector<std::string> extra_args_;
  pid_t pid_ = -1;
};

}  // namespace vdev::testing

#endif  // TESTS_INTEGRATION_VDEV_BACKEND_HARNESS_H_
