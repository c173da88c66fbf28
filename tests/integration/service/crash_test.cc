// harmonaized surviving its own crash end to end (SPEC.md §2.10): with
// --fd-store, under a service manager that speaks systemd's sd_notify and
// fd-store protocol (hz_test/service_manager.h), the daemon is killed with
// SIGKILL and started again with the store, again and again. Rank processes
// on virtio-user keep their device and session; a communicator lost with the
// crashed process fails EABORTED and the ranks form a new one.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "allreduce_loop.h"
#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

constexpr uint64_t kCount = 256;  // 1 KiB of fp32 per all-reduce
constexpr int kCrashes = 20;

// A daemon with --fd-store under its own service manager.
class CrashingService : public ::testing::Test {
 protected:
  void SetUp() override {
    svc_.CaptureLog();
    ASSERT_TRUE(stored_.Start({"--log-level", "info"}));
  }
  bool Crash() { return stored_.Crash(); }

  StoredService stored_;
  ServiceProcess& svc_ = stored_.svc();
  FakeServiceManager& manager_ = stored_.manager();
};

TEST_F(CrashingService, AllReduceRanksGoOnAcrossTwentyKills) {
  std::vector<std::string> vms = svc_.TenantWithVms("t1", 2);
  ASSERT_EQ(vms.size(), 2u);
  AllReduceLoop loop(2, kCount, 0, /*re_form=*/true);
  LoopRanks ranks(loop, vms);
  ASSERT_TRUE(loop.ProgressTo(10)) << "the ranks never got going";
  std::vector<pid_t> pids = {svc_.pid()};
  for (int k = 0; k < kCrashes; ++k) {
    ASSERT_TRUE(Crash()) << "restart " << k;
    pids.push_back(svc_.pid());
    // The same sessions go on in the new process: the ranks make progress.
    ASSERT_TRUE(loop.ProgressTo(loop.Slowest() + 5))
        << "stalled after crash " << k << "; the daemon's log:\n"
        << svc_.Log();
  }
  EXPECT_EQ(ranks.Finish(), (std::vector<int>{0, 0}));
  EXPECT_GE(loop.ReFormed(), 1u) << "no crash cost a communicator";
  EXPECT_LE(loop.ReFormed(), static_cast<uint64_t>(kCrashes));
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(std::unique(pids.begin(), pids.end()), pids.end());
  // Each restarted process told the tenant, in its durable event log.
  nlohmann::json events = svc_.Control({{"cmd", "event.status"}, {"tenant", "t1"}});
  ASSERT_TRUE(events.value("ok", false)) << events.dump();
  EXPECT_EQ(events["result"].value("next_seq", 0u), static_cast<uint64_t>(kCrashes) + 1)
      << events.dump();
  EXPECT_EQ(svc_.Terminate(), 0);
}

TEST_F(CrashingService, TheSessionAndItsRegionsOutliveTheProcess) {
  std::vector<std::string> vms = svc_.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  GuestBuffer send, recv;
  ASSERT_EQ(c.Register(4096, 1, HZ_REGION_F_READ, &send), HZ_S_OK);
  ASSERT_EQ(c.Register(4096, 1, HZ_REGION_F_WRITE, &recv), HZ_S_OK);
  hz_comm_uid uid{};
  ASSERT_EQ(c.NewUid(&uid), HZ_S_OK);
  uint64_t comm = 0;
  ASSERT_EQ(c.InitComm(uid, 1, 0, &comm), HZ_S_OK);

  ASSERT_TRUE(Crash());
  // No HELLO again. The communicator was lost with the engine that served
  // it: a collective on it fails EABORTED (SPEC.md §2.10), and its handle
  // can be destroyed.
  hz_coll_args a = AllReduceArgs(comm, 0, send, recv, 16);
  EXPECT_EQ(c.Coll(HZ_VQ_REQUEST_BASE, HZ_OP_ALLREDUCE, a), HZ_S_EABORTED);
  hz_comm_args d{};
  d.comm = comm;
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_COMM_DESTROY, d).status, HZ_S_OK);
  // The regions are there under their ids; a new communicator works.
  ASSERT_EQ(c.NewUid(&uid), HZ_S_OK);
  ASSERT_EQ(c.InitComm(uid, 1, 0, &comm), HZ_S_OK);
  a.comm = comm;
  EXPECT_EQ(c.Coll(HZ_VQ_REQUEST_BASE, HZ_OP_ALLREDUCE, a), HZ_S_OK);
  for (const GuestBuffer* b : {&send, &recv}) {
    hz_region_unregister_args u{};
    u.region_id = b->region;
    EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_REGION_UNREGISTER, u).status, HZ_S_OK);
  }
  EXPECT_EQ(svc_.Terminate(), 0);
  // A clean stop leaves nothing for a next start to take back.
  manager_.Pause();
  manager_.Drain();
  EXPECT_TRUE(manager_.store().empty()) << manager_.store().front().first;
}

