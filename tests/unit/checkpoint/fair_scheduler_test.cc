// The fair scheduler, driven by a fake clock and byte counts, never wall time.
#include "fair_scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace hz::checkpoint {
namespace {

constexpr uint64_t kChunk = 4096;

// Runs the scheduler against backlogs (chunks per tenant) with the clock
// advancing to each retry time; returns bytes sent per tenant by `until_us`.
struct Sim {
  FairScheduler sched;
  std::map<TenantNo, uint64_t> backlog;  // chunks left
  std::map<TenantNo, uint64_t> sent;     // bytes
  std::vector<TenantNo> order;           // sequence of picks
  uint64_t now = 0;

  Sim(uint64_t bw, uint64_t quantum, uint64_t burst) : sched(bw, quantum, burst) {}

  std::vector<FairScheduler::Candidate> Ready() {
    std::vector<FairScheduler::Candidate> r;
    for (auto& [t, n] : backlog) {
      if (n > 0) r.push_back({t, kChunk});
    }
    return r;
  }
  // One pick; advances the clock when everyone is out of tokens.
  bool Step() {
    auto ready = Ready();
    if (ready.empty()) return false;
    uint64_t retry = 0;
    auto t = sched.Pick(now, ready, &retry);
    if (!t) {
      EXPECT_GT(retry, now);
      now = retry;
      return true;
    }
    backlog[*t]--;
    sent[*t] += kChunk;
    order.push_back(*t);
    return true;
  }
  void RunUntil(uint64_t until_us) {
    while (now < until_us && Step()) {
    }
  }
};

TEST(CheckpointFairScheduler, EqualWeightsShareEquallyWithoutBandwidthLimit) {
  Sim sim(0, kChunk, 0);
  sim.backlog = {{1, 1000}, {2, 1000}};
  for (int i = 0; i < 400; ++i) sim.Step();
  EXPECT_EQ(sim.sent[1], sim.sent[2]);
  // Strict alternation: neither tenant ever gets two turns in a row.
  for (size_t i = 1; i < sim.order.size(); ++i) EXPECT_NE(sim.order[i], sim.order[i - 1]);
}

TEST(CheckpointFairScheduler, BurstOfOneTenantDoesNotStarveALateArrival) {
  Sim sim(0, kChunk, 0);
  sim.backlog = {{1, 100000}};
  for (int i = 0; i < 500; ++i) sim.Step();
  EXPECT_EQ(sim.sent[1], 500 * kChunk);
  sim.backlog[2] = 10;
  size_t before = sim.order.size();
  for (int i = 0; i < 20; ++i) sim.Step();
  // Tenant 2's ten chunks go out within the next twenty picks, interleaved.
  EXPECT_EQ(sim.backlog[2], 0u);
  size_t first2 = before;
  while (sim.order[first2] != 2) ++first2;
  EXPECT_LE(first2 - before, 1u);
}

TEST(CheckpointFairScheduler, WeightsSplitBytesProportionally) {
  Sim sim(0, kChunk, 0);
  sim.sched.SetWeight(1, 2);
  sim.sched.SetWeight(2, 1);
  sim.backlog = {{1, 10000}, {2, 10000}};
  for (int i = 0; i < 3000; ++i) sim.Step();
  EXPECT_EQ(sim.sent[1], 2 * sim.sent[2]);
}

TEST(CheckpointFairScheduler, TokenBucketHoldsTheConfiguredBandwidth) {
  const uint64_t bw = 1000 * kChunk;  // 1000 chunks per second
  const uint64_t burst = 4 * kChunk;
  Sim sim(bw, kChunk, burst);
  sim.backlog = {{1, 1000000}, {2, 1000000}};
  sim.RunUntil(10'000'000);  // ten simulated seconds
  uint64_t total = sim.sent[1] + sim.sent[2];
  // Never more than bandwidth x time plus each tenant's burst and one chunk of overdraft.
  EXPECT_LE(total, bw * 10 + 2 * (burst + kChunk));
  EXPECT_GE(total, bw * 10 - 2 * kChunk);
  // And the two tenants got equal shares (within one chunk).
  uint64_t diff = sim.sent[1] > sim.sent[2] ? sim.sent[1] - sim.sent[2] : sim.sent[2] - sim.sent[1];
  EXPECT_LE(diff, kChunk);
}

TEST(CheckpointFairScheduler, LoneTenantGetsTheWholeBandwidth) {
  const uint64_t bw = 500 * kChunk;
  Sim sim(bw, kChunk, kChunk);
  sim.backlog = {{9, 1000000}};
  sim.RunUntil(4'000'000);
  EXPECT_GE(sim.sent[9], bw * 4 - kChunk);
  EXPECT_LE(sim.sent[9], bw * 4 + 2 * kChunk);
}

TEST(CheckpointFairScheduler, WeightedTokenShares) {
  const uint64_t bw = 600 * kChunk;
  Sim sim(bw, kChunk, kChunk);
  sim.sched.SetWeight(1, 1);
  sim.sched.SetWeight(2, 2);
  sim.backlog = {{1, 1000000}, {2, 1000000}};
  sim.RunUntil(6'000'000);
  // 1:2 of 600 chunks/s over 6 s = 1200 and 2400 chunks, within a few chunks.
  EXPECT_NEAR(static_cast<double>(sim.sent[1]) / kChunk, 1200.0, 4.0);
  EXPECT_NEAR(static_cast<double>(sim.sent[2]) / kChunk, 2400.0, 4.0);
}

TEST(CheckpointFairScheduler, UnequalChunkSizesStillShareBytes) {
  FairScheduler sched(0, 64 * 1024, 0);
  uint64_t sent[3] = {0, 0, 0};
  for (int i = 0; i < 10000; ++i) {
    // Tenant 1 writes 64 KiB chunks, tenant 2 writes 4 KiB chunks.
    std::vector<FairScheduler::Candidate> ready = {{1, 64 * 1024}, {2, 4096}};
    uint64_t retry = 0;
    auto t = sched.Pick(0, ready, &retry);
    ASSERT_TRUE(t.has_value());
    sent[*t] += *t == 1 ? 64 * 1024 : 4096;
  }
  double ratio = static_cast<double>(sent[1]) / static_cast<double>(sent[2]);
  EXPECT_NEAR(ratio, 1.0, 0.05);
}

}  // namespace
}  // namespace hz::checkpoint
