#include "hz/experiment/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

namespace hz::experiment {
namespace {

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = line.find(',', pos);
    out.push_back(line.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// Column positions of openb_pod_list_default.csv:
// name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time
enum PodColumn { kNumGpu = 3, kQos = 6, kCreated = 8, kDeleted = 9, kPodColumns = 10 };
// openb_node_list_gpu_node.csv: sn,cpu_milli,memory_mib,gpu,model
enum NodeColumn { kNodeGpus = 3, kNodeColumns = 4 };

bool ParsePod(const std::string& line, TraceJob* job) {
  const std::vector<std::string> f = SplitCsv(line);
  if (f.size() < kPodColumns) return false;
  try {
    const unsigned long gpus = std::stoul(f[kNumGpu]);
    const uint64_t created = std::stoull(f[kCreated]);
    const uint64_t deleted = f[kDeleted].empty() ? 0 : std::stoull(f[kDeleted]);
    if (gpus == 0 || gpus > 8 || deleted <= created) return false;
    *job = {created, deleted - created, static_cast<uint32_t>(gpus), f[kQos] == "BE"};
    return true;
  } catch (const std::exception&) {
    return false;  // a malformed number: the row is skipped
  }
}

}  // namespace

Status LoadAlibabaTrace(const std::string& dir, Trace* out) {
  const std::string pods_path = dir + "/openb_pod_list_default.csv";
  const std::string nodes_path = dir + "/openb_node_list_gpu_node.csv";
  std::ifstream pods(pods_path);
  if (!pods) return Status::NotFound(pods_path + ": cannot open");
  std::ifstream nodes(nodes_path);
  if (!nodes) return Status::NotFound(nodes_path + ": cannot open");
  Trace t;
  t.source = "alibaba-gpu-v2023";
  std::string line;
  std::getline(pods, line);  // header
  while (std::getline(pods, line)) {
    TraceJob job;
    if (ParsePod(line, &job)) t.jobs.push_back(job);
  }
  std::getline(nodes, line);
  while (std::getline(nodes, line)) {
    const std::vector<std::string> f = SplitCsv(line);
    if (f.size() < kNodeColumns) continue;
    try {
      const unsigned long gpus = std::stoul(f[kNodeGpus]);
      if (gpus > 0 && gpus <= 8) t.node_gpus.push_back(static_cast<uint32_t>(gpus));
    } catch (const std::exception&) {
      continue;
    }
  }
  if (t.jobs.empty() || t.node_gpus.empty()) {
    return Status::Corruption(dir + ": no usable tasks or nodes in the trace files");
  }
  std::stable_sort(t.jobs.begin(), t.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.arrival_s < b.arrival_s; });
  *out = std::move(t);
  return Status::Ok();
}

Trace SyntheticTrace(size_t jobs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(1.0 / 60.0);
  std::lognormal_distribution<double> duration(std::log(1800.0), 1.0);
  Trace t;
  t.source = "synthetic";
  double now = 0;
  for (size_t i = 0; i < jobs; ++i) {
    now += gap(rng);
    const uint64_t r = rng() % 100;
    const uint32_t gpus = r < 60 ? 1 : r < 75 ? 2 : r < 90 ? 4 : 8;
    const uint64_t d = std::max<uint64_t>(1, static_cast<uint64_t>(duration(rng)));
    t.jobs.push_back({static_cast<uint64_t>(now), d, gpus, rng() % 3 == 0});
  }
  t.node_gpus.assign(150, 8);
  return t;
}

Trace SteadyWorkload(const Trace& mix, double load, size_t gpus, double window_s, uint64_t seed) {
  Trace t;
  t.source = mix.source;
  t.node_gpus = mix.node_gpus;
  if (mix.jobs.empty() || load <= 0 || gpus == 0 || window_s <= 0) return t;
  double gpu_seconds = 0;
  for (const TraceJob& j : mix.jobs)
    gpu_seconds += static_cast<double>(j.gpus) * static_cast<double>(j.duration_s);
  const double mean = gpu_seconds / static_cast<double>(mix.jobs.size());
  const double rate = load * static_cast<double>(gpus) / mean;  // jobs per second
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  for (double now = gap(rng); now < window_s; now += gap(rng)) {
    TraceJob j = mix.jobs[rng() % mix.jobs.size()];
    j.arrival_s = static_cast<uint64_t>(now);
    t.jobs.push_back(j);
  }
  return t;
}

}  // namespace hz::experiment