// The front-end takes a ring back (GET_VRING_BASE) while a request on it is
// in flight, and the daemon crashes while the reply waits for that request.
// The next process serves the request again and then answers the stop, as
// the crashed one would have; a crash while the ring is stopped keeps it
// stopped, and the front-end can start it again.
TEST_F(CrashingService, AStopWaitingForARequestIsAnsweredAfterACrash) {
  std::vector<std::string> vms = svc_.TenantWithVms("t1", 2);
  ASSERT_EQ(vms.size(), 2u);
  HzClient c0, c1;
  ASSERT_TRUE(c0.Connect(vms[0]));
  ASSERT_TRUE(c1.Connect(vms[1]));
  ASSERT_EQ(c0.Hello(), HZ_S_OK);
  ASSERT_EQ(c1.Hello(), HZ_S_OK);
  hz_comm_uid uid{};
  ASSERT_EQ(c0.NewUid(&uid), HZ_S_OK);
  hz_comm_init_args init{};
  init.uid = uid;
  init.nranks = 2;
  init.rank = 0;
  init.constraints.flags = HZ_COMM_F_DETERMINISTIC;
  init.constraints.priority_class = HZ_PRIO_NORMAL;
  const uint64_t joining = c0.Post(HZ_VQ_CONTROL, HZ_OP_COMM_INIT, &init, sizeof(init));
  uint64_t comm1 = 0;
  ASSERT_EQ(c1.InitComm(uid, 2, 1, &comm1), HZ_S_OK);
  Reply joined = c0.Wait(HZ_VQ_CONTROL, joining);
  ASSERT_EQ(joined.status, HZ_S_OK);
  uint64_t comm0 = 0;
  ASSERT_GE(joined.result.size(), sizeof(comm0));
  std::memcpy(&comm0, joined.result.data(), sizeof(comm0));
  GuestBuffer send, recv;
  ASSERT_EQ(c0.Register(4096, 1, HZ_REGION_F_READ, &send), HZ_S_OK);
  ASSERT_EQ(c0.Register(4096, 1, HZ_REGION_F_WRITE, &recv), HZ_S_OK);

  // Rank 0's all-reduce waits for rank 1, which never posts: in flight.
  hz_coll_args a = AllReduceArgs(comm0, 0, send, recv, 16);
  const uint64_t waiting = c0.Post(HZ_VQ_REQUEST_BASE, HZ_OP_ALLREDUCE, &a, sizeof(a));
  std::atomic<bool> answered{false};
  vdev::frontend::Status stopped;
  uint16_t base = 0;
  std::thread stopping([&] {
    stopped = c0.dev().StopQueue(HZ_VQ_REQUEST_BASE, &base);
    answered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const bool waited = !answered.load();
  ASSERT_TRUE(Crash());
  stopping.join();
  ASSERT_TRUE(waited) << "the stop did not wait for the request in flight";
  ASSERT_TRUE(stopped.ok()) << stopped.ToString();
  EXPECT_EQ(base, 1u);
  // Served again by the next process: the communicator was lost with the
  // crashed one (SPEC.md §2.10).
  EXPECT_EQ(c0.Wait(HZ_VQ_REQUEST_BASE, waiting).status, HZ_S_EABORTED);

  ASSERT_TRUE(Crash());
  ASSERT_TRUE(c0.dev().StartQueue(HZ_VQ_REQUEST_BASE, base).ok());
  ASSERT_EQ(c0.NewUid(&uid), HZ_S_OK);
  ASSERT_EQ(c0.InitComm(uid, 1, 0, &comm0), HZ_S_OK);
  a.comm = comm0;
  EXPECT_EQ(c0.Coll(HZ_VQ_REQUEST_BASE, HZ_OP_ALLREDUCE, a), HZ_S_OK);
  EXPECT_TRUE(c0.dev().connected());
  EXPECT_EQ(svc_.Terminate(), 0);
}

TEST_F(CrashingService, WithoutAServiceManagerTheFdStoreIsRefused) {
  ServiceProcess other;
  std::string output;
  EXPECT_EQ(other.RunToExit({"--fd-store"}, &output), 1) << output;
  EXPECT_NE(output.find("NOTIFY_SOCKET"), std::string::npos) << output;
}

}  // namespace
}  // namespace hz::testing
