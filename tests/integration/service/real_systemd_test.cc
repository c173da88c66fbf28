// harmonaized's systemd unit under a real systemd, through crashes (SPEC.md
// §2.10) and live upgrades (§2.9). The unit this build installs
// (hypervisor/service/harmonaized.service, its sandbox included) runs under a systemd user manager
// (user_service_manager.h), with a drop-in that points it at the build's
// binary and at directories of the test. Two rank processes on virtio-user
// run a verified all-reduce loop while the test has systemd SIGKILL the
// service's main process, three times: systemd restarts it (Restart=) and
// hands back its fd store (LISTEN_FDS), and the ranks go on in the same
// sessions, forming a new communicator where one was lost. Then the same
// through three live upgrades, which systemd must follow to each new
// process without taking them for a crash. The manager tracks the unit's
// processes by cgroup, as PID 1 does: after each crash and upgrade the
// unit's cgroup holds the process that serves and nothing else, and a stop
// leaves nothing running.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "allreduce_loop.h"
#include "service_harness.h"
#include "user_service_manager.h"

namespace hz::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUnit = "harmonaized.service";
constexpr int kCrashes = 3;  // and upgrades

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Where the test's service runs: the build's binary on the test's
// directories; the rest of the unit as installed.
std::string DropIn(const std::string& dir) {
  const std::string binary = HZ_HARMONAIZED_PATH;
  std::string d = "[Service]\nExecStart=\nExecStart=" + binary +
                  " --foreground --fd-store --control-socket " + dir + "/run/control.sock" +
                  " --vm-socket-dir " + dir + "/run --state-dir " + dir +
                  "/state --no-metrics\n"
                  "EnvironmentFile=\nReadWritePaths=\nReadWritePaths=" +
                  dir + "\nStandardError=append:" + dir + "/service.log\n";
  // ProtectHome= would hide a build tree under a home directory, and
  // PrivateTmp= one under /tmp (exit 203/EXEC).
  for (const char* home : {"/home/", "/root/", "/run/user/"}) {
    if (binary.rfind(home, 0) == 0) d += "ProtectHome=read-only\n";
  }
  for (const char* tmp : {"/tmp/", "/var/tmp/"}) {
    if (binary.rfind(tmp, 0) == 0) d += "PrivateTmp=no\n";
  }
  return d;
}

// The main process after `before` once systemd reports the unit active again.
std::string NextMainPid(const UserServiceManager& systemd, const std::string& before) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    const std::string pid = systemd.Property(kUnit, "MainPID");
    if (!pid.empty() && pid != "0" && pid != before &&
        systemd.Property(kUnit, "ActiveState") == "active") {
      return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

// The unit, started by a systemd of the test's own, with tenant t1 and two
// VM sockets bound.
class RealSystemd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the manager runs in a mount namespace";
    if (access(UserServiceManager::kSystemd, X_OK) != 0) {
      GTEST_SKIP() << UserServiceManager::kSystemd << " is not installed (scripts/install-deps.sh)";
    }
    systemd_ = std::make_unique<UserServiceManager>();
    ASSERT_TRUE(systemd_->ok()) << systemd_->why();
    const std::string unit = ReadFile(HZ_SYSTEMD_UNIT);
    ASSERT_FALSE(unit.empty()) << HZ_SYSTEMD_UNIT;
    ASSERT_TRUE(systemd_->Install(kUnit, unit, DropIn(systemd_->dir())));
    CommandResult started = Systemctl("start");
    ASSERT_EQ(started.code, 0) << started.out << Systemctl("status").out;
    control_ = systemd_->dir() + "/run/control.sock";
    vms_ = TenantWithVmsAt(control_, systemd_->dir() + "/run", "t1", 2);
    ASSERT_EQ(vms_.size(), 2u);
    ExpectTheUnitRunsOnly(Property("MainPID"));
  }

  void TearDown() override {
    if (systemd_ == nullptr || !systemd_->ok()) return;
    if (HasFailure()) {
      std::cerr << "the service's log:\n" << ReadFile(systemd_->dir() + "/service.log");
    }
    const std::string group = Property("ControlGroup");
    CommandResult stopped = Systemctl("stop");
    EXPECT_EQ(stopped.code, 0) << stopped.out;
    // The stop was once reported a moment before the cgroup's last task had
    // gone (under the sanitizers); a process still there after the wait
    // outlived the stop.
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!systemd_->Processes(group).empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(systemd_->Processes(group).empty()) << "a process of the unit outlived its stop";
  }

  // The unit's cgroup, under the manager's, holds pid and nothing else (a
  // process that served before has exited), within a bounded wait.
  void ExpectTheUnitRunsOnly(const std::string& pid) {
    const std::string group = Property("ControlGroup");
    ASSERT_EQ(group.rfind(systemd_->cgroup() + "/", 0), 0u)
        << "the unit's cgroup " << group << " is not under the manager's " << systemd_->cgroup();
    const std::vector<pid_t> only = {static_cast<pid_t>(std::stol(pid))};
    std::vector<pid_t> procs;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    do {
      procs = systemd_->Processes(group);
      if (procs == only) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (Clock::now() < deadline);
    ADD_FAILURE() << group << " holds " << ::testing::PrintToString(procs) << ", not only " << pid;
  }

  CommandResult Systemctl(const std::string& verb) const {
    return systemd_->Systemctl(verb + " " + kUnit);
  }
  std::string Property(const std::string& name) const { return systemd_->Property(kUnit, name); }

  // SERVICE_RESTARTED notices in t1's durable event log, as its next seq.
  uint64_t NextEventSeq() {
    nlohmann::json events = ControlAt(control_, {{"cmd", "event.status"}, {"tenant", "t1"}});
    EXPECT_TRUE(events.value("ok", false)) << events.dump();
    return events["result"].value("next_seq", uint64_t{0});
  }

  std::unique_ptr<UserServiceManager> systemd_;
  std::string control_;
  std::vector<std::string> vms_;
};

