// A real systemd for tests: `systemd --user`, run by root in a mount
// namespace of its own, with its units, state and runtime directories in a
// directory of the test. Nothing of the host's own systemd (if any) is used
// or changed. What it runs is what systemd runs: Type=notify, Restart=, the
// file-descriptor store and the unit's sandbox.
//
// The manager starts in a cgroup of its own (as user@.service delegates one
// to each user's manager), made by the test in each hierarchy systemd uses,
// so it tracks its units' processes by cgroup as PID 1 would, and managers
// of two tests do not meet (without one, a manager puts itself and its
// units at the root of the machine's hierarchy, under names every such
// manager uses). Where no cgroup can be made, ok() is false.
#ifndef HZ_TESTS_INTEGRATION_SERVICE_USER_SERVICE_MANAGER_H_
#define HZ_TESTS_INTEGRATION_SERVICE_USER_SERVICE_MANAGER_H_

#include <sys/types.h>

#include <string>
#include <vector>

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

  // The manager's cgroup, as systemd names cgroups (ControlGroup=).
  const std::string& cgroup() const { return cgroup_; }
  // The processes in a cgroup that systemd named (a unit's ControlGroup=).
  std::vector<pid_t> Processes(const std::string& control_group) const;

 private:
  // Makes cgroup_ in each hierarchy systemd would use; the paths of their
  // cgroup.procs files, which the manager joins before it starts.
  std::vector<std::string> MakeCgroups();
  void Start(const std::vector<std::string>& join);
  // Kills what is left in the manager's cgroups and removes them.
  void RemoveCgroups();
  std::string dir_;
  std::string why_;
  pid_t pid_ = -1;
  std::string cgroup_;
  std::vector<std::string> hierarchies_;  // mount points holding cgroup_
};

}  // namespace hz::testing

#endif  // HZ_TESTS_INTEGRATION_SERVICE_USER_SERVICE_MANAGER_H_
