// The cluster emulator: a discrete-event simulation of a GPU cluster running
// a job trace, with failures, maintenance, spot-style reclaims and
// neighbours. Only time and hardware are modelled (model.h). Placement is the
// scheduler's real Allocator (topology-aware or first fit), a multi-GPU
// job's communication plan is the real planner's, made from the real topology
// summary, the full topology or nothing, and priced under the true topology,
// and replacement devices for a job a notice will move are the real
// negotiation engine's offers and reservations, on simulated time
// (src/replacements.h); harmonaized's event bus carries the notices and the
// offers to the tenants (src/notice_bus.h).
//
// Every cohort of one seed sees the same jobs and the same failures,
// maintenance windows and reclaims at the same times: infrastructure events
// are drawn from the seed alone, and a job's reclaims from the seed and the
// job, consumed by its running time.
#ifndef HZ_EXPERIMENT_SIMULATOR_H_
#define HZ_EXPERIMENT_SIMULATOR_H_

#include <cstdint>
#include <vector>

#include "hz/experiment/cohort.h"
#include "hz/experiment/model.h"
#include "hz/experiment/trace.h"
#include "hz/scheduler/cluster.h"

namespace hz::experiment {

// An infrastructure event.
enum class Outage { kGpuFailure, kHostFailure, kMaintenance };

// An infrastructure event at a given time instead of drawn ones (a scenario
// replayed for validation): it strikes where job `job` runs then, a GPU
// failure its first GPU, a host failure or maintenance its host, with the
// notice the cohort gets for it (GPU failures unannounced). A job that is not
// running then is not hit.
struct FixedEvent {
  double time = 0;
  Outage kind = Outage::kGpuFailure;
  size_t job = 0;
};

// One job's outcome (by the job's index in the input).
struct JobResult {
  double jct_s = -1;           // completion - arrival; -1: not completed
  double lost_s = 0;           // work recomputed after interruptions, seconds at full speed
  double ckpt_interval_s = 0;  // compute seconds between checkpoints in its last run
  uint64_t interruptions = 0;
};

struct RunResult {
  size_t jobs = 0;            // completed
  std::vector<double> jct_s;  // completion - arrival, per completed job
  double jct_mean_s = 0;
  double jct_p50_s = 0;
  double jct_p99_s = 0;
  double wait_mean_s = 0;      // time queued, first start and restarts together
  double makespan_s = 0;       // first arrival to last completion
  double lost_gpu_h = 0;       // work recomputed after interruptions, GPU-hours
  double recovery_mean_s = 0;  // interruption to running again with state restored
  // Over the arrival window (the steady state):
  double utilisation = 0;      // time-weighted allocated GPUs / all GPUs
  double fragmentation = 0;    // time-weighted share of free GPUs outside whole free pools
  double energy_mwh = 0;       // allocated GPUs at busy power, free ones at idle power
  uint64_t interruptions = 0;  // a running job stopped by an event (moved or killed)
  // Replacements negotiated at notices (cohorts with reservations):
  uint64_t offers_made = 0;            // by the negotiation engine
  uint64_t offers_accepted = 0;        // by the job's tenant, when it heard the notice
  uint64_t reservations_honoured = 0;  // a moved job restarted on its reservation
  uint64_t reservation_fallbacks = 0;  // one was sought, the moved job queued instead
  std::vector<JobResult> per_job;
};

// Runs `jobs` on `cluster` as `mechanisms` say. Infrastructure events are
// drawn up to kEventHorizonS after the last arrival (a job still running then
// runs to its end undisturbed), or are `fixed` ones when given.
inline constexpr double kEventHorizonS = 30 * 86400.0;
RunResult Simulate(const scheduler::Cluster& cluster, const std::vector<TraceJob>& jobs,
                   const Model& model, const Mechanisms& mechanisms, uint64_t seed,
                   const std::vector<FixedEvent>* fixed = nullptr);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_SIMULATOR_H_
