// Job traces for the cluster experiment and the scheduler benchmark.
//
// The real trace is Alibaba's cluster-trace-gpu-v2023 ("Beware of
// Fragmentation", USENIX ATC '23): openb_pod_list_default.csv (tasks) and
// openb_node_list_gpu_node.csv (the GPU nodes). Its licence allows research
// use but not redistribution, so it is read from a directory given at run
// time and never shipped; without it a seeded synthetic trace stands in.
#ifndef HZ_EXPERIMENT_TRACE_H_
#define HZ_EXPERIMENT_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hz/common/status.h"

namespace hz::experiment {

struct TraceJob {
  uint64_t arrival_s = 0;   // submission, seconds from the trace's start
  uint64_t duration_s = 0;  // run time without interruptions
  uint32_t gpus = 0;        // whole GPUs (1 to 8)
  // Best-effort QoS ("BE" in the trace): the provider may reclaim it, as a
  // spot instance.
  bool preemptible = false;
};

struct Trace {
  std::string source;               // "alibaba-gpu-v2023" or "synthetic"
  std::vector<TraceJob> jobs;       // by arrival
  std::vector<uint32_t> node_gpus;  // GPUs per node of the traced cluster
};

// Reads the two CSV files from `dir`. Passthrough hands out whole GPUs, so a
// shared fraction of a GPU counts as one; tasks without a GPU, with more than
// 8, or without an end are left out. kNotFound when a file is missing,
// kCorruption when nothing usable is in them.
Status LoadAlibabaTrace(const std::string& dir, Trace* out);

// `jobs` jobs with Poisson arrivals (mean gap 60 s), GPU counts 1 (60%), 2
// (15%), 4 (15%), 8 (10%), log-normal durations (median 30 min), a third of
// them preemptible, on 150 nodes of 8 GPUs; the same for the same seed.
Trace SyntheticTrace(size_t jobs, uint64_t seed);

// A steady workload drawn from a trace's job mix: Poisson arrivals over
// `window_s`, each job (GPUs, duration, QoS) drawn from `mix` with
// replacement, at the rate that offers `load` of `gpus` GPUs:
// rate * mean(gpus * duration) == load * gpus. The Alibaba trace is a
// snapshot of pods collected over five months, most in the last two weeks,
// with months-long services among them; replayed at its own pace it would
// leave a cluster nearly idle, and compressed it would be one burst.
Trace SteadyWorkload(const Trace& mix, double load, size_t gpus, double window_s, uint64_t seed);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_TRACE_H_
