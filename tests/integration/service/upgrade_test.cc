// harmonaized's live upgrade end to end (SPEC.md §2.9): rank processes on
// virtio-user keep their device, their session and their communicator while
// the service is replaced by a new process, again and again.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kCount = 256;  // 1 KiB of fp32 per all-reduce
constexpr int kUpgrades = 20;

// Shared by the test and its rank processes (an anonymous shared mapping).
struct Progress {
  std::atomic<uint64_t> done[2];         // all-reduces verified, per rank
  std::atomic<uint64_t> stop_at;         // the iteration both ranks stop at
  std::atomic<uint64_t> restart_events;  // SERVICE_RESTARTED seen by rank 0
};

Progress* MapProgress() {
  void* p =
      mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* progress = new (p) Progress;
  progress->done[0] = progress->done[1] = 0;
  progress->stop_at = UINT64_MAX;
  progress->restart_events = 0;
  return progress;
}

float Input(int rank, uint64_t it, uint64_t j) {
  return static_cast<float>((rank + 1) * (it % 1000 + 1)) + static_cast<float>(j);
}

// One rank: HELLO, a communicator and two regions once, then verified
// all-reduces until told to stop. The session is never renewed: an upgrade
// that lost any of it would fail a request here.
int RankLoop(const std::vector<std::string>& vms, std::vector<Pipe>& pipes, int rank,
             Progress* progress) {
  HzClient c;
  std::string err;
  if (!c.Connect(vms[rank], 64ull << 20, &err)) {
    std::fprintf(stderr, "rank %d: connect: %s\n", rank, err.c_str());
    return 2;
  }
  if (c.Hello() != HZ_S_OK) return 3;
  hz_comm_uid uid{};
  if (rank == 0) {
    if (c.NewUid(&uid) != HZ_S_OK) return 4;
    pipes[1].Send(&uid, sizeof(uid));
  } else if (!pipes[1].Receive(&uid, sizeof(uid))) {
    return 5;
  }
  uint64_t comm = 0;
  if (c.InitComm(uid, 2, rank, &comm) != HZ_S_OK) return 6;
  GuestBuffer send, recv;
  if (c.Register(kCount * 4, 2, HZ_REGION_F_READ, &send) != HZ_S_OK) return 7;
  if (c.Register(kCount * 4, 2, HZ_REGION_F_WRITE, &recv) != HZ_S_OK) return 8;
  std::vector<float> in(kCount), out(kCount);
  for (uint64_t it = 0; it < progress->stop_at.load(); ++it) {
    for (uint64_t j = 0; j < kCount; ++j) in[j] = Input(rank, it, j);
    send.Write(0, in.data(), kCount * 4);
    hz_coll_args a{};
    a.comm = comm;
    a.count = kCount;
    a.dtype = HZ_FP32;
    a.redop = HZ_SUM;
    a.seq = it;
    a.send = SliceOf(send, 0, kCount * 4);
    a.recv = SliceOf(recv, 0, kCount * 4);
    if (uint32_t st = c.Coll(2 + rank % 2, HZ_OP_ALLREDUCE, a); st != HZ_S_OK) {
      std::fprintf(stderr, "rank %d: all-reduce %llu: status %u\n", rank,
                   static_cast<unsigned long long>(it), st);
      return 10;
    }
    recv.Read(0, out.data(), kCount * 4);
    for (uint64_t j = 0; j < kCount; ++j) {
      if (out[j] != Input(0, it, j) + Input(1, it, j)) {
        std::fprintf(stderr, "rank %d: all-reduce %llu: element %llu is %g\n", rank,
                     static_cast<unsigned long long>(it), static_cast<unsigned long long>(j),
                     out[j]);
        return 11;
      }
    }
    progress->done[rank] = it + 1;
  }
  return 0;
}

uint64_t Slowest(const Progress& p) {
  return std::min(p.done[0].load(), p.done[1].load());
}

// Waits until both ranks verified `target` all-reduces; false if they stall.
bool ProgressTo(const Progress& p, uint64_t target) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Slowest(p) < target) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(ServiceUpgrade, AllReduceRanksKeepRunningAcrossTwentyUpgrades) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("t1", 2);
  ASSERT_EQ(vms.size(), 2u);
  Progress* progress = MapProgress();
  std::vector<Pipe> pipes(2);
  std::vector<int> codes;
  std::thread ranks(
      [&] { codes = RunRanks(2, [&](int rank) { return RankLoop(vms, pipes, rank, progress); }); });
  ASSERT_TRUE(ProgressTo(*progress, 10)) << "the ranks never got going";
  std::vector<pid_t> pids = {svc.pid()};
  for (int u = 0; u < kUpgrades; ++u) {
    std::string error;
    // Every other one by SIGUSR2, as an operator's tooling would.
    const pid_t next = svc.Upgrade(&error, "", /*by_signal=*/u % 2 == 1);
    ASSERT_GT(next, 0) << "upgrade " << u << ": " << error;
    EXPECT_EQ(error, "") << "upgrade " << u;
    pids.push_back(next);
    // The same sessions go on in the new process: the ranks make progress.
    ASSERT_TRUE(ProgressTo(*progress, Slowest(*progress) + 5)) << "stalled after upgrade " << u;
  }
  progress->stop_at = std::max(progress->done[0].load(), progress->done[1].load()) + 3;
  ranks.join();
  ASSERT_EQ(codes.size(), 2u);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(std::unique(pids.begin(), pids.end()), pids.end()) << "each upgrade is a new process";
  // Each new process told the tenant, in its durable event log.
  nlohmann::json events = svc.Control({{"cmd", "event.status"}, {"tenant", "t1"}});
  ASSERT_TRUE(events.value("ok", false)) << events.dump();
  EXPECT_EQ(events["result"].value("next_seq", 0u), static_cast<uint64_t>(kUpgrades) + 1)
      << events.dump();
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(ServiceUpgrade, TheSessionGoesOnWithoutAnotherHello) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("t1", 1);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
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

TEST(ServiceUpgrade, AFailedUpgradeLeavesTheOldProcessServing) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("t1", 1);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
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
  // hzctl's upgrade left the harness's pid behind: find the new one.
  nlohmann::json status = svc.Control({{"cmd", "status"}});
  ASSERT_TRUE(status.value("ok", false));
  // A second service on the same state directory still refuses to start.
  std::string output;
  EXPECT_EQ(svc.RunToExit({}, &output), 1) << output;
  EXPECT_NE(output.find("in use"), std::string::npos) << output;
  const pid_t now = status["result"]["pid"].get<pid_t>();
  ASSERT_EQ(kill(now, SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(waitpid(now, &st, 0), now) << "the new process is the test's to wait for";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace hz::testing
