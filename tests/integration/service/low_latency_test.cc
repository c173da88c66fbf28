// A communicator created with HZ_COMM_F_LOW_LATENCY (SPEC §7.3.2) keeps its
// device's connection thread polling after each of its operations, within
// the tenant's window that the operator sets; an ordinary one does not, and
// the polling stops by itself once the communicator goes quiet. Seen through
// the connection threads' counters, on a service whose base polling window
// (connection_poll_us) is 0, so that every idle poll is the flag's, and
// through the kicks the ranks send: the service polls their rings instead.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

constexpr uint64_t kCount = 1024;  // fp32 per all-reduce
constexpr int kIterations = 50;

// Idle polls of every connection thread together.
uint64_t IdlePolls(ServiceProcess& svc) {
  nlohmann::json r = svc.Control({{"cmd", "counters"}});
  uint64_t polls = 0;
  for (const nlohmann::json& t : r["result"].value("connection_threads", nlohmann::json::array())) {
    polls += t.value("idle_polls", uint64_t{0});
  }
  return polls;
}

// The kicks one rank's request queue sent: during the all-reduces, and for
// one more all-reduce after a quiet spell (AllReduces' `quiet`).
struct RankKicks {
  uint64_t during = 0;
  uint64_t after_quiet = 0;
};

// Two ranks, one per VM socket, each on a thread: a communicator with
// `flags`, then kIterations verified all-reduces; with `kicks`, their kicks,
// and after `quiet` without operations one more all-reduce. The first
// status that is not HZ_S_OK (or a wrong sum as HZ_S_EIO), else HZ_S_OK.
uint32_t AllReduces(const std::vector<std::string>& vms, uint32_t flags,
                    std::array<RankKicks, 2>* kicks = nullptr,
                    std::chrono::milliseconds quiet = std::chrono::milliseconds(0),
                    std::chrono::nanoseconds spin = std::chrono::nanoseconds(0)) {
  std::promise<hz_comm_uid> uid_promise;
  std::shared_future<hz_comm_uid> uid = uid_promise.get_future().share();
  auto rank_body = [&](int rank) -> uint32_t {
    HzClient c;
    c.set_spin(spin);
    if (!c.Connect(vms[rank])) return HZ_S_EIO;
    if (uint32_t st = c.Hello(); st != HZ_S_OK) return st;
    if (rank == 0) {
      hz_comm_uid u{};
      uint32_t st = c.NewUid(&u);
      uid_promise.set_value(u);
      if (st != HZ_S_OK) return st;
    }
    uint64_t comm = 0;
    if (uint32_t st = c.InitComm(uid.get(), 2, rank, &comm, 0, flags); st != HZ_S_OK) return st;
    GuestBuffer send, recv;
    if (uint32_t st = c.Register(kCount * 4, 1, HZ_REGION_F_READ, &send); st != HZ_S_OK) return st;
    if (uint32_t st = c.Register(kCount * 4, 1, HZ_REGION_F_WRITE, &recv); st != HZ_S_OK) return st;
    std::vector<float> in(kCount, static_cast<float>(rank + 1)), out(kCount);
    send.Write(0, in.data(), kCount * 4);
    auto all_reduce = [&](int it) -> uint32_t {
      hz_coll_args a = AllReduceArgs(comm, static_cast<uint64_t>(it), send, recv, kCount);
      if (uint32_t st = c.Coll(HZ_VQ_REQUEST_BASE, HZ_OP_ALLREDUCE, a); st != HZ_S_OK) return st;
      recv.Read(0, out.data(), kCount * 4);
      for (float v : out) {
        if (v != 3.0f) return HZ_S_EIO;
      }
      return HZ_S_OK;
    };
    const uint64_t kicks_before = c.dev().kicks_sent(HZ_VQ_REQUEST_BASE);
    for (int it = 0; it < kIterations; ++it) {
      if (uint32_t st = all_reduce(it); st != HZ_S_OK) return st;
    }
    if (kicks == nullptr) return HZ_S_OK;
    const uint64_t kicks_during = c.dev().kicks_sent(HZ_VQ_REQUEST_BASE);
    (*kicks)[rank].during = kicks_during - kicks_before;
    std::this_thread::sleep_for(quiet);
    if (uint32_t st = all_reduce(kIterations); st != HZ_S_OK) return st;
    (*kicks)[rank].after_quiet = c.dev().kicks_sent(HZ_VQ_REQUEST_BASE) - kicks_during;
    return HZ_S_OK;
  };
  std::future<uint32_t> other = std::async(std::launch::async, rank_body, 1);
  const uint32_t first = rank_body(0);
  const uint32_t second = other.get();
  return first != HZ_S_OK ? first : second;
}

class ServiceLowLatencyTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(svc_.Start({"--connection-poll-us", "0"})); }
  ServiceProcess svc_;
};

TEST_F(ServiceLowLatencyTest, AnOrdinaryCommunicatorNeverKeepsTheServicePolling) {
  std::vector<std::string> vms = svc_.TenantWithVms("t", 2);
  ASSERT_EQ(vms.size(), 2u);
  EXPECT_EQ(AllReduces(vms, HZ_COMM_F_DETERMINISTIC), HZ_S_OK);
  EXPECT_EQ(IdlePolls(svc_), 0u);
}

