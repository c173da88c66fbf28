#include "ckpt_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hz::experiment {

std::optional<checkpoint::Policy> DeclaredPolicy(const Mechanisms& m) {
  if (!m.provider_ckpt) return std::nullopt;
  checkpoint::Policy p;
  p.tier = m.peer_replicas ? checkpoint::TierKind::kPeerHost : checkpoint::TierKind::kLocalDisk;
  p.auto_save_on_notice = m.jit_on_notice;
  return p;
}

namespace {

// Young's rule, sqrt(2 * stall * MTBF), against the rate at which the job is
// stopped: the provider publishes its failure and reclaim rates.
double YoungInterval(const Model& model, const TraceJob& job, double stall_s) {
  const double per_hour = job.gpus * model.gpu_failures_per_gpu_hour.value +
                          model.host_failures_per_host_hour.value +
                          (job.preemptible ? model.preemptions_per_job_hour.value : 0);
  const double per_s = per_hour / 3600.0;
  return std::clamp(std::sqrt(2 * stall_s / std::max(per_s, 1e-12)), 60.0, 86400.0);
}

// After the stall, until the policy's tier holds a copy off the host.
double HostSafeLag(const Model& model, checkpoint::TierKind tier) {
  const double gb = model.ckpt_gb_per_gpu.value;
  switch (tier) {
    case checkpoint::TierKind::kPeerHost:
      // Committed locally first, then copied from the committed files.
      return gb / (model.tenant_write_fsync_gbps.value * model.persist_efficiency.value) +
             gb / model.peer_copy_gbps.value;
    case checkpoint::TierKind::kHostMemory:
    case checkpoint::TierKind::kLocalDisk:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace

CheckpointPlan PlanCheckpoints(const Model& model, const Mechanisms& m, const TraceJob& job) {
  const double gb = model.ckpt_gb_per_gpu.value;
  CheckpointPlan plan;
  const std::optional<checkpoint::Policy> policy = DeclaredPolicy(m);
  if (!policy) {
    // The tenant's own write+fsync: durable, off the host, when it returns;
    // on a notice it saves the same way if it acts on notices at all.
    plan.stall_s = gb / model.tenant_write_fsync_gbps.value;
    plan.interval_s = model.standard_ckpt_interval_s.value;
    plan.saves_on_notice = m.jit_on_notice;
    return plan;
  }
  plan.stall_s = gb / (model.tenant_write_fsync_gbps.value * model.provider_stall_speedup.value);
  plan.interval_s = YoungInterval(model, job, plan.stall_s);
  plan.saves_on_notice = policy->auto_save_on_notice;
  plan.host_safe_lag_s = HostSafeLag(model, policy->tier);
  return plan;
}

}  // namespace hz::experiment
