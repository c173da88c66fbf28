// Scheduler benchmark. Every result is a ratio against a reference measured
// in the same run:
//   placement_rate   placement decisions per second on a 1,000-host x 8-GPU
//                    inventory, topology-aware vs first-fit.
//   trace            a job trace replayed on a cluster: GPU utilization,
//                    fragmentation, queueing delay and topology quality of the
//                    topology-aware allocator vs topology-oblivious first fit.
//                    The trace is Alibaba's cluster-trace-gpu-v2023 (openb
//                    pods) read from --trace-dir; when it is absent a
//                    synthetic trace stands in and the output says so.
//   privacy_utility  decision quality of a tensor-parallel planner with the
//                    full topology, the coarse summary and nothing, relative
//                    to the best plan; identifiers revealed by the summaries.
//
// Synthetic trace (fallback): 8,000 jobs of hz::experiment::SyntheticTrace
// (seeded, so every run sees the same jobs).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hz/experiment/trace.h"
#include "hz/scheduler/allocator.h"
#include "hz/scheduler/planner.h"
#include "hz/scheduler/synthetic_cluster.h"
#include "hz/scheduler/topology_summary.h"

namespace hz::scheduler {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Placement decisions per second: allocate a random mix until a request
// does not fit, then release random allocations, for `decisions` decisions.
double PlacementRate(const Cluster& cluster, Policy policy, int decisions, uint64_t seed) {
  Allocator alloc(&cluster, policy);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> live;
  const uint32_t sizes[] = {1, 1, 1, 2, 2, 4, 4, 8};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < decisions; ++i) {
    const uint32_t g = sizes[rng() % 8];
    Allocation a;
    Status s = alloc.Allocate("t", {g, g >= 2 ? g : 0, HZ_LOC_SAME_HOST}, &a);
    if (s.ok()) {
      live.push_back(a.id);
    } else {
      for (int k = 0; k < 64 && !live.empty(); ++k) {
        size_t j = rng() % live.size();
        alloc.Release(live[j]);
        live[j] = live.back();
        live.pop_back();
      }
    }
  }
  return decisions / Seconds(t0, std::chrono::steady_clock::now());
}

struct TraceResult {
  double utilization = 0;    // time-weighted allocated GPUs / all GPUs
  double fragmentation = 0;  // time-weighted share of free GPUs outside whole free islands
  double mean_wait_s = 0;
  double p99_wait_s = 0;
  double same_island = 0;     // multi-GPU jobs placed inside one NVLink island
  double allreduce_cost = 0;  // mean ring cost (s/GB) of multi-GPU jobs under the true topology
  size_t jobs = 0;
};

TraceResult Replay(const Cluster& cluster, Policy policy,
                   const std::vector<hz::experiment::TraceJob>& jobs) {
  Allocator alloc(&cluster, policy);
  uint32_t total_gpus = 0;
  for (uint32_t h = 0; h < cluster.num_hosts(); ++h)
    total_gpus += cluster.host(h).Count(DeviceKind::kGpu);
  std::multimap<uint64_t, uint64_t> ends;  // end time -> allocation id
  std::deque<size_t> queue;
  std::vector<double> waits;
  size_t next = 0;
  uint64_t now = jobs.empty() ? 0 : jobs[0].arrival_s;
  const uint64_t start_time = now;
  double busy_area = 0, frag_area = 0, span = 0;
  size_t multi = 0, island = 0;
  double cost_sum = 0;
  auto fragmentation = [&]() {
    uint32_t free = alloc.TotalFree(DeviceKind::kGpu);
    if (free == 0) return 0.0;
    uint32_t whole = 0;
    for (uint32_t p = 0; p < cluster.pools().size(); ++p) {
      const Pool& pool = cluster.pools()[p];
      if (pool.kind == DeviceKind::kGpu && alloc.FreeInPool(p) == pool.devices.size()) {
        whole += alloc.FreeInPool(p);
      }
    }
    return 1.0 - static_cast<double>(whole) / free;
  };
  auto advance = [&](uint64_t t) {
    if (t <= now) return;
    const double dt = static_cast<double>(t - now);
    busy_area += dt * (total_gpus - alloc.TotalFree(DeviceKind::kGpu));
    frag_area += dt * fragmentation();
    span += dt;
    now = t;
  };
  auto try_start = [&]() {
    while (!queue.empty()) {
      const hz::experiment::TraceJob& j = jobs[queue.front()];
      Allocation a;
      Request r{j.gpus, j.gpus >= 2 ? j.gpus : 0, HZ_LOC_SAME_HOST};
      if (!alloc.Allocate("t", r, &a).ok()) break;  // FIFO: the head waits
      waits.push_back(static_cast<double>(now - j.arrival_s));
      ends.emplace(now + j.duration_s, a.id);
      if (j.gpus >= 2) {
        std::vector<DeviceRef> g;
        for (DeviceRef d : a.devices) {
          if (cluster.device(d).kind == DeviceKind::kGpu) g.push_back(d);
        }
        ++multi;
        bool one = true;
        double slowest = 1e18;
        for (size_t x = 0; x < g.size(); ++x) {
          for (size_t y = x + 1; y < g.size(); ++y) {
            one &= cluster.Bandwidth(g[x], g[y]) == HZ_BW_ULTRA;
            slowest = std::min(slowest, cluster.TrueBandwidthGBs(g[x], g[y]));
          }
        }
        island += one;
        const double k = static_cast<double>(g.size());
        cost_sum += 2 * (k - 1) / k / slowest;
      }
      queue.pop_front();
    }
  };
  while (next < jobs.size() || !ends.empty()) {
    const uint64_t t_arrive = next < jobs.size() ? jobs[next].arrival_s : UINT64_MAX;
    const uint64_t t_end = ends.empty() ? UINT64_MAX : ends.begin()->first;
    if (t_end <= t_arrive) {
      advance(t_end);
      alloc.Release(ends.begin()->second);
      ends.erase(ends.begin());
    } else {
      advance(t_arrive);
      if (jobs[next].gpus <= 8) queue.push_back(next);
      ++next;
    }
    try_start();
    if (ends.empty() && next >= jobs.size()) break;  // what is left never fits
  }
  (void)start_time;
  TraceResult r;
  r.jobs = waits.size();
  r.utilization = span > 0 ? busy_area / span / total_gpus : 0;
  r.fragmentation = span > 0 ? frag_area / span : 0;
  if (!waits.empty()) {
    double sum = 0;
    for (double w : waits) sum += w;
    r.mean_wait_s = sum / waits.size();
    std::sort(waits.begin(), waits.end());
    r.p99_wait_s = waits[static_cast<size_t>(0.99 * (waits.size() - 1))];
  }
  r.same_island = multi ? static_cast<double>(island) / multi : 0;
  r.allreduce_cost = multi ? cost_sum / multi : 0;
  return r;
}

double Ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

void PrintTrace(const char* cluster_name, const char* source, size_t hosts, const TraceResult& topo,
                const TraceResult& ff) {
  std::printf(
      "{\"bench\":\"trace\",\"trace\":\"%s\",\"cluster\":\"%s\",\"hosts\":%zu,\"jobs\":%zu,"
      "\"topology\":{\"utilization\":%.4f,\"fragmentation\":%.4f,\"mean_wait_s\":%.1f,"
      "\"p99_wait_s\":%.1f,\"same_island\":%.4f,\"allreduce_s_per_gb\":%.5f},"
      "\"first_fit\":{\"utilization\":%.4f,\"fragmentation\":%.4f,\"mean_wait_s\":%.1f,"
      "\"p99_wait_s\":%.1f,\"same_island\":%.4f,\"allreduce_s_per_gb\":%.5f},"
      "\"ratio\":{\"utilization\":%.4f,\"fragmentation\":%.4f,\"mean_wait\":%.4f,"
      "\"same_island\":%.4f,\"allreduce_cost\":%.4f}}\n",
      source, cluster_name, hosts, topo.jobs, topo.utilization, topo.fragmentation,
      topo.mean_wait_s, topo.p99_wait_s, topo.same_island, topo.allreduce_cost, ff.utilization,
      ff.fragmentation, ff.mean_wait_s, ff.p99_wait_s, ff.same_island, ff.allreduce_cost,
      Ratio(topo.utilization, ff.utilization), Ratio(topo.fragmentation, ff.fragmentation),
      Ratio(topo.mean_wait_s, ff.mean_wait_s), Ratio(topo.same_island, ff.same_island),
      Ratio(topo.allreduce_cost, ff.allreduce_cost));
}

