// Sessions sharing one connection thread through a TurnScheduler: each
// test runs several Sessions on a fake thread (one FIFO of posted handlers)
// with a device whose every request advances a fake clock, so the time each
// session is served is exact and the tests need no wall clock.
#include "vdev/turn_scheduler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "session_util.h"
#include "test_util.h"
#include "vdev/session.h"

namespace vdev {
namespace {

using namespace vdev::testing;  // NOLINT

constexpr uint16_t kRequests = 4;  // always on each ring: heads 0, 2, 4, 6
constexpr uint32_t kChainsPerTurn = 4;
constexpr uint64_t kRing = kGpaBase;  // desc; avail +0x1000; used +0x2000
constexpr uint64_t kRequestBuf = kGpaBase + 0x10000;

// One connection thread: the handlers every session posted, run in order.
struct FakeThread {
  std::deque<std::function<void()>> handlers;
  int64_t now_ns = 0;  // the scheduler's clock
  // Whose turn each request served belonged to, in order.
  std::vector<int> served;

  bool RunOne() {
    if (handlers.empty()) return false;
    std::function<void()> fn = std::move(handlers.front());
    handlers.pop_front();
    fn();
    return true;
  }
  // Runs handlers until `requests` more were served (or nothing is left).
  void Serve(size_t requests) {
    const size_t until = served.size() + requests;
    while (served.size() < until && RunOne()) {
    }
  }
};

// A session's host on the fake thread; a closed connection drops what was
// posted for it, as vdev's Connection does.
class ThreadHost : public SessionHost {
 public:
  explicit ThreadHost(FakeThread* thread) : thread_(thread) {}
  void Post(std::function<void()> fn) override {
    thread_->handlers.push_back([this, fn = std::move(fn)] {
      if (!closed) fn();
    });
  }
  void WatchKick(uint16_t, int) override {}
  void UnwatchKick(uint16_t) override {}
  void SetPolling(bool) override {}
  bool closed = false;

 private:
  FakeThread* thread_;
};

// Serves every request in cost_ns of the thread's clock and puts it back on
// the ring at once: a guest that always has requests waiting.
class CostlyDevice : public Device {
 public:
  CostlyDevice(int id, int64_t cost_ns, FakeThread* thread, RingDriver* ring)
      : id_(id), cost_ns_(cost_ns), thread_(thread), ring_(ring) {}
  uint64_t Features() const override { return 0; }
  uint16_t NumQueues() const override { return 1; }
  std::vector<uint8_t> ConfigSpace() const override { return {}; }
  bool SetConfig(uint32_t, std::span<const uint8_t>) override { return false; }
  void OnConnect(DeviceContext&) override {}
  void OnKick(Queue& q) override {
    Chain c;
    while (q.Pop(&c)) {
      thread_->now_ns += cost_ns_;
      thread_->served.push_back(id_);
      q.Complete(c, 0);
      ring_->Publish(c.head());
    }
    q.Flush();
  }

 private:
  const int id_;
  const int64_t cost_ns_;
  FakeThread* const thread_;
  RingDriver* const ring_;
};

// One VM: guest memory with one ring of kRequests requests, and its session.
struct Vm {
  Vm(int id, int64_t cost_ns, FakeThread* thread, SessionOptions options)
      : host(thread), ring(&guest, kRingSize, kRing, kRing + 0x1000, kRing + 0x2000) {
    options.queue_limits.max_chains_per_turn = kChainsPerTurn;
    session = std::make_unique<Session>(std::make_unique<CostlyDevice>(id, cost_ns, thread, &ring),
                                        &host, std::move(options), "vm" + std::to_string(id));
    session->Start();
    call = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    BringUp();
  }
  ~Vm() {
    session.reset();
    close(call);
  }