TEST_F(ServiceLowLatencyTest, ALowLatencyCommunicatorKeepsItPollingUntilItGoesQuiet) {
  std::vector<std::string> vms = svc_.TenantWithVms("t", 2);
  ASSERT_EQ(vms.size(), 2u);
  EXPECT_EQ(AllReduces(vms, HZ_COMM_F_DETERMINISTIC | HZ_COMM_F_LOW_LATENCY), HZ_S_OK);
  EXPECT_GT(IdlePolls(svc_), 0u);
  // Quiet now: once the window after the last operation has passed (far
  // less than this), no thread polls any more.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const uint64_t polls = IdlePolls(svc_);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(IdlePolls(svc_), polls);
}

// Between a low-latency communicator's operations the service polls the
// request ring of each rank that polls for its completions, so such a rank
// posts without a kick (a system call for it, three for the service); an
// ordinary communicator's rank, or one that sleeps until its completion is
// signalled, kicks for every operation. Once the ring has been quiet for the
// window, the service asks for kicks again, and the next operation kicks and
// completes.
TEST_F(ServiceLowLatencyTest, ALowLatencyCommunicatorsPollingRanksPostWithoutKicksWhileItIsBusy) {
  // A window far longer than any gap between one rank's operations, even
  // under sanitizers, and far shorter than the quiet spell; the ranks spin
  // for their completions that long too.
  constexpr int kWindowUs = 50000;
  constexpr auto kSpin = std::chrono::microseconds(kWindowUs);
  constexpr auto kQuiet = std::chrono::milliseconds(250);
  nlohmann::json r =
      svc_.Control({{"cmd", "tenant.create"}, {"name", "t"}, {"latency_poll_us", kWindowUs}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  std::vector<std::string> vms = svc_.TenantWithVms("t", 2);
  ASSERT_EQ(vms.size(), 2u);
  std::array<RankKicks, 2> ordinary, sleeping, low_latency;
  const uint32_t low = HZ_COMM_F_DETERMINISTIC | HZ_COMM_F_LOW_LATENCY;
  ASSERT_EQ(AllReduces(vms, HZ_COMM_F_DETERMINISTIC, &ordinary, {}, kSpin), HZ_S_OK);
  ASSERT_EQ(AllReduces(vms, low, &sleeping), HZ_S_OK);
  ASSERT_EQ(AllReduces(vms, low, &low_latency, kQuiet, kSpin), HZ_S_OK);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(ordinary[rank].during, static_cast<uint64_t>(kIterations));
    EXPECT_EQ(sleeping[rank].during, static_cast<uint64_t>(kIterations));
    // The first operation finds the ring not yet polled. A later one kicks
    // only where a rank (or the service) was kept off its CPU longer than
    // the window, which ends the polling as designed: on a busy host that
    // happens, rarely. Nine posts in ten go without a kick.
    EXPECT_LE(low_latency[rank].during, static_cast<uint64_t>(kIterations / 10));
    EXPECT_EQ(low_latency[rank].after_quiet, 1u);
  }
}

TEST_F(ServiceLowLatencyTest, TheOperatorsWindowForTheTenantBoundsIt) {
  nlohmann::json r =
      svc_.Control({{"cmd", "tenant.create"}, {"name", "t"}, {"latency_poll_us", 0}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  r = svc_.Control({{"cmd", "tenant.list"}});
  ASSERT_EQ(r["result"][0].value("latency_poll_us", -1), 0) << r.dump();
  std::vector<std::string> vms = svc_.TenantWithVms("t", 2);  // binds to the tenant above
  ASSERT_EQ(vms.size(), 2u);
  // The flag is accepted and has no effect.
  EXPECT_EQ(AllReduces(vms, HZ_COMM_F_DETERMINISTIC | HZ_COMM_F_LOW_LATENCY), HZ_S_OK);
  EXPECT_EQ(IdlePolls(svc_), 0u);
  {
    // And the device says so: a window of 0, reported (SPEC §5.2), so that a
    // rank's waits do not spin for a device that will not poll.
    HzClient c;
    ASSERT_TRUE(c.Connect(vms[0]));
    EXPECT_TRUE(c.config().status & HZ_CFG_S_LATENCY_WINDOW);
    EXPECT_EQ(c.config().latency_poll_us, 0u);
  }
  // Beyond the longest window any key may set.
  r = svc_.Control({{"cmd", "tenant.create"}, {"name", "u"}, {"latency_poll_us", 100001}});
  EXPECT_FALSE(r.value("ok", true)) << r.dump();
  // Kept across a restart, with the tenant.
  ASSERT_EQ(svc_.Terminate(), 0);
  ASSERT_TRUE(svc_.Start({"--connection-poll-us", "0"}));
  r = svc_.Control({{"cmd", "tenant.list"}});
  ASSERT_EQ(r["result"].size(), 1u) << r.dump();
  EXPECT_EQ(r["result"][0].value("latency_poll_us", -1), 0) << r.dump();
}

TEST_F(ServiceLowLatencyTest, AnUndefinedCommunicatorFlagIsNotSupported) {
  std::vector<std::string> vms = svc_.TenantWithVms("t", 2);
  ASSERT_EQ(vms.size(), 2u);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  hz_comm_uid uid{};
  ASSERT_EQ(c.NewUid(&uid), HZ_S_OK);
  uint64_t comm = 0;
  EXPECT_EQ(c.InitComm(uid, 1, 0, &comm, 0, HZ_COMM_F_LOW_LATENCY << 1), HZ_S_ENOTSUP);
}

}  // namespace
}  // namespace hz::testing
