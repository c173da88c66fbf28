// What a tenant sees when things go wrong: malformed requests, another
// tenant's uid, ranks that disagree, stall or die, and the service stopping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

class ServiceFailuresTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(svc_.Start()); }
  bool Healthy() { return svc_.Control({{"cmd", "status"}}).value("ok", false); }
  ServiceProcess svc_;
};

TEST_F(ServiceFailuresTest, BadRequestsGetStatusesAndTheDeviceStaysUsable) {
  auto vms = svc_.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  EXPECT_EQ(c.config().magic, HZ_CONFIG_MAGIC);
  EXPECT_EQ(c.config().status, HZ_CFG_S_READY | HZ_CFG_S_LATENCY_WINDOW);
  // Before HELLO.
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_COMM_UID, nullptr, 0).status, HZ_S_ESTATE);
  // Unknown opcode.
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, 0x7abc, nullptr, 0).status, HZ_S_ENOTSUP);
  // Short header: status with request_id 0.
  Reply r = c.Wait(HZ_VQ_CONTROL, c.PostRaw(HZ_VQ_CONTROL, std::vector<uint8_t>(7, 1), 24));
  EXPECT_EQ(r.status, HZ_S_EINVAL);
  EXPECT_EQ(r.st.request_id, 0u);
  // No room for a status: used length 0.
  r = c.Wait(HZ_VQ_CONTROL, c.PostRaw(HZ_VQ_CONTROL, std::vector<uint8_t>(16, 0), 8));
  EXPECT_EQ(r.used, 0u);
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  // Wrong queue.
  EXPECT_EQ(c.Call(3, HZ_OP_COMM_UID, nullptr, 0).status, HZ_S_EQUEUE);
  hz_coll_args a{};
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_ALLREDUCE, a).status, HZ_S_EQUEUE);
  // Families not implemented yet.
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_TOPOLOGY_GET, nullptr, 0).status, HZ_S_ENOTSUP);
  EXPECT_EQ(c.Call(2, HZ_OP_CKPT_SAVE, hz_ckpt_save_args{}).status, HZ_S_ENOTSUP);
  // Bad slices.
  GuestBuffer b;
  ASSERT_EQ(c.Register(4096, 2, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &b), HZ_S_OK);
  hz_comm_uid uid;
  ASSERT_EQ(c.NewUid(&uid), HZ_S_OK);
  uint64_t comm = 0;
  ASSERT_EQ(c.InitComm(uid, 1, 0, &comm), HZ_S_OK);
  a.comm = comm;
  a.count = 16;
  a.dtype = HZ_FP32;
  a.send = SliceOf(b, 4090, 64);
  a.recv = SliceOf(b, 0, 64);
  EXPECT_EQ(c.Call(2, HZ_OP_ALLREDUCE, a).status, HZ_S_EFAULT);
  a.send = SliceOf(b, ~0ull - 10, 64);
  EXPECT_EQ(c.Call(2, HZ_OP_ALLREDUCE, a).status, HZ_S_EFAULT);
  a.send = SliceOf(b, 0, 64);
  a.send.region_id = 12345;
  EXPECT_EQ(c.Call(2, HZ_OP_ALLREDUCE, a).status, HZ_S_ENOENT);
  // Extents outside guest RAM.
  hz_region_register_args ra{};
  ra.num_extents = 1;
  ra.flags = HZ_REGION_F_READ;
  ra.total_len = 4096;
  hz_extent e{1ull << 50, 4096};
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_REGION_REGISTER, &ra, sizeof(ra), &e, sizeof(e)).status,
            HZ_S_EFAULT);
  // And a good request still works.
  a.send = SliceOf(b, 0, 64);
  a.recv = SliceOf(b, 64, 64);
  EXPECT_EQ(c.Call(2, HZ_OP_ALLREDUCE, a).status, HZ_S_OK);
  EXPECT_TRUE(Healthy());
}

TEST_F(ServiceFailuresTest, AnotherTenantsUidIsRefused) {
  auto a_vms = svc_.TenantWithVms("alpha", 1);
  auto b_vms = svc_.TenantWithVms("beta", 1);
  ASSERT_EQ(a_vms.size() + b_vms.size(), 2u);
  HzClient a, b;
  ASSERT_TRUE(a.Connect(a_vms[0]));
  ASSERT_TRUE(b.Connect(b_vms[0]));
  ASSERT_EQ(a.Hello(), HZ_S_OK);
  ASSERT_EQ(b.Hello(), HZ_S_OK);
  hz_comm_uid uid;
  ASSERT_EQ(a.NewUid(&uid), HZ_S_OK);
  uint64_t comm = 0;
  EXPECT_EQ(b.InitComm(uid, 2, 1, &comm), HZ_S_EPERM);
  // A uid nobody made.
  hz_comm_uid bogus{};
  bogus.bytes[0] = 1;
  EXPECT_EQ(b.InitComm(bogus, 2, 1, &comm), HZ_S_ENOENT);
}

