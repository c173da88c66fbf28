// A tenant-side planner used to measure how much decision quality the coarse
// topology summary keeps: it splits n GPUs into tensor-parallel groups of k
// and predicts the all-reduce cost of each plan from pairwise bandwidths.
//
// A ring all-reduce of M bytes over k GPUs moves 2(k-1)/k * M per GPU and
// runs at the slowest link of the ring; groups run concurrently, so a plan
// costs as much as its slowest group.
#ifndef HZ_SCHEDULER_PLANNER_H_
#define HZ_SCHEDULER_PLANNER_H_

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "hz/scheduler/cluster.h"
#include "hz/scheduler/topology_summary.h"

namespace hz::scheduler {

using Partition = std::vector<std::vector<int>>;
// Bandwidth between two GPUs (positions 0..n-1) in GB/s.
using PairBandwidth = std::function<double(int, int)>;

// Seconds per GB all-reduced by the plan's slowest group.
double PlanCost(const Partition& plan, const PairBandwidth& bw);

// The cheapest partition of 0..n-1 into groups of k (n % k == 0, n <= 16),
// by exhaustive search; ties keep the first found.
Partition BestPlan(int n, int k, const PairBandwidth& bw);

// A uniformly random partition into groups of k.
Partition RandomPlan(int n, int k, std::mt19937_64& rng);

// What a tenant believes about the bandwidth between two of its devices
// (tenant-visible indices) from the summary alone: the group's intra class,
// the cross-group class on one host, the cross-host class, each mapped to a
// nominal GB/s.
double NominalGBs(uint8_t bw_class);
PairBandwidth SummaryBandwidth(const SummaryView& view, const std::vector<int>& gpu_indices);

struct PlanQuality {
  double best_cost = 0;    // the optimum under the true topology
  double full_cost = 0;    // plan chosen with full information
  double coarse_cost = 0;  // plan chosen from the coarse summary
  double random_cost = 0;  // plan chosen blindly
};

// Plans the allocation's GPUs three ways and prices each plan under the true
// topology (Cluster::TrueBandwidthGBs). The GPUs are those of `summary`.
PlanQuality EvaluatePlans(const Cluster& cluster, const TopologySummary& summary, int k,
                          std::mt19937_64& rng);

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_PLANNER_H_