  void Send(Message m) {
    Session::Result r = session->Handle(std::move(m));
    ASSERT_FALSE(r.close);
  }
  void BringUp() {
    Send(Msg(vu::kSetFeatures, vu::kFVersion1));
    Send(Msg0(vu::kSetOwner));
    uint8_t table[8 + sizeof(vu::MemRegion)] = {};
    uint32_t n = 1;
    vu::MemRegion r{kGpaBase, guest.ram.size(), kGpaBase + kUvaDelta, 0};
    std::memcpy(table, &n, 4);
    std::memcpy(table + 8, &r, sizeof(r));
    Send(WithFd(Msg(vu::kSetMemTable, table), dup(guest.ram.fd())));
    Send(Msg(vu::kSetVringNum, vu::VringState{0, kRingSize}));
    Send(Msg(vu::kSetVringBase, vu::VringState{0, 0}));
    Send(Msg(vu::kSetVringAddr,
             vu::VringAddr{0, 0, ring.desc_uva(), ring.used_uva(), ring.avail_uva(), 0}));
    Send(WithFd(Msg(vu::kSetVringCall, uint64_t{0}), dup(call)));
    Send(WithFd(Msg(vu::kSetVringKick, uint64_t{0}), eventfd(0, EFD_CLOEXEC)));
    ASSERT_TRUE(session->queue_running(0));
  }
  // The guest makes its requests available and kicks.
  void Kick() {
    for (uint16_t i = 0; i < kRequests; ++i) {
      const uint16_t head = static_cast<uint16_t>(2 * i);
      ring.SetDesc(head, kRequestBuf + 0x100ull * i, 16, N, head + 1);
      ring.SetDesc(head + 1, kRequestBuf + 0x100ull * i + 0x80, 16, W, 0);
      ring.Publish(head);
    }
    session->Kick(0);
  }
  // The connection closes: posted handlers are dropped, the session ends.
  void Disconnect() {
    host.closed = true;
    session->Disconnect();
  }

  SimpleGuest guest;
  ThreadHost host;
  RingDriver ring;
  std::unique_ptr<Session> session;
  int call = -1;
};

SessionOptions Shared(const std::shared_ptr<TurnScheduler>& scheduler, std::string key,
                      uint32_t weight) {
  SessionOptions o;
  o.turn_scheduler = scheduler;
  o.share_key = std::move(key);
  o.share_weight = weight;
  return o;
}

class VdevTurnSchedulerTest : public ::testing::Test {
 protected:
  std::shared_ptr<TurnScheduler> Scheduler() {
    return std::make_shared<TurnScheduler>([this] { return thread_.now_ns; });
  }
  // Requests served per VM id among the latest `window` served.
  std::vector<int> CountLast(size_t window, int vms) const {
    std::vector<int> counts(vms, 0);
    for (size_t i = thread_.served.size() - window; i < thread_.served.size(); ++i) {
      counts[thread_.served[i]]++;
    }
    return counts;
  }

  // Requests served for VM id so far.
  int64_t Served(int id) const {
    return std::count(thread_.served.begin(), thread_.served.end(), id);
  }

  FakeThread thread_;
};

TEST_F(VdevTurnSchedulerTest, AloneASessionRunsItsTurnAtOnce) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "a", 1));
  a.Kick();
  // The kick served a turn in place, as without a scheduler; the rest of
  // the backlog waits for a posted turn.
  EXPECT_EQ(thread_.served.size(), kChainsPerTurn);
  EXPECT_EQ(thread_.handlers.size(), 1u);
  thread_.Serve(4 * kChainsPerTurn);
  EXPECT_EQ(thread_.served.size(), 5 * kChainsPerTurn);
}

TEST_F(VdevTurnSchedulerTest, AKickOfASessionThatWasIdleRunsAtOnce) {
  auto sched = Scheduler();
  Vm a(0, 3000, &thread_, Shared(sched, "a", 1));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  a.Kick();
  thread_.Serve(100);  // a keeps the thread busy; its next turn is posted
  ASSERT_FALSE(thread_.handlers.empty());
  // b's kick is served in its own handler, ahead of a's posted turn: no
  // added latency over taking turns in order.
  const size_t before = thread_.served.size();
  b.Kick();
  ASSERT_EQ(thread_.served.size(), before + kChainsPerTurn);
  EXPECT_EQ(std::count(thread_.served.end() - kChainsPerTurn, thread_.served.end(), 1),
            static_cast<int>(kChainsPerTurn));
}

