// What a multi-GPU job's iteration costs: compute from its class's model
// size at a published utilisation, and all-reduces priced as
// alpha + bus bytes / bandwidth on the links the job got. Two engines run
// the all-reduces: the tenant's own with static settings (standard) and the
// provider's collectives, whose ratios to the same-run references come from
// the project's benchmarks (FitServiceAllReduce, FitClusterAllReduce).
#ifndef HZ_EXPERIMENT_COMM_MODEL_H_
#define HZ_EXPERIMENT_COMM_MODEL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hz/common/status.h"
#include "hz/experiment/model.h"

namespace hz::experiment {

// A job class by GPU count (the trace gives nothing else): the model it is
// taken to train, as a transformer of `params` parameters, `layers` layers
// and `hidden` width. The GPU count is what mixed-precision Adam's 16 bytes
// per parameter (ZeRO, arXiv 1910.02054) needs on 80 GB GPUs, the pairs
// sharing their model tensor-parallel.
struct JobClass {
  uint32_t gpus;
  const char* model;
  double params;
  int layers;
  int hidden;
};

// The class of a job on `gpus` GPUs: the largest class with at most as many.
const JobClass& ClassFor(uint32_t gpus);
const std::vector<JobClass>& JobClasses();

// How one engine runs an all-reduce on the GPU cluster: a latency per call
// and the share of the slowest link's rate its bus bandwidth reaches, within
// a host and across hosts.
struct Engine {
  double alpha_s = 0;
  double efficiency = 1;
  double net_alpha_s = 0;
  double net_efficiency = 1;
};
Engine StandardEngine(const Model& m);
Engine ProviderEngine(const Model& m);

// Bytes each rank sends and receives per byte of its buffer in a ring
// all-reduce of n ranks (nccl-tests' busbw factor): 2(n-1)/n.
double RingFactor(int ranks);

// One all-reduce of `bytes` per rank over `ranks` ranks spread evenly over
// `hosts` hosts, hierarchically: a ring within each host at `intra_gbs` (its
// slowest link), then across hosts each rank carries its 1/(ranks per host)
// share over its own network link of `net_gbs`.
double AllReduceSeconds(double bytes, int ranks, int hosts, double intra_gbs, double net_gbs,
                        const Engine& e);

// One iteration of a job: compute, the tensor-parallel all-reduces within
// its groups, the gradient all-reduce across them.
struct Iteration {
  double compute_s = 0;
  double tensor_s = 0;
  double gradient_s = 0;
  double total_s() const { return compute_s + tensor_s + gradient_s; }
  double comm_share() const { return total_s() > 0 ? (tensor_s + gradient_s) / total_s() : 0; }
};

// `group`: the tensor-parallel group size; `group_s_per_gb`: the tenant's
// plan's seconds per GB all-reduced within its slowest group at link rate
// (scheduler::PlanCost); `gradient_gbs`: the slowest link of the ring across
// the groups; `hosts`: the hosts the job spans.
Iteration IterationTime(const Model& m, uint32_t gpus, int group, double group_s_per_gb,
                        double gradient_gbs, int hosts, const Engine& e);

// A link slower than NVLink runs through PCIe switches and the host bridge,
// which the host's jobs share: its rate divided by one plus the share of
// time the neighbours communicate (their comm_share, summed). NVLink is the
// pair's own.
double SharedGBs(double gbs, double neighbours_comm);

// Latency and bus bandwidth of t = alpha + bus bytes / bandwidth from
// (bus bytes, seconds) points, each where it dominates: alpha from the line
// through the two smallest sizes, the bandwidth from the two largest (on a
// CPU, small buffers run from the caches at a rate large ones never see; a
// GPU link has no such step). Where the two smallest sizes put the latency
// at or below zero (noise around a latency far below their times), it is
// the smallest size's time beyond its transfer at the fitted rate. A size
// measured more than once counts with its median. kInvalidArgument with
// fewer than two sizes or when either is still not positive.
struct AlphaBeta {
  double alpha_s = 0;
  double bus_gbs = 0;
};
Status FitAlphaBeta(const std::vector<std::pair<double, double>>& points, AlphaBeta* out);

// Figures of the provider's collectives fitted from service_allreduce_bench
// JSON lines (the service against Open MPI's shared-memory all-reduce of the
// same run, per rank count) and cluster_allreduce_bench JSON lines (the
// device's and flat Gloo's all-reduce across hosts against the shaped link's
// rate, per hosts x ranks), each the median over the configurations, named
// as Model::Figures() names them, with its source. A figure that cannot be
// fitted is left out and named in `skipped`.
using FittedFigures = std::vector<std::pair<std::string, Figure>>;
void FitServiceAllReduce(const std::string& jsonl, FittedFigures* out,
                         std::vector<std::string>* skipped);
void FitClusterAllReduce(const std::string& jsonl, FittedFigures* out,
                         std::vector<std::string>* skipped);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_COMM_MODEL_H_
