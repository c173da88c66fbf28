// Failure paths under concurrency: ranks on their own threads keep posting
// collectives and point-to-point messages while another thread aborts or
// destroys members at a random moment. Every callback must run exactly once,
// nothing may hang, and the engine must stay usable for other communicators.
#include <atomic>
#include <random>

#include "harness.h"

namespace hz::coll::testing {
namespace {

struct Counter {
  std::atomic<uint64_t> posted{0}, completed{0}, twice{0};
  std::atomic<uint64_t> by_status[kStatusCodeCount] = {};
};

Done Counted(Counter& c) {
  c.posted++;
  auto once = std::make_shared<std::atomic<bool>>(false);
  return [&c, once](Status s) {
    if (once->exchange(true)) c.twice++;
    c.by_status[static_cast<uint32_t>(s.code())]++;
    c.completed++;
  };
}

void WaitAll(Counter& c) {
  auto deadline = std::chrono::steady_clock::now() + kHang;
  while (c.completed.load() < c.posted.load()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "callbacks missing";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(CollectivesStress, AbortOrDestroyWhileRanksPost) {
  EngineOptions o;
  o.worker_threads = 3;
  o.block_bytes = 2048;
  o.inline_max_bytes = 4096;
  Engine e(o);
  Counter counter;
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint32_t p = 2 + round % 4;
    auto m = MakeComm(e, Tenant(1), p);
    std::vector<std::vector<float>> send(p, std::vector<float>(3000, 1.0f));
    std::vector<std::vector<float>> recv(p, std::vector<float>(3000));
    std::vector<std::vector<float>> p2p(p, std::vector<float>(300));
    std::atomic<bool> stop{false};
    std::vector<std::thread> ranks;
    for (uint32_t r = 0; r < p; ++r) {
      ranks.emplace_back([&, r] {
        std::mt19937 rng(round * 100 + r);
        uint64_t seq = 0;
        while (!stop.load()) {
          OpDesc d;
          if (rng() % 4 == 0) {
            // A ring of sends and receives alongside the collectives.
            d.op = (rng() & 1) ? Op::kSend : Op::kRecv;
            d.peer = d.op == Op::kSend ? (r + 1) % p : (r + p - 1) % p;
            d.count = 300;
            d.dtype = static_cast<uint8_t>(DType::kFp32);
            IoVec v = {IoSpan{reinterpret_cast<uint8_t*>(p2p[r].data()), 1200}};
            (d.op == Op::kSend ? d.send : d.recv) = v;
          } else {
            // Every rank derives the collective from the seq, so they agree.
            d.seq = seq++;
            d.op = d.seq % 3 == 0 ? Op::kBarrier : Op::kAllReduce;
            d.count = d.seq % 3 == 1 ? 3000 : 100;
            d.dtype = static_cast<uint8_t>(DType::kFp32);
            d.send = {IoSpan{reinterpret_cast<uint8_t*>(send[r].data()), 12000}};
            d.recv = {IoSpan{reinterpret_cast<uint8_t*>(recv[r].data()), 12000}};
          }
          e.Post(m[r], d, Counted(counter));
          if (rng() % 8 == 0) std::this_thread::yield();
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + round));
    // Half the rounds abort the communicator, half destroy a rank.
    if (round % 2 == 0) {
      e.Abort(m[round % p]);
    } else {
      e.Destroy(m[round % p]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    stop = true;
    for (auto& t : ranks) t.join();
    for (auto& mm : m) e.Destroy(mm);  // all buffers are safe to free after this
    WaitAll(counter);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(counter.twice.load(), 0u);
  EXPECT_EQ(counter.completed.load(), counter.posted.load());
  EXPECT_GT(counter.by_status[static_cast<uint32_t>(StatusCode::kAborted)].load(), 0u);
  EXPECT_GT(counter.by_status[static_cast<uint32_t>(StatusCode::kOk)].load(), 0u);
  // Only these outcomes are possible here.
  uint64_t expected = counter.by_status[0] + counter.by_status[9] +
                      counter.by_status[static_cast<uint32_t>(StatusCode::kLimit)];
  EXPECT_EQ(expected, counter.completed.load());
  EXPECT_TRUE(e.Communicators().empty());
  // The engine still works.
  auto m = MakeComm(e, Tenant(2), 3);
  std::vector<OpDesc> d(3);
  for (auto& x : d) x.op = Op::kBarrier;
  for (Status s : RunAll(e, m, d)) EXPECT_EQ(s.code(), StatusCode::kOk);
}

}  // namespace
}  // namespace hz::coll::testing