TEST_F(VdevTurnSchedulerTest, WeightsShareTheThreadsTime) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "a", 2));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  a.Kick();
  b.Kick();
  thread_.Serve(3000);
  std::vector<int> n = CountLast(3000, 2);
  // Equal costs: requests in proportion to time, 2000 : 1000.
  EXPECT_NEAR(n[0], 2000, 2 * kChainsPerTurn) << n[0] << " : " << n[1];
  EXPECT_NEAR(n[1], 1000, 2 * kChainsPerTurn) << n[0] << " : " << n[1];
}

TEST_F(VdevTurnSchedulerTest, EqualWeightsShareTimeNotTurns) {
  auto sched = Scheduler();
  // a's requests cost three times b's: with equal turns a would get three
  // quarters of the thread.
  Vm a(0, 3000, &thread_, Shared(sched, "a", 1));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  a.Kick();
  b.Kick();
  thread_.Serve(4000);
  std::vector<int> n = CountLast(4000, 2);
  // Equal time: a serves a third as many requests, 1000 : 3000.
  EXPECT_NEAR(n[0], 1000, 2 * kChainsPerTurn) << n[0] << " : " << n[1];
  EXPECT_NEAR(n[1], 3000, 2 * kChainsPerTurn) << n[0] << " : " << n[1];
}

TEST_F(VdevTurnSchedulerTest, SessionsWithOneShareKeyShareOneShare) {
  auto sched = Scheduler();
  // Tenant x's two VMs together get as much as tenant y's one.
  Vm x1(0, 1000, &thread_, Shared(sched, "x", 1));
  Vm x2(1, 1000, &thread_, Shared(sched, "x", 1));
  Vm y(2, 1000, &thread_, Shared(sched, "y", 1));
  x1.Kick();
  x2.Kick();
  y.Kick();
  thread_.Serve(3000);
  std::vector<int> n = CountLast(3000, 3);
  EXPECT_NEAR(n[0] + n[1], 1500, 2 * kChainsPerTurn);
  EXPECT_NEAR(n[0], n[1], 2 * kChainsPerTurn);
  EXPECT_NEAR(n[2], 1500, 2 * kChainsPerTurn);
}

TEST_F(VdevTurnSchedulerTest, ASessionThatWakesUpGetsNoBurst) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "a", 1));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  Vm c(2, 1000, &thread_, Shared(sched, "c", 1));
  a.Kick();
  b.Kick();
  thread_.Serve(2000);  // c idle meanwhile
  c.Kick();
  // c's kick waits for the turn in progress, then c has its turn, and then
  // the three alternate: c never serves a second turn before a and b have
  // each had one since it woke.
  const size_t woke = thread_.served.size();
  thread_.Serve(6 * kChainsPerTurn);
  std::vector<int> first(thread_.served.begin() + woke,
                         thread_.served.begin() + woke + 3 * kChainsPerTurn);
  EXPECT_EQ(std::count(first.begin(), first.end(), 2), static_cast<int>(kChainsPerTurn));
  thread_.Serve(3000);
  std::vector<int> n = CountLast(3000, 3);
  EXPECT_NEAR(n[2], 1000, 2 * kChainsPerTurn);
}

TEST_F(VdevTurnSchedulerTest, ATurnGrantedToAClosedConnectionPassesOn) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "a", 1));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  a.Kick();  // a runs a turn; its next one is posted
  b.Kick();  // b waits behind it
  a.Disconnect();
  // a's posted turn is dropped with its connection; b is not left waiting.
  const size_t before = thread_.served.size();
  thread_.Serve(10 * kChainsPerTurn);
  EXPECT_EQ(thread_.served.size(), before + 10 * kChainsPerTurn);
  EXPECT_EQ(std::count(thread_.served.begin() + before, thread_.served.end(), 0), 0);
}

TEST_F(VdevTurnSchedulerTest, WithoutASchedulerTurnsAlternate) {
  // Today's behaviour, kept for servers that give no scheduler: turns in
  // the order they were posted, whatever they cost.
  Vm a(0, 3000, &thread_, SessionOptions{});
  Vm b(1, 1000, &thread_, SessionOptions{});
  a.Kick();
  b.Kick();
  thread_.Serve(4000);
  std::vector<int> n = CountLast(4000, 2);
  EXPECT_NEAR(n[0], n[1], 2 * kChainsPerTurn);
}