// Two ranks join; `body(rank, client, comm, ready)` runs in each rank process.
std::vector<int> TwoRanks(const std::vector<std::string>& vms, uint32_t timeout_ms,
                          const std::function<int(int, HzClient&, uint64_t)>& body) {
  std::vector<Pipe> pipes(2);
  return RunRanks(2, [&](int rank) {
    HzClient c;
    if (!c.Connect(vms[rank]) || c.Hello() != HZ_S_OK) return 2;
    hz_comm_uid uid{};
    if (rank == 0) {
      if (c.NewUid(&uid) != HZ_S_OK) return 3;
      pipes[1].Send(&uid, sizeof(uid));
    } else if (!pipes[1].Receive(&uid, sizeof(uid))) {
      return 4;
    }
    uint64_t comm = 0;
    if (c.InitComm(uid, 2, rank, &comm, timeout_ms) != HZ_S_OK) return 5;
    return body(rank, c, comm);
  });
}

TEST_F(ServiceFailuresTest, MismatchedRanksAllGetEMismatchAndGoOn) {
  auto vms = svc_.TenantWithVms("t1", 2);
  auto codes = TwoRanks(vms, 0, [](int rank, HzClient& c, uint64_t comm) {
    GuestBuffer s, r;
    if (c.Register(4096, 1, HZ_REGION_F_READ, &s) || c.Register(4096, 1, HZ_REGION_F_WRITE, &r)) {
      return 10;
    }
    uint64_t count = rank == 0 ? 8 : 16;
    if (c.Coll(2, HZ_OP_ALLREDUCE, AllReduceArgs(comm, 0, s, r, count)) != HZ_S_EMISMATCH)
      return 11;
    // The seq is consumed; the communicator stays usable.
    if (c.Coll(2, HZ_OP_ALLREDUCE, AllReduceArgs(comm, 1, s, r, 8)) != HZ_S_OK) return 12;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST_F(ServiceFailuresTest, ARankDestroyingItsHandleAbortsWaitingPeersWithThatCause) {
  auto vms = svc_.TenantWithVms("t1", 2);
  Pipe posted;
  auto codes = TwoRanks(vms, 0, [&](int rank, HzClient& c, uint64_t comm) {
    GuestBuffer s, r;
    if (c.Register(4096, 1, HZ_REGION_F_READ, &s) || c.Register(4096, 1, HZ_REGION_F_WRITE, &r)) {
      return 10;
    }
    if (rank == 1) {
      char x;
      if (!posted.Receive(&x, 1, 30000)) return 20;
      hz_comm_args d{};
      d.comm = comm;
      return c.Call(HZ_VQ_CONTROL, HZ_OP_COMM_DESTROY, d).status == HZ_S_OK ? 0 : 21;
    }
    hz_coll_args a = AllReduceArgs(comm, 0, s, r, 8);
    uint64_t op = c.Post(2, HZ_OP_ALLREDUCE, &a, sizeof(a));
    char x = 1;
    posted.Send(&x, 1);
    Reply rep = c.Wait(2, op, milliseconds(15000));
    if (rep.status != HZ_S_EABORTED) return 11;
    if (rep.st.detail != 4) {  // SPEC §7.3.5: a rank destroyed its handle
      std::fprintf(stderr, "rank 0 got detail %u\n", rep.st.detail);
      return 12;
    }
    // Every later operation on the communicator is refused with the same cause.
    a.seq = 1;
    rep = c.Wait(2, c.Post(2, HZ_OP_ALLREDUCE, &a, sizeof(a)), milliseconds(15000));
    return rep.status == HZ_S_EABORTED && rep.st.detail == 4 ? 0 : 13;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST_F(ServiceFailuresTest, AStalledRankTimesOutInBoundedTime) {
  auto vms = svc_.TenantWithVms("t1", 2);
  Pipe timed_out;
  auto codes = TwoRanks(vms, 2000, [&](int rank, HzClient& c, uint64_t comm) {
    GuestBuffer s, r;
    if (c.Register(4096, 1, HZ_REGION_F_READ, &s) || c.Register(4096, 1, HZ_REGION_F_WRITE, &r)) {
      return 10;
    }
    if (rank == 1) {
      // Posts seq 0 only after rank 0 has given up on it.
      char x;
      if (!timed_out.Receive(&x, 1, 30000)) return 21;
      uint32_t st = c.Coll(2, HZ_OP_ALLREDUCE, AllReduceArgs(comm, 0, s, r, 8));
      return st == HZ_S_EABORTED || st == HZ_S_ETIMEDOUT ? 0 : 20;
    }
    auto t0 = Clock::now();
    uint32_t st = c.Coll(2, HZ_OP_ALLREDUCE, AllReduceArgs(comm, 0, s, r, 8));
    char x = 1;
    timed_out.Send(&x, 1);
    if (st != HZ_S_ETIMEDOUT) return 11;
    // Generous bound: only a hang fails.
    return Clock::now() - t0 < std::chrono::seconds(15) ? 0 : 12;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST_F(ServiceFailuresTest, ARankDyingMidCollectiveAbortsTheOthers) {
  auto vms = svc_.TenantWithVms("t1", 2);
  Pipe posted, victim_pid;
  std::vector<Pipe> pipes(2);
  auto codes = RunRanks(3, [&](int who) {
    if (who == 2) {
      // The reaper: kills rank 1 once rank 0 has posted its all-reduce.
      char x;
      pid_t pid;
      if (!victim_pid.Receive(&pid, sizeof(pid)) || !posted.Receive(&x, 1)) return 30;
      kill(pid, SIGKILL);
      return 0;
    }
    HzClient c;
    if (!c.Connect(vms[who]) || c.Hello() != HZ_S_OK) return 2;
    hz_comm_uid uid{};
    if (who == 0) {
      if (c.NewUid(&uid) != HZ_S_OK) return 3;
      pipes[1].Send(&uid, sizeof(uid));
    } else if (!pipes[1].Receive(&uid, sizeof(uid))) {
      return 4;
    }
    uint64_t comm = 0;
    if (c.InitComm(uid, 2, who, &comm, 60000) != HZ_S_OK) return 5;
    GuestBuffer s, r;
    if (c.Register(1 << 20, 2, HZ_REGION_F_READ, &s) ||
        c.Register(1 << 20, 2, HZ_REGION_F_WRITE, &r)) {
      return 10;
    }
    if (who == 1) {
      pid_t me = getpid();
      victim_pid.Send(&me, sizeof(me));
      pause();  // killed here, without posting
      return 21;
    }
    hz_coll_args a = AllReduceArgs(comm, 0, s, r, 1 << 18);
    uint64_t op = c.Post(2, HZ_OP_ALLREDUCE, &a, sizeof(a));
    char x = 1;
    posted.Send(&x, 1);
    auto t0 = Clock::now();
    Reply rep = c.Wait(2, op, milliseconds(15000));
    if (rep.status != HZ_S_EABORTED) {
      std::fprintf(stderr, "rank 0 got status %u\n", rep.status);
      return 11;
    }
    // The cause (SPEC §7.3.5): a rank's session ended.
    if (rep.st.detail != 2) {
      std::fprintf(stderr, "rank 0 got detail %u\n", rep.st.detail);
      return 13;
    }
    return Clock::now() - t0 < std::chrono::seconds(15) ? 0 : 12;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  EXPECT_EQ(codes[2], 0);
  // The service is healthy and a new communicator on the same sockets works.
  EXPECT_TRUE(Healthy());
  auto again = TwoRanks(vms, 0, [](int, HzClient& c, uint64_t comm) {
    GuestBuffer s, r;
    if (c.Register(4096, 1, HZ_REGION_F_READ, &s) || c.Register(4096, 1, HZ_REGION_F_WRITE, &r)) {
      return 10;
    }
    return c.Coll(2, HZ_OP_ALLREDUCE, AllReduceArgs(comm, 0, s, r, 8)) == HZ_S_OK ? 0 : 11;
  });
  EXPECT_EQ(again, (std::vector<int>{0, 0}));
}

TEST_F(ServiceFailuresTest, SigtermAnswersEveryInFlightRequestWithShutdown) {
  auto vms = svc_.TenantWithVms("t1", 2);
  Pipe ready, joined;
  pid_t service = svc_.pid();
  std::vector<Pipe> pipes(2);
  auto codes = RunRanks(2, [&](int rank) {
    HzClient c;
    if (!c.Connect(vms[rank]) || c.Hello() != HZ_S_OK) return 2;
    hz_comm_uid uid{};
    if (rank == 0) {
      if (c.NewUid(&uid) != HZ_S_OK) return 3;
      pipes[1].Send(&uid, sizeof(uid));
    } else if (!pipes[1].Receive(&uid, sizeof(uid))) {
      return 4;
    }
    uint64_t comm = 0;
    if (c.InitComm(uid, 2, rank, &comm, 60000) != HZ_S_OK) return 5;
    if (rank == 1) {
      char x = 1;
      joined.Send(&x, 1);
      ready.Receive(&x, 1, 30000);  // stays connected, posts nothing
      std::this_thread::sleep_for(milliseconds(500));
      return 0;
    }
    GuestBuffer s, r;
    if (c.Register(4096, 1, HZ_REGION_F_READ, &s) || c.Register(4096, 1, HZ_REGION_F_WRITE, &r)) {
      return 10;
    }
    // In flight: a collective waiting for rank 1, a COMM_INIT waiting for a
    // second rank, and event buffers.
    hz_coll_args a = AllReduceArgs(comm, 0, s, r, 8);
    uint64_t op = c.Post(2, HZ_OP_ALLREDUCE, &a, sizeof(a));
    hz_comm_uid uid2;
    if (c.NewUid(&uid2) != HZ_S_OK) return 11;
    hz_comm_init_args ia{};
    ia.uid = uid2;
    ia.nranks = 2;
    ia.constraints.priority_class = HZ_PRIO_NORMAL;
    uint64_t init = c.Post(HZ_VQ_CONTROL, HZ_OP_COMM_INIT, &ia, sizeof(ia));
    uint64_t ev = c.PostRaw(HZ_VQ_EVENT, {}, sizeof(hz_event));
    // Rank 1 has its COMM_INIT answer: the stop cannot overtake it.
    char x;
    if (!joined.Receive(&x, 1, 30000)) return 15;
    kill(service, SIGTERM);
    Reply r1 = c.Wait(2, op, milliseconds(15000));
    Reply r2 = c.Wait(HZ_VQ_CONTROL, init, milliseconds(15000));
    Reply r3 = c.Wait(HZ_VQ_EVENT, ev, milliseconds(15000));
    ready.Send(&x, 1);
    if (r1.status != HZ_S_ESHUTDOWN) return 12;
    if (r2.status != HZ_S_ESHUTDOWN) return 13;
    if (r3.used != 0 || r3.status != 0xffffffff) return 14;  // returned unused
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  EXPECT_EQ(svc_.Wait(), 0) << "harmonaized exits 0 after draining";
}

// A VM that disconnects just as SIGTERM arrives must not make the drain wait
// for it: its connection closes before the drain posted to it runs.
TEST(ServiceShutdownTest, SigtermAsVmsDisconnectDoesNotWaitOutTheDrainTimeout) {
  constexpr int kVms = 6;
  for (int round = 0; round < 3; ++round) {
    ServiceProcess svc;
    const std::string cfg = svc.WriteConfig("[shutdown]\ntimeout_ms = 600000\n");
    ASSERT_TRUE(svc.Start({"--config", cfg}));
    auto vms = svc.TenantWithVms("t1", kVms);
    ASSERT_EQ(vms.size(), static_cast<size_t>(kVms));
    Pipe ready, go;
    const pid_t service = svc.pid();
    auto codes = RunRanks(kVms + 1, [&](int rank) {
      if (rank == kVms) {  // the operator
        char x;
        for (int i = 0; i < kVms; ++i) {
          if (!ready.Receive(&x, 1, 30000)) return 2;
        }
        for (int i = 0; i < kVms; ++i) go.Send(&x, 1);
        kill(service, SIGTERM);
        return 0;
      }
      HzClient c;
      if (!c.Connect(vms[rank]) || c.Hello() != HZ_S_OK) return 3;
      char x = 1;
      ready.Send(&x, 1);
      return go.Receive(&x, 1, 30000) ? 0 : 4;  // exiting closes the connection
    });
    EXPECT_EQ(codes, std::vector<int>(kVms + 1, 0));
    // Far below the 600 s drain timeout: only a drain that waits for a
    // vanished VM gets here.
    EXPECT_EQ(svc.Wait(60000), 0) << "round " << round;
  }
}

}  // namespace
}  // namespace hz::testing

namespace hz::testing {
namespace {

int RunDaemon(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<std::string> a = {HZ_HARMONAIZED_PATH};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ServiceCliTest, ConfigErrorsExitWithTwo) {
  char tmpl[] = "/tmp/hz-cfg-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::string bad = dir + "/bad.toml";
  FILE* f = fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("[device]\nmax_regions = \"many\"\n", f);
  fclose(f);
  EXPECT_EQ(RunDaemon({"--config", bad, "--state-dir", dir}), 2);
  EXPECT_EQ(RunDaemon({"--config", dir + "/missing.toml"}), 2);
  EXPECT_EQ(RunDaemon({"--metrics-port", "99999"}), 2);
  EXPECT_EQ(RunDaemon({"--no-such-flag"}), 2);
  EXPECT_EQ(RunDaemon({"--help"}), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hz::testing
