#include "hz/scheduler/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace hz::scheduler {

double PlanCost(const Partition& plan, const PairBandwidth& bw) {
  double worst = 0;
  for (const auto& group : plan) {
    if (group.size() < 2) continue;
    double slowest = std::numeric_limits<double>::infinity();
    for (size_t a = 0; a < group.size(); ++a) {
      for (size_t b = a + 1; b < group.size(); ++b)
        slowest = std::min(slowest, bw(group[a], group[b]));
    }
    const double k = static_cast<double>(group.size());
    worst = std::max(worst, 2.0 * (k - 1) / k / slowest);
  }
  return worst;
}

namespace {

void Search(std::vector<int>& rest, int k, Partition& current, const PairBandwidth& bw,
            Partition* best, double* best_cost) {
  if (rest.empty()) {
    double c = PlanCost(current, bw);
    if (c < *best_cost) {
      *best_cost = c;
      *best = current;
    }
    return;
  }
  // The lowest remaining GPU anchors the next group: each partition once.
  const int first = rest.front();
  std::vector<int> others(rest.begin() + 1, rest.end());
  std::vector<bool> pick(others.size(), false);
  std::fill(pick.begin(), pick.begin() + (k - 1), true);
  do {
    std::vector<int> group{first}, left;
    for (size_t i = 0; i < others.size(); ++i) (pick[i] ? group : left).push_back(others[i]);
    current.push_back(group);
    Search(left, k, current, bw, best, best_cost);
    current.pop_back();
  } while (std::prev_permutation(pick.begin(), pick.end()));
}

}  // namespace

Partition BestPlan(int n, int k, const PairBandwidth& bw) {
  Partition best, current;
  if (k <= 0 || n <= 0 || n % k != 0 || n > 16) return best;
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  double cost = std::numeric_limits<double>::infinity();
  Search(all, k, current, bw, &best, &cost);
  return best;
}

Partition RandomPlan(int n, int k, std::mt19937_64& rng) {
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  Partition plan;
  for (int i = 0; i + k <= n; i += k) plan.emplace_back(all.begin() + i, all.begin() + i + k);
  return plan;
}

double NominalGBs(uint8_t bw_class) {
  switch (bw_class) {
    case HZ_BW_ULTRA:
      return 450;
    case HZ_BW_HIGH:
      return 50;
    case HZ_BW_MEDIUM:
      return 30;
    case HZ_BW_LOW:
      return 12;
    default:
      return 1;
  }
}

PairBandwidth SummaryBandwidth(const SummaryView& view, const std::vector<int>& gpu_indices) {
  return [view, gpu_indices](int a, int b) {
    const hz_topo_device& da = view.devices[gpu_indices[a]];
    const hz_topo_device& db = view.devices[gpu_indices[b]];
    if (da.group == db.group) return NominalGBs(view.groups[da.group].intra_bw);
    if (view.groups[da.group].host == view.groups[db.group].host) {
      return NominalGBs(view.header.cross_group_bw);
    }
    return NominalGBs(view.header.cross_host_bw);
  };
}

PlanQuality EvaluatePlans(const Cluster& cluster, const TopologySummary& summary, int k,
                          std::mt19937_64& rng) {
  PlanQuality q;
  SummaryView view;
  if (!ParseTopologySummary(summary.bytes, &view).ok()) return q;
  std::vector<int> gpus;  // tenant-visible indices of the GPUs
  for (const hz_topo_device& d : view.devices) {
    if (d.kind == HZ_DEV_GPU) gpus.push_back(d.index);
  }
  const int n = static_cast<int>(gpus.size());
  PairBandwidth truth = [&](int a, int b) {
    return cluster.TrueBandwidthGBs(summary.devices[gpus[a]], summary.devices[gpus[b]]);
  };
  Partition full = BestPlan(n, k, truth);
  Partition coarse = BestPlan(n, k, SummaryBandwidth(view, gpus));
  Partition blind = RandomPlan(n, k, rng);
  q.best_cost = PlanCost(full, truth);
  q.full_cost = q.best_cost;
  q.coarse_cost = PlanCost(coarse, truth);
  q.random_cost = PlanCost(blind, truth);
  return q;
}

}  // namespace hz::scheduler