TEST_F(RealSystemd, RestartsACrashedServiceAndTheVmsKeepTheirSessions) {
  AllReduceLoop loop(2, 256, 0, /*re_form=*/true);
  LoopRanks ranks(loop, vms_);
  ASSERT_TRUE(loop.ProgressTo(10)) << "the ranks never got going";

  std::string pid = Property("MainPID");
  for (int k = 0; k < kCrashes; ++k) {
    CommandResult killed = Systemctl("kill --signal=SIGKILL");
    ASSERT_EQ(killed.code, 0) << killed.out;
    const std::string next = NextMainPid(*systemd_, pid);
    ASSERT_FALSE(next.empty()) << "systemd did not restart the service after crash " << k << "\n"
                               << Systemctl("status").out;
    pid = next;
    ExpectTheUnitRunsOnly(pid);
    ASSERT_TRUE(loop.ProgressTo(loop.Slowest() + 5)) << "stalled after crash " << k;
  }
  EXPECT_EQ(ranks.Finish(), (std::vector<int>{0, 0})) << "a rank lost its session or a result";
  EXPECT_EQ(Property("NRestarts"), std::to_string(kCrashes));
  // Each restarted process told the tenant, in its durable event log.
  EXPECT_EQ(NextEventSeq(), static_cast<uint64_t>(kCrashes) + 1);
}

// The soft limit the kernel holds process pid to, as /proc/<pid>/limits
// names it; -1 when it cannot be read.
long SoftLimit(pid_t pid, const std::string& name) {
  std::istringstream limits(ReadFile("/proc/" + std::to_string(pid) + "/limits"));
  for (std::string line; std::getline(limits, line);) {
    if (line.rfind(name, 0) == 0) return std::stol(line.substr(name.size()));
  }
  return -1;
}

// The unit keeps no CAP_SYS_NICE; its LimitNICE=+10 lets the service take its
// bulk threads back from the kernel's idle class at their nice values (10
// and 19), so they wait there (bulk_idle_class). A manager that cannot grant
// the limit (a user manager without CAP_SYS_RESOURCE) shows the other half:
// the service says so and runs them at their nice values.
TEST_F(RealSystemd, BulkThreadsWaitInTheIdleClassWhereTheUnitsLimitsAllow) {
  const pid_t pid = static_cast<pid_t>(std::stol(Property("MainPID")));
  const long nice_limit = SoftLimit(pid, "Max nice priority");
  ASSERT_GE(nice_limit, 0) << ReadFile("/proc/" + std::to_string(pid) + "/limits");
  const bool granted = nice_limit >= 10;
  const int expected = granted ? SCHED_IDLE : SCHED_OTHER;
  const auto policies = WaitForThreads(pid, kStatPolicy, [expected](const auto& t) {
    const std::vector<int> workers = PoolValues(t, "hz-coll-");
    return !workers.empty() && workers == std::vector<int>(workers.size(), expected);
  });
  const std::string all = ::testing::PrintToString(policies);
  const std::vector<int> workers = PoolValues(policies, "hz-coll-");
  ASSERT_FALSE(workers.empty()) << all;
  EXPECT_EQ(workers, std::vector<int>(workers.size(), expected)) << all;
  const bool said = ReadFile(systemd_->dir() + "/service.log").find("event=bulk_idle_class_off") !=
                    std::string::npos;
  EXPECT_EQ(said, !granted) << "RLIMIT_NICE " << nice_limit;
  if (!granted) {
    std::cout << "the manager could not grant LimitNICE= (RLIMIT_NICE " << nice_limit
              << "): checked that the service falls back to nice values\n";
    EXPECT_EQ(DaemonThreads(pid).find("hz-coll-0")->second, 10) << all;
  }
}

// A live upgrade under systemd (SPEC.md §2.9): the old process tells systemd
// the new main PID (MAINPID=) before it exits, so systemd neither restarts
// the unit nor stops what is left of it; the ranks never notice.
TEST_F(RealSystemd, FollowsALiveUpgradeToTheNewMainProcess) {
  AllReduceLoop loop(2, 256);
  LoopRanks ranks(loop, vms_);
  ASSERT_TRUE(loop.ProgressTo(10)) << "the ranks never got going";

  std::string pid = Property("MainPID");
  for (int u = 0; u < kCrashes; ++u) {
    nlohmann::json started = ControlAt(control_, {{"cmd", "upgrade"}});
    ASSERT_TRUE(started.value("ok", false)) << started.dump();
    const std::string next = NextMainPid(*systemd_, pid);
    ASSERT_FALSE(next.empty()) << "systemd did not follow upgrade " << u << "\n"
                               << Systemctl("status").out;
    nlohmann::json status = ControlAt(control_, {{"cmd", "status"}});
    EXPECT_EQ(std::to_string(status["result"].value("pid", -1)), next)
        << "systemd's main PID is not the process that serves";
    pid = next;
    // The old process exited once the new one confirmed.
    ExpectTheUnitRunsOnly(pid);
    ASSERT_TRUE(loop.ProgressTo(loop.Slowest() + 5)) << "stalled after upgrade " << u;
  }
  EXPECT_EQ(ranks.Finish(), (std::vector<int>{0, 0})) << "a rank lost its session or a result";
  EXPECT_EQ(Property("NRestarts"), "0") << "systemd took an upgrade for a crash";
  EXPECT_EQ(Property("ActiveState"), "active");
  EXPECT_EQ(NextEventSeq(), static_cast<uint64_t>(kCrashes) + 1);
}

}  // namespace
}  // namespace hz::testing
