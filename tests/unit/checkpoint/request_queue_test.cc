// The request threads' queue: pushed from many threads at once (as the
// connection threads do, without a lock), every piece runs once, each
// tenant's in the order pushed, within the tenant's share of the threads.
#include "request_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hz::checkpoint {
namespace {

// The queue and its serving threads, stopped and joined at the end.
class Served {
 public:
  Served(unsigned per_tenant, int threads) : queue_(per_tenant) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { queue_.Serve(); });
  }
  ~Served() { Stop(); }
  void Stop() {
    queue_.Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  RequestQueue& queue() { return queue_; }

 private:
  RequestQueue queue_;
  std::vector<std::thread> threads_;
};

TEST(RequestQueueTest, EveryPieceRunsOnceInItsTenantsOrder) {
  constexpr int kPushers = 4, kTenants = 3, kPieces = 2000;
  std::mutex mu;
  std::map<std::pair<int, int>, std::vector<int>> ran;  // (pusher, tenant): pieces
  {
    // One thread per tenant at a time, so a tenant's pieces start, and are
    // recorded, in the order they were taken.
    Served s(/*per_tenant=*/1, /*threads=*/3);
    std::vector<std::thread> pushers;
    for (int p = 0; p < kPushers; ++p) {
      pushers.emplace_back([&, p] {
        for (int i = 0; i < kPieces; ++i) {
          const int tenant = i % kTenants;
          s.queue().Push(TenantId("t" + std::to_string(tenant)), [&, p, tenant, i] {
            std::lock_guard<std::mutex> l(mu);
            ran[{p, tenant}].push_back(i);
          });
        }
      });
    }
    for (auto& t : pushers) t.join();
  }  // Stop runs what is queued, then the threads return
  size_t total = 0;
  for (const auto& [key, pieces] : ran) {
    EXPECT_TRUE(std::is_sorted(pieces.begin(), pieces.end())) << key.first << "/" << key.second;
    EXPECT_EQ(std::adjacent_find(pieces.begin(), pieces.end()), pieces.end());
    total += pieces.size();
  }
  EXPECT_EQ(total, static_cast<size_t>(kPushers * kPieces));
}

TEST(RequestQueueTest, ATenantRunsAtMostItsShareAndOthersGetTheRest) {
  constexpr unsigned kShare = 2;
  std::atomic<int> running{0}, most{0}, other_ran{0};
  std::atomic<bool> release{false};
  {
    Served s(kShare, /*threads=*/4);
    // Tenant a's pieces wait until released; they may hold two threads.
    for (int i = 0; i < 8; ++i) {
      s.queue().Push(TenantId("a"), [&] {
        int now = ++running;
        for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
        }
        while (!release) std::this_thread::yield();
        --running;
      });
    }
    while (running < static_cast<int>(kShare)) std::this_thread::yield();
    // Tenant b's pieces run meanwhile on the threads left.
    for (int i = 0; i < 5; ++i) s.queue().Push(TenantId("b"), [&] { ++other_ran; });
    while (other_ran < 5) std::this_thread::yield();
    release = true;
  }
  EXPECT_EQ(most.load(), static_cast<int>(kShare));
  EXPECT_EQ(running.load(), 0);
}

// A piece may push more work (a save that continues as another piece).
TEST(RequestQueueTest, WorkPushedByRunningWorkIsServed) {
  std::atomic<int> depth{0};
  Served s(/*per_tenant=*/1, /*threads=*/2);
  std::function<void()> step = [&] {
    if (++depth < 100) s.queue().Push(TenantId("a"), step);
  };
  s.queue().Push(TenantId("a"), step);
  s.Stop();
  EXPECT_EQ(depth.load(), 100);
}

}  // namespace
}  // namespace hz::checkpoint
