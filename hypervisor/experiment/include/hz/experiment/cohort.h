// What a cohort of tenants and its provider do: standard IaaS, full
// cooperation, one cooperative mechanism at a time, and the cooperative
// cohort with less information.
#ifndef HZ_EXPERIMENT_COHORT_H_
#define HZ_EXPERIMENT_COHORT_H_

#include <string>
#include <vector>

namespace hz::experiment {

// How much the tenant is told: exactly, as harmonaized publishes it (event
// deadlines rounded down to 10 s; topology as the coarse summary), or nothing.
enum class Information { kFull, kCoarse, kNone };

struct Mechanisms {
  // Checkpoints: the provider copies to host memory and persists in the
  // background (a short stall, so the interval follows Young's rule), instead
  // of the tenant's periodic write+fsync at a fixed interval.
  bool provider_ckpt = false;
  // A save on notice, as soon as the notice arrives.
  bool jit_on_notice = false;
  // Each checkpoint is copied to a peer host's memory: a host failure loses
  // nothing newer than the copy, and a restart reads it at network rate.
  bool peer_replicas = false;
  // Notices pushed by the event queue instead of polled at 1 Hz; maintenance
  // announced early and degraded GPUs warned of.
  bool pushed_notices = false;
  // Replacement devices from the negotiation engine: the provider offers
  // them when a notice drains a job's devices, the tenant accepts when it
  // hears, and the moved job restarts on them ahead of the queue. Without
  // capacity no offer is made, and a tenant told nothing lets it lapse:
  // either way the job queues.
  bool reservations = false;
  // Topology-aware placement by the scheduler's allocator, a tenant plan
  // made from the topology summary and the provider's collectives (else
  // first fit, a blind plan and the tenant's own library).
  bool topology = false;
  Information events = Information::kCoarse;
  Information topology_info = Information::kCoarse;
};

struct Cohort {
  std::string name;
  std::string description;
  Mechanisms mechanisms;
};

// standard, cooperative, the six only_* ablations and the six
// events_*/topology_* granularity cohorts, in that order.
std::vector<Cohort> AllCohorts();
// The cohorts named, in the order given; false if a name is unknown.
bool SelectCohorts(const std::vector<std::string>& names, std::vector<Cohort>* out);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_COHORT_H_
