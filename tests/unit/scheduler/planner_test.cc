// The privacy-utility measurement: a tensor-parallel planner with full
// topology, with the coarse summary, and with nothing.
#include "hz/scheduler/planner.h"

#include <gtest/gtest.h>

#include <random>

#include "hz/scheduler/allocator.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using testing::LoadFixture;

TEST(SchedulerPlanner, BestPlanIsExhaustive) {
  // 4 GPUs, pairs (0,3) and (1,2) fast: the best plan pairs them.
  PairBandwidth bw = [](int a, int b) {
    if ((a == 0 && b == 3) || (a == 1 && b == 2)) return 100.0;
    return 10.0;
  };
  Partition best = BestPlan(4, 2, bw);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0], (std::vector<int>{0, 3}));
  EXPECT_EQ(best[1], (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(PlanCost(best, bw), 2.0 * 1 / 2 / 100.0);
  EXPECT_TRUE(BestPlan(5, 2, bw).empty());
  std::mt19937_64 rng(1);
  Partition r = RandomPlan(8, 4, rng);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].size(), 4u);
}

// Fragmented allocations of 8 GPUs on a 4-host cluster, planned three ways.
TEST(SchedulerPlanner, CoarseSummaryKeepsDecisionQuality) {
  std::vector<HostInventory> hosts;
  for (int i = 0; i < 4; ++i) {
    hosts.push_back(LoadFixture("hgx8"));
    hosts.back().name = "h" + std::to_string(i);
  }
  Cluster c(std::move(hosts));
  std::mt19937_64 rng(7);
  double full = 0, coarse = 0, blind = 0;
  int trials = 0;
  for (int trial = 0; trial < 40; ++trial) {
    // Fragment the cluster with random small allocations, then take 8 GPUs.
    Allocator alloc(&c, trial % 2 ? Policy::kFirstFit : Policy::kTopologyAware);
    for (int k = 0; k < 12; ++k) {
      Allocation a;
      alloc.Allocate("bg", {static_cast<uint32_t>(1 + rng() % 3), 0, HZ_LOC_ANY}, &a);
    }
    std::vector<DeviceRef> gpus;
    if (!alloc.Place({8, 0, HZ_LOC_ANY}, &gpus)) continue;
    TopologySummary s = BuildTopologySummary(c, gpus, rng());
    for (int k : {2, 4}) {
      PlanQuality q = EvaluatePlans(c, s, k, rng);
      ASSERT_GT(q.best_cost, 0);
      ASSERT_LE(q.best_cost, q.coarse_cost + 1e-12);
      ASSERT_LE(q.best_cost, q.random_cost + 1e-12);
      full += q.best_cost / q.full_cost;
      coarse += q.best_cost / q.coarse_cost;
      blind += q.best_cost / q.random_cost;
      ++trials;
    }
  }
  ASSERT_GT(trials, 40);
  full /= trials;
  coarse /= trials;
  blind /= trials;
  EXPECT_DOUBLE_EQ(full, 1.0);
  EXPECT_GE(coarse, blind);
  // The measured goal: the coarse summary keeps 95% of full information's
  // decision quality.
  EXPECT_GE(coarse, 0.95) << "coarse " << coarse << " random " << blind;
}

}  // namespace
}  // namespace hz::scheduler
