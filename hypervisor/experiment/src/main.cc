// hz-experiment: standard IaaS against tenant-provider cooperation on a GPU
// cluster, over a production trace, with ablations and information
// granularity. Writes meta.json, runs.csv, summary.csv and jct.csv into --out
// (the format: hypervisor/experiment/README.md) and prints one JSON line per
// cohort with its means.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hz/common/file.h"
#include "hz/experiment/cohort.h"
#include "hz/experiment/comm_model.h"
#include "hz/experiment/model.h"
#include "hz/experiment/scenario.h"
#include "hz/experiment/simulator.h"
#include "hz/experiment/stats.h"
#include "hz/experiment/trace.h"
#include "hz/scheduler/synthetic_cluster.h"

namespace hz::experiment {
namespace {

struct Measure {
  const char* name;
  double (*get)(const RunResult&);
};

const Measure kMeasures[] = {
    {"jct_mean_s", [](const RunResult& r) { return r.jct_mean_s; }},
    {"jct_p50_s", [](const RunResult& r) { return r.jct_p50_s; }},
    {"jct_p99_s", [](const RunResult& r) { return r.jct_p99_s; }},
    {"wait_mean_s", [](const RunResult& r) { return r.wait_mean_s; }},
    {"makespan_s", [](const RunResult& r) { return r.makespan_s; }},
    {"lost_gpu_h", [](const RunResult& r) { return r.lost_gpu_h; }},
    {"recovery_mean_s", [](const RunResult& r) { return r.recovery_mean_s; }},
    {"utilisation", [](const RunResult& r) { return r.utilisation; }},
    {"fragmentation", [](const RunResult& r) { return r.fragmentation; }},
    {"energy_mwh", [](const RunResult& r) { return r.energy_mwh; }},
    {"interruptions", [](const RunResult& r) { return static_cast<double>(r.interruptions); }},
    {"offers_made", [](const RunResult& r) { return static_cast<double>(r.offers_made); }},
    {"offers_accepted", [](const RunResult& r) { return static_cast<double>(r.offers_accepted); }},
    {"reservations_honoured",
     [](const RunResult& r) { return static_cast<double>(r.reservations_honoured); }},
    {"reservation_fallbacks",
     [](const RunResult& r) { return static_cast<double>(r.reservation_fallbacks); }},
};

constexpr size_t kJctQuantiles = 1000;

scheduler::Cluster TraceCluster(const Trace& trace, int hosts) {
  if (hosts > 0) return scheduler::UniformCluster(hosts, 8);
  std::vector<scheduler::HostInventory> list;
  for (size_t i = 0; i < trace.node_gpus.size(); ++i) {
    list.push_back(scheduler::SyntheticHost(
        "node-" + std::to_string(i), static_cast<int>(trace.node_gpus[i]), static_cast<int>(i)));
  }
  return scheduler::Cluster(std::move(list));
}

size_t CountGpus(const scheduler::Cluster& cluster) {
  size_t gpus = 0;
  for (uint32_t h = 0; h < cluster.num_hosts(); ++h)
    gpus += cluster.host(h).Count(scheduler::DeviceKind::kGpu);
  return gpus;
}

nlohmann::json Meta(const Trace& trace, const scheduler::Cluster& cluster, double jobs_per_seed,
                    double load, double window_days, double max_days, int seeds,
                    const std::vector<Cohort>& cohorts, Model& model,
                    const std::vector<std::string>& calibrated) {
  nlohmann::json meta;
  meta["trace"] = trace.source;
  meta["hosts"] = cluster.num_hosts();
  meta["gpus"] = CountGpus(cluster);
  meta["trace_jobs"] = trace.jobs.size();
  meta["jobs"] = static_cast<size_t>(std::llround(jobs_per_seed));
  meta["offered_load"] = load;
  meta["window_days"] = window_days;
  meta["max_job_days"] = max_days;
  meta["seeds"] = seeds;
  for (const Cohort& c : cohorts) meta["cohorts"][c.name] = c.description;
  for (const JobClass& c : JobClasses()) {
    meta["job_classes"].push_back({{"gpus", c.gpus},
                                   {"model", c.model},
                                   {"params", c.params},
                                   {"layers", c.layers},
                                   {"hidden", c.hidden}});
  }
  meta["calibration"] = nlohmann::json::object();
  meta["assumptions"] = nlohmann::json::object();
  for (const NamedFigure& f : model.Figures()) {
    const bool measured =
        std::find(calibrated.begin(), calibrated.end(), f.key) != calibrated.end();
    meta[measured ? "calibration" : "assumptions"][f.key] = {
        {"value", f.figure->value}, {"unit", f.figure->unit}, {"source", f.figure->source}};
  }
  return meta;
}

// --scenario: each cohort once on the scenario's jobs and events; writes
// scenario.csv (cohort,job,jct_s,lost_s,ckpt_interval_s,interruptions) and
// prints one JSON line per cohort with its jobs.
int RunScenario(const std::string& path, Model model, const std::vector<Cohort>& cohorts,
                const std::string& out_dir) {
  Scenario scenario;
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    std::fprintf(stderr, "hz-experiment: %s\n", text.status().ToString().c_str());
    return 2;
  }
  if (Status st = ParseScenario(*text, &scenario, &model); !st.ok()) {
    std::fprintf(stderr, "hz-experiment: %s: %s\n", path.c_str(), st.ToString().c_str());
    return 2;
  }
  const scheduler::Cluster cluster =
      scheduler::UniformCluster(scenario.hosts, scenario.gpus_per_host);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  std::ofstream csv(out_dir + "/scenario.csv");
  if (ec || !csv) {
    std::fprintf(stderr, "hz-experiment: cannot write into %s\n", out_dir.c_str());
    return 1;
  }
  csv << "cohort,job,jct_s,lost_s,ckpt_interval_s,interruptions\n";
  for (const Cohort& c : cohorts) {
    const RunResult r = Simulate(cluster, scenario.jobs, model, c.mechanisms, 0, &scenario.events);
    nlohmann::json line = {{"bench", "experiment-scenario"}, {"cohort", c.name}};
    for (size_t i = 0; i < r.per_job.size(); ++i) {
      const JobResult& j = r.per_job[i];
      csv << c.name << ',' << i << ',' << j.jct_s << ',' << j.lost_s << ',' << j.ckpt_interval_s
          << ',' << j.interruptions << '\n';
      line["jobs"].push_back({{"jct_s", j.jct_s}, {"lost_s", j.lost_s}});
    }
    std::printf("%s\n", line.dump().c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"Cooperative against standard IaaS on a GPU cluster trace"};
  std::string trace_dir, out_dir = "experiment-out", calibration_path, scenario_path;
  int hosts = 0, seeds = 10;
  size_t max_jobs = 0, synthetic_jobs = 8000;
  double load = 0.7;
  double window_days = 7;
  double max_days = 7;
  std::vector<std::string> cohort_names;
  app.add_option("--trace-dir", trace_dir,
                 "directory of Alibaba's cluster-trace-gpu-v2023 CSV files (else synthetic)");
  app.add_option("--synthetic-jobs", synthetic_jobs, "jobs of the synthetic trace");
  app.add_option("--max-jobs", max_jobs, "only the first N jobs of the trace (0: all)");
  app.add_option("--hosts", hosts, "8-GPU hosts (0: the trace's own nodes)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--load", load, "offered load of the steady workload (0: the trace as traced)")
      ->check(CLI::Range(0.0, 4.0));
  app.add_option("--window-days", window_days, "arrivals of the steady workload span this")
      ->check(CLI::Range(0.01, 365.0));
  app.add_option("--max-days", max_days,
                 "longer jobs are cut to this (the trace's months-long pods are services)")
      ->check(CLI::Range(0.01, 365.0));
  app.add_option("--seeds", seeds, "seeds per cohort")->check(CLI::Range(1, 1000));
  app.add_option("--cohorts", cohort_names, "cohorts to run (default: all)")->delimiter(',');
  app.add_option("--calibration", calibration_path, "JSON file of measured figures");
  app.add_option("--out", out_dir, "output directory");
  app.add_option("--scenario", scenario_path,
                 "JSON file of given jobs and events (scenario.h): run it once per cohort");
  CLI11_PARSE(app, argc, argv);

  Model model;
  std::vector<std::string> calibrated;
  if (!calibration_path.empty()) {
    StatusOr<std::string> text = ReadFile(calibration_path);
    if (!text.ok()) {
      std::fprintf(stderr, "hz-experiment: %s\n", text.status().ToString().c_str());
      return 2;
    }
    if (Status st = ApplyCalibration(*text, &model, &calibrated); !st.ok()) {
      std::fprintf(stderr, "hz-experiment: %s: %s\n", calibration_path.c_str(),
                   st.ToString().c_str());
      return 2;
    }
  }
  std::vector<Cohort> cohorts;
  if (cohort_names.empty()) {
    cohorts = AllCohorts();
  } else if (!SelectCohorts(cohort_names, &cohorts)) {
    std::fprintf(stderr, "hz-experiment: unknown cohort in --cohorts\n");
    return 2;
  }
  if (!scenario_path.empty()) return RunScenario(scenario_path, model, cohorts, out_dir);
  Trace trace;
  if (trace_dir.empty()) {
    std::fprintf(stderr, "hz-experiment: no --trace-dir: using the synthetic trace\n");
    trace = SyntheticTrace(synthetic_jobs, 2023);
  } else if (Status st = LoadAlibabaTrace(trace_dir, &trace); !st.ok()) {
    std::fprintf(stderr, "hz-experiment: %s: using the synthetic trace instead\n",
                 st.ToString().c_str());
    trace = SyntheticTrace(synthetic_jobs, 2023);
  }
  if (max_jobs > 0 && trace.jobs.size() > max_jobs) trace.jobs.resize(max_jobs);
  for (TraceJob& j : trace.jobs)
    j.duration_s = std::min<uint64_t>(j.duration_s, static_cast<uint64_t>(max_days * 86400));

  const scheduler::Cluster cluster = TraceCluster(trace, hosts);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  std::ofstream runs(out_dir + "/runs.csv"), summary(out_dir + "/summary.csv"),
      jct(out_dir + "/jct.csv");
  if (ec || !runs || !summary || !jct) {
    std::fprintf(stderr, "hz-experiment: cannot write into %s\n", out_dir.c_str());
    return 1;
  }
  runs << "cohort,seed,jobs";
  for (const Measure& m : kMeasures) runs << ',' << m.name;
  runs << '\n';
  summary << "cohort,measure,mean,ci95_low,ci95_high,n\n";
  jct << "cohort,seed,jct_s\n";
  // Each seed draws its own jobs; every cohort of a seed runs the same.
  std::vector<Trace> workloads;
  double jobs_per_seed = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    workloads.push_back(load > 0 ? SteadyWorkload(trace, load, CountGpus(cluster),
                                                  window_days * 86400, static_cast<uint64_t>(seed))
                                 : trace);
    jobs_per_seed += static_cast<double>(workloads.back().jobs.size()) / seeds;
  }
  for (const Cohort& c : cohorts) {
    std::vector<RunResult> results;
    for (int seed = 0; seed < seeds; ++seed) {
      RunResult r =
          Simulate(cluster, workloads[seed].jobs, model, c.mechanisms, static_cast<uint64_t>(seed));
      runs << c.name << ',' << seed << ',' << r.jobs;
      for (const Measure& m : kMeasures) runs << ',' << m.get(r);
      runs << '\n';
      if (seed == 0) {
        // The distribution, not every job: 1,000 evenly spaced quantiles.
        std::sort(r.jct_s.begin(), r.jct_s.end());
        for (size_t q = 0; q < kJctQuantiles && !r.jct_s.empty(); ++q) {
          const size_t at = q * (r.jct_s.size() - 1) / (kJctQuantiles - 1);
          jct << c.name << ",0," << r.jct_s[at] << '\n';
        }
      }
      r.jct_s.clear();
      results.push_back(std::move(r));
    }
    nlohmann::json line = {{"bench", "experiment"}, {"cohort", c.name}, {"seeds", seeds}};
    for (const Measure& m : kMeasures) {
      std::vector<double> samples;
      for (const RunResult& r : results) samples.push_back(m.get(r));
      const Interval ci = MeanCi95(samples);
      summary << c.name << ',' << m.name << ',' << ci.mean << ',' << ci.low << ',' << ci.high << ','
              << ci.n << '\n';
      line[m.name] = {{"mean", ci.mean}, {"ci95", {ci.low, ci.high}}};
    }
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  std::ofstream(out_dir + "/meta.json") << Meta(trace, cluster, jobs_per_seed, load, window_days,
                                                max_days, seeds, cohorts, model, calibrated)
                                               .dump(2)
                                        << '\n';
  return 0;
}

}  // namespace
}  // namespace hz::experiment

int main(int argc, char** argv) {
  return hz::experiment::Main(argc, argv);
}
