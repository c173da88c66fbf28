// harmonaized's live upgrade end to end (SPEC.md §2.9): rank processes on
// virtio-user keep their device, their session and their communicator while
// the service is replaced by a new process, again and again.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "allreduce_loop.h"
#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

constexpr uint64_t kCount = 256;  // 1 KiB of fp32 per all-reduce
constexpr int kUpgrades = 20;

TEST(ServiceUpgrade, AllReduceRanksKeepRunningAcrossTwentyUpgrades) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("t1", 2);
  ASSERT_EQ(vms.size(), 2u);
  AllReduceLoop loop(2, kCount);
  LoopRanks ranks(loop, vms);
  ASSERT_TRUE(loop.ProgressTo(10)) << "the ranks never got going";
  std::vector<pid_t> pids = {svc.pid()};
  for (int u = 0; u < kUpgrades; ++u) {
    std::string error;
    // Every other one by SIGUSR2, as an operator's tooling would.
    const pid_t next = svc.Upgrade(&error, "", /*by_signal=*/u % 2 == 1);
    ASSERT_GT(next, 0) << "upgrade " << u << ": " << error;
    EXPECT_EQ(error, "") << "upgrade " << u;
    pids.push_back(next);
    // The same sessions go on in the new process: the ranks make progress.
    ASSERT_TRUE(loop.ProgressTo(loop.Slowest() + 5)) << "stalled after upgrade " << u;
  }
  EXPECT_EQ(ranks.Finish(), (std::vector<int>{0, 0}));
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(std::unique(pids.begin(), pids.end()), pids.end()) << "each upgrade is a new process";
  // Each new process told the tenant, in its durable event log.
  nlohmann::json events = svc.Control({{"cmd", "event.status"}, {"tenant", "t1"}});
  ASSERT_TRUE(events.value("ok", false)) << events.dump();
  EXPECT_EQ(events["result"].value("next_seq", 0u), static_cast<uint64_t>(kUpgrades) + 1)
      << events.dump();
  EXPECT_EQ(svc.Terminate(), 0);
}

// A service with one VM of tenant t1 whose session said HELLO.
class OneSession : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(svc.Start());
    std::vector<std::string> vms = svc.TenantWithVms("t1", 1);
    ASSERT_EQ(vms.size(), 1u);
    ASSERT_TRUE(c.Connect(vms[0]));
    ASSERT_EQ(c.Hello(), HZ_S_OK);
  }

  ServiceProcess svc;
  HzClient c;
};

using ServiceUpgradeSession = OneSession;

TEST_F(ServiceUpgradeSession, GoesOnWithoutAnotherHello) {
  GuestBuffer buf;
  ASSERT_EQ(c.Register(4096, 2, HZ_REGION_F_READ, &buf), HZ_S_OK);
  hz_comm_uid uid{};
  ASSERT_EQ(c.NewUid(&uid), HZ_S_OK);
  uint64_t comm = 0;
  ASSERT_EQ(c.InitComm(uid, 1, 0, &comm), HZ_S_OK);

  std::string error;
  ASSERT_GT(svc.Upgrade(&error), 0) << error;
  // The region and the communicator are there under their ids, in the same
  // session: a stale session would answer ESTATE, a lost handle ENOENT.
  hz_coll_args b{};
  b.comm = comm;
  b.seq = 0;
  EXPECT_EQ(c.Coll(2, HZ_OP_BARRIER, b), HZ_S_OK);
  hz_region_unregister_args u{};
  u.region_id = buf.region;
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_REGION_UNREGISTER, u).status, HZ_S_OK);
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_REGION_UNREGISTER, u).status, HZ_S_ENOENT);
  // The operator's view is the new process's: the VM is connected there.
  nlohmann::json vmlist = svc.Control({{"cmd", "vm.list"}});
  ASSERT_TRUE(vmlist.value("ok", false));
  ASSERT_EQ(vmlist["result"][0]["devices"].size(), 1u) << vmlist.dump();
  const nlohmann::json& device = vmlist["result"][0]["devices"][0];
  EXPECT_TRUE(device.value("hello", false)) << vmlist.dump();
  EXPECT_EQ(device["communicators"].size(), 1u) << vmlist.dump();
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST_F(ServiceUpgradeSession, AFailedUpgradeLeavesTheOldProcessServing) {
  const pid_t before = svc.pid();
  // A program that is not harmonaized never says hello.
  std::string error;
  EXPECT_EQ(svc.Upgrade(&error, "/bin/true"), -1);
  EXPECT_NE(error.find("no hello"), std::string::npos) << error;
  std::string out;
  EXPECT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "upgrade --binary /bin/false", &out), 1) << out;
  EXPECT_NE(out.find("still serves"), std::string::npos) << out;
  EXPECT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "upgrade --binary /nonexistent", &out), 1) << out;
  EXPECT_EQ(svc.pid(), before);
  // The same connection and session carry on.
  GuestBuffer buf;
  EXPECT_EQ(c.Register(4096, 1, HZ_REGION_F_READ, &buf), HZ_S_OK);
  // And a real upgrade works after the failed ones.
  ASSERT_GT(svc.Upgrade(&error), 0) << error;
  hz_region_unregister_args u{};
  u.region_id = buf.region;
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_REGION_UNREGISTER, u).status, HZ_S_OK);
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(ServiceUpgrade, TheNewProcessHoldsTheStateDirectory) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::string error;
  ASSERT_GT(svc.Upgrade(&error), 0) << error;
  std::string out;
  EXPECT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "upgrade", &out), 0) << out;
  EXPECT_NE(out.find("handed over to process"), std::string::npos) << out;
  // hzctl's upgrade left the harness's pid behind: follow it to the new one.
  const pid_t before = svc.pid();
  const pid_t now = svc.FollowUpgrade(&error);
  ASSERT_GT(now, 0) << error;
  EXPECT_NE(now, before);
  // A second service on the same state directory still refuses to start.
  std::string output;
  EXPECT_EQ(svc.RunToExit({}, &output), 1) << output;
  EXPECT_NE(output.find("in use"), std::string::npos) << output;
  // The new process is the test's to stop and wait for.
  EXPECT_EQ(svc.Terminate(), 0);
}

// With --fd-store (as the systemd unit runs it) the old process lets go of
// its crash journal at the hand-over and the new one keeps its own: a crash
// after the upgrade is recovered from the new process's journal.
TEST(ServiceUpgrade, WithAnFdStoreTheNewProcessJournalsAndSurvivesACrash) {
  StoredService stored;
  ASSERT_TRUE(stored.Start());
  ServiceProcess& svc = stored.svc();
  std::vector<std::string> vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  GuestBuffer before;
  ASSERT_EQ(c.Register(4096, 1, HZ_REGION_F_READ, &before), HZ_S_OK);

  std::string error;
  ASSERT_GT(svc.Upgrade(&error), 0) << error;
  // Registered in the new process: only its journal can know it.
  GuestBuffer after;
  ASSERT_EQ(c.Register(4096, 1, HZ_REGION_F_READ, &after), HZ_S_OK);
  ASSERT_TRUE(stored.Crash());
  for (const GuestBuffer* b : {&before, &after}) {
    hz_region_unregister_args u{};
    u.region_id = b->region;
    EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_REGION_UNREGISTER, u).status, HZ_S_OK)
        << "region " << b->region << " was lost";
  }
  EXPECT_EQ(svc.Terminate(), 0);
}

}  // namespace
}  // namespace hz::testing
