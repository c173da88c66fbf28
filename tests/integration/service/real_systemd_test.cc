// harmonaized's systemd unit under a real systemd, through crashes (SPEC.md
// §2.10). The unit this build installs (hypervisor/service/harmonaized.service,
// its sandbox included) runs under a systemd user manager
// (user_service_manager.h), with a drop-in that points it at the build's
// binary and at directories of the test. Two rank processes on virtio-user
// run a verified all-reduce loop while the test has systemd SIGKILL the
// service's main process, three times: systemd restarts it (Restart=) and
// hands back its fd store (LISTEN_FDS), and the ranks go on in the same
// sessions, forming a new communicator where one was lost.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "allreduce_loop.h"
#include "service_harness.h"
#include "user_service_manager.h"

namespace hz::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUnit = "harmonaized.service";
constexpr int kCrashes = 3;

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
                  dir + "\n";
  // ProtectHome= would hide a build tree under a home directory.
  for (const char* home : {"/home/", "/root/", "/run/user/"}) {
    if (binary.rfind(home, 0) == 0) d += "ProtectHome=read-only\n";
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

TEST(RealSystemd, RestartsACrashedServiceAndTheVmsKeepTheirSessions) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the manager runs in a mount namespace";
  if (access(UserServiceManager::kSystemd, X_OK) != 0) {
    GTEST_SKIP() << UserServiceManager::kSystemd << " is not installed (scripts/install-deps.sh)";
  }
  UserServiceManager systemd;
  ASSERT_TRUE(systemd.ok()) << systemd.why();
  const std::string unit = ReadFile(HZ_SYSTEMD_UNIT);
  ASSERT_FALSE(unit.empty()) << HZ_SYSTEMD_UNIT;
  ASSERT_TRUE(systemd.Install(kUnit, unit, DropIn(systemd.dir())));
  CommandResult started = systemd.Systemctl(std::string("start ") + kUnit);
  ASSERT_EQ(started.code, 0) << started.out
                             << systemd.Systemctl("status " + std::string(kUnit)).out;

  const std::string control = systemd.dir() + "/run/control.sock";
  std::vector<std::string> vms = TenantWithVmsAt(control, systemd.dir() + "/run", "t1", 2);
  ASSERT_EQ(vms.size(), 2u);
  AllReduceLoop loop(2, 256, 0, /*re_form=*/true);
  LoopRanks ranks(loop, vms);
  ASSERT_TRUE(loop.ProgressTo(10)) << "the ranks never got going";

  std::string pid = systemd.Property(kUnit, "MainPID");
  for (int k = 0; k < kCrashes; ++k) {
    CommandResult killed = systemd.Systemctl(std::string("kill --signal=SIGKILL ") + kUnit);
    ASSERT_EQ(killed.code, 0) << killed.out;
    const std::string next = NextMainPid(systemd, pid);
    ASSERT_FALSE(next.empty()) << "systemd did not restart the service after crash " << k << "\n"
                               << systemd.Systemctl(std::string("status ") + kUnit).out;
    pid = next;
    ASSERT_TRUE(loop.ProgressTo(loop.Slowest() + 5)) << "stalled after crash " << k;
  }
  EXPECT_EQ(ranks.Finish(), (std::vector<int>{0, 0})) << "a rank lost its session or a result";
  EXPECT_EQ(systemd.Property(kUnit, "NRestarts"), std::to_string(kCrashes));
  // Each restarted process told the tenant, in its durable event log.
  nlohmann::json events = ControlAt(control, {{"cmd", "event.status"}, {"tenant", "t1"}});
  ASSERT_TRUE(events.value("ok", false)) << events.dump();
  EXPECT_EQ(events["result"].value("next_seq", 0u), static_cast<uint64_t>(kCrashes) + 1);
  CommandResult stopped = systemd.Systemctl(std::string("stop ") + kUnit);
  EXPECT_EQ(stopped.code, 0) << stopped.out;
}

}  // namespace
}  // namespace hz::testing
