// A real systemd for tests: `systemd --user`, run by root in a mount
// namespace of its own, with its units, state and runtime directories in a
// directory of the test. Nothing of the host's own systemd (if any) is used
// or changed, but the manager places itself and its units in the machine's
// cgroup hierarchy, under names every such manager uses: run one at a time.
// What it runs is what systemd runs: Type=notify, Restart=, the
// file-descriptor store and the unit's sandbox.
#ifndef HZ_TESTS_INTEGRATION_SERVICE_USER_SERVICE_MANAGER_H_
#define HZ_TESTS_INTEGRATION_SERVICE_USER_SERVICE_MANAGER_H_

#include <sys/types.h>

#include <string>

#include "hz_test/run_command.h"

namespace hz::testing {

class UserServiceManager {
 public:
  // The systemd binary a Debian system has, whether or not it booted with it.
  static constexpr const char* kSystemd = "/lib/systemd/systemd";

  // Starts the manager and waits until it answers systemctl; ok() says
  // whether it does, why() why not.
  UserServiceManager();
  // Stops every unit and the manager, and removes the directory.
  ~UserServiceManager();
  UserServiceManager(const UserServiceManager&) = delete;
  UserServiceManager& operator=(const UserServiceManager&) = delete;

  bool ok() const { return pid_ > 0 && why_.empty(); }
  const std::string& why() const { return why_; }
  // The test's directory, under /var/lib: the unit's PrivateTmp= hides /tmp
  // (with the manager's notify socket, were it there), and a ReadWritePaths=
  // under /run failed the sandbox's set-up (exit 226/NAMESPACE).
  const std::string& dir() const { return dir_; }

  // Writes unit `name` and a drop-in for it into the manager's unit
  // directory and reloads; false when the manager refuses.
  bool Install(const std::string& name, const std::string& unit, const std::string& dropin);
  // systemctl --user ARGS, against this manager.
  CommandResult Systemctl(const std::string& args) const;
  // A property of a unit (systemctl show --value), empty when unknown.
  std::string Property(const std::string& unit, const std::string& property) const;

 private:
  void Start();
  std::string dir_;
  std::string why_;
  pid_t pid_ = -1;
};

}  // namespace hz::testing

#endif  // HZ_TESTS_INTEGRATION_SERVICE_USER_SERVICE_MANAGER_H_