// Planner quality with full / coarse / no topology, and an identifier scan
// of every summary produced.
void PrivacyUtility(int trials) {
  Cluster c = UniformCluster(16, 8);
  std::set<std::string> ids;
  for (uint32_t h = 0; h < c.num_hosts(); ++h) {
    ids.insert(c.host(h).name);
    for (const Device& d : c.host(h).devices) {
      ids.insert(d.bdf);
      ids.insert(d.bdf.substr(5));
      ids.insert(d.switch_bdf);
      ids.insert(d.serial);
    }
  }
  std::mt19937_64 rng(11);
  double full = 0, coarse = 0, blind = 0;
  int n = 0;
  size_t revealed = 0, summaries = 0;
  for (int t = 0; t < trials; ++t) {
    Allocator alloc(&c, t % 2 ? Policy::kFirstFit : Policy::kTopologyAware);
    const int background = static_cast<int>(rng() % 40);
    for (int k = 0; k < background; ++k) {
      Allocation a;
      alloc.Allocate("bg", {static_cast<uint32_t>(1 + rng() % 4), 0, HZ_LOC_ANY}, &a);
    }
    for (uint32_t want : {8u, 16u}) {
      std::vector<DeviceRef> gpus;
      if (want == 16) {
        if (!alloc.Place({16, 0, HZ_LOC_ANY}, &gpus)) continue;
      } else if (!alloc.Place({8, 0, HZ_LOC_ANY}, &gpus)) {
        continue;
      }
      TopologySummary s = BuildTopologySummary(c, gpus, rng());
      ++summaries;
      const std::string bytes(s.bytes.begin(), s.bytes.end());
      for (const std::string& id : ids) revealed += bytes.find(id) != std::string::npos;
      for (int k : {2, 4, 8}) {
        // 16 GPUs in groups of 2 or 4 has millions of partitions: keep the
        // exhaustive search to the 8-GPU allocations there.
        if (want == 16 && k != 8) continue;
        PlanQuality q = EvaluatePlans(c, s, k, rng);
        full += q.best_cost / q.full_cost;
        coarse += q.best_cost / q.coarse_cost;
        blind += q.best_cost / q.random_cost;
        ++n;
      }
    }
  }
  std::printf(
      "{\"bench\":\"privacy_utility\",\"plans\":%d,\"summaries\":%zu,\"quality_full\":%.4f,"
      "\"quality_coarse\":%.4f,\"quality_none\":%.4f,\"coarse_vs_full\":%.4f,"
      "\"identifiers_revealed\":%zu}\n",
      n, summaries, full / n, coarse / n, blind / n, (coarse / n) / (full / n), revealed);
}

}  // namespace
}  // namespace hz::scheduler

int main(int argc, char** argv) {
  using namespace hz::scheduler;
  CLI::App app{"HarmonAIze scheduler benchmark (JSON lines)"};
  std::string trace_dir = std::string(HZ_SOURCE_DIR) + "/../shared/data/alibaba-gpu-v2023";
  int hosts = 1000;
  int decisions = 200000;
  int contended_hosts = 8;
  int trials = 60;
  bool longer = false;
  app.add_option("--trace-dir", trace_dir, "directory of openb_pod_list_default.csv");
  app.add_option("--hosts", hosts, "hosts of the placement-rate inventory");
  app.add_option("--decisions", decisions, "placement decisions timed per policy");
  app.add_option("--contended-hosts", contended_hosts, "8-GPU hosts of the contended replay");
  app.add_option("--trials", trials, "privacy-utility trials");
  app.add_flag("--long", longer, "5x the decisions and trials");
  CLI11_PARSE(app, argc, argv);
  if (longer) {
    decisions *= 5;
    trials *= 5;
  }

  Cluster big = UniformCluster(hosts, 8);
  const double ff = PlacementRate(big, Policy::kFirstFit, decisions, 1);
  const double topo = PlacementRate(big, Policy::kTopologyAware, decisions, 1);
  std::printf(
      "{\"bench\":\"placement_rate\",\"hosts\":%d,\"gpus_per_host\":8,\"decisions\":%d,"
      "\"topology_per_s\":%.0f,\"first_fit_per_s\":%.0f,\"ratio_vs_first_fit\":%.4f}\n",
      hosts, decisions, topo, ff, topo / ff);
  std::fflush(stdout);

  hz::experiment::Trace trace;
  if (hz::Status st = hz::experiment::LoadAlibabaTrace(trace_dir, &trace); !st.ok()) {
    std::fprintf(stderr, "%s: using the synthetic trace\n", st.ToString().c_str());
    trace = hz::experiment::SyntheticTrace(8000, 2023);
  }
  const std::vector<hz::experiment::TraceJob>& jobs = trace.jobs;
  const std::vector<uint32_t>& node_gpus = trace.node_gpus;
  const char* source = trace.source.c_str();
  // The trace's own cluster (one synthetic host per listed node).
  {
    std::vector<HostInventory> list;
    for (size_t i = 0; i < node_gpus.size(); ++i) {
      list.push_back(SyntheticHost("n" + std::to_string(i), static_cast<int>(node_gpus[i]),
                                   static_cast<int>(i)));
    }
    Cluster c(std::move(list));
    TraceResult t = Replay(c, Policy::kTopologyAware, jobs);
    TraceResult f = Replay(c, Policy::kFirstFit, jobs);
    PrintTrace("trace-nodes", source, c.num_hosts(), t, f);
    std::fflush(stdout);
  }
  // A contended cluster, so that placement decides queueing.
  {
    Cluster c = UniformCluster(contended_hosts, 8);
    TraceResult t = Replay(c, Policy::kTopologyAware, jobs);
    TraceResult f = Replay(c, Policy::kFirstFit, jobs);
    PrintTrace("contended", source, c.num_hosts(), t, f);
    std::fflush(stdout);
  }
  PrivacyUtility(trials);
  return 0;
}