TEST_F(VdevTurnSchedulerTest, ChargesAreEachShareKeysMeasuredTimeAndTurns) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "a", 2));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  a.Kick();
  b.Kick();
  thread_.Serve(3000);
  std::map<std::string, TurnScheduler::Charge> c = sched->Charges();
  ASSERT_EQ(c.size(), 2u);
  // The fake clock moves only while requests are served: each key was
  // charged exactly its requests' time, not divided by its weight, in turns
  // of kChainsPerTurn requests.
  EXPECT_EQ(c["a"].nanoseconds, static_cast<uint64_t>(Served(0) * 1000));
  EXPECT_EQ(c["b"].nanoseconds, static_cast<uint64_t>(Served(1) * 1000));
  EXPECT_EQ(c["a"].turns, static_cast<uint64_t>(Served(0) / kChainsPerTurn));
  EXPECT_EQ(c["b"].turns, static_cast<uint64_t>(Served(1) / kChainsPerTurn));
  // Under contention the charges follow the weights, 2 : 1.
  EXPECT_NEAR(static_cast<double>(c["a"].nanoseconds) / static_cast<double>(c["b"].nanoseconds),
              2.0, 0.05);
}

TEST_F(VdevTurnSchedulerTest, SessionsWithOneShareKeyAreChargedTogether) {
  auto sched = Scheduler();
  Vm x1(0, 1000, &thread_, Shared(sched, "x", 1));
  Vm x2(1, 3000, &thread_, Shared(sched, "x", 1));
  x1.Kick();
  x2.Kick();
  thread_.Serve(400);
  std::map<std::string, TurnScheduler::Charge> c = sched->Charges();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c["x"].nanoseconds, static_cast<uint64_t>(Served(0) * 1000 + Served(1) * 3000));
  EXPECT_EQ(c["x"].turns, static_cast<uint64_t>((Served(0) + Served(1)) / kChainsPerTurn));
}

TEST_F(VdevTurnSchedulerTest, ChargesOutliveTheSessionsAndGoOnWithTheNextOne) {
  auto sched = Scheduler();
  uint64_t before = 0;
  {
    Vm a(0, 1000, &thread_, Shared(sched, "a", 1));
    a.Kick();
    thread_.Serve(40);
    before = sched->Charges()["a"].nanoseconds;
    ASSERT_EQ(before, static_cast<uint64_t>(Served(0) * 1000));
    a.Disconnect();
    while (thread_.RunOne()) {  // what was posted for a, dropped
    }
  }
  // The key's sessions all left: its charge stays (a counter never goes back).
  EXPECT_EQ(sched->Charges()["a"].nanoseconds, before);
  Vm again(1, 1000, &thread_, Shared(sched, "a", 1));
  again.Kick();
  thread_.Serve(40);
  EXPECT_EQ(sched->Charges()["a"].nanoseconds, before + Served(1) * 1000);
}

TEST_F(VdevTurnSchedulerTest, SessionsWithoutAShareKeyAreNotInTheCharges) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "", 1));
  a.Kick();
  thread_.Serve(40);
  EXPECT_TRUE(sched->Charges().empty());
}

TEST_F(VdevTurnSchedulerTest, ChargesAreReadOnAnotherThreadWhileTurnsRun) {
  auto sched = Scheduler();
  Vm a(0, 1000, &thread_, Shared(sched, "a", 1));
  Vm b(1, 1000, &thread_, Shared(sched, "b", 1));
  std::atomic<bool> done{false};
  bool grew_only = true;
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      const auto c = sched->Charges();
      const auto it = c.find("a");
      const uint64_t now = it == c.end() ? 0 : it->second.nanoseconds;
      grew_only = grew_only && now >= last;
      last = now;
    }
  });
  a.Kick();
  b.Kick();
  thread_.Serve(20000);
  done = true;
  reader.join();
  EXPECT_TRUE(grew_only);
  EXPECT_EQ(sched->Charges()["a"].nanoseconds, static_cast<uint64_t>(Served(0) * 1000));
}

}  // namespace
}  // namespace vdev
