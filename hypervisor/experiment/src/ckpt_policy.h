// The checkpoint policy in the emulator's loop. A cooperative tenant declares
// a checkpoint::Policy for its job's stream, as the guest library does with
// CKPT_POLICY; what the checkpoint engine does under that policy then decides
// whether a notice saves the job and which losses a checkpoint survives, by
// the engine's own rules:
//
// - a notice saves only a stream whose policy asks for it
//   (auto_save_on_notice), and the save is taken only if its copy ends
//   before the notice's deadline (jit.cc: JIT_FAILED, timed out, after it);
// - a snapshot is in host memory when the stall ends, so it survives the
//   guest and its GPUs at once; it survives the host only at the peer-host
//   tier, once it is committed on the local disk and then copied to another
//   host from the committed files (peer.h). A host-memory or local-disk
//   checkpoint is out of reach while its host is down.
//
// The standard tenant declares nothing: it writes and fsyncs to its own
// storage, which survives everything once the fsync returns, and saves so on
// a notice if it acts on notices (only_jit_notice). Copies, writes
// and their times are modelled (model.h); the engine itself does not run.
#ifndef HZ_EXPERIMENT_SRC_CKPT_POLICY_H_
#define HZ_EXPERIMENT_SRC_CKPT_POLICY_H_

#include <optional>

#include "hz/checkpoint/types.h"
#include "hz/experiment/cohort.h"
#include "hz/experiment/model.h"
#include "hz/experiment/trace.h"

namespace hz::experiment {

// What an interruption takes away from the job.
enum class Loss {
  kGuest,    // the VM is stopped (a reclaim, a move): its host lives on
  kDevices,  // its GPUs failed: its host lives on
  kHost,     // its host is down (a host failure, a maintenance)
};

// The stream policy the cohort's tenant declares, or none when the tenant
// saves on its own (standard).
std::optional<checkpoint::Policy> DeclaredPolicy(const Mechanisms& m);

// A job's checkpoints for one run.
struct CheckpointPlan {
  double stall_s = 0;     // a save stops the job this long
  double interval_s = 0;  // compute seconds between regular saves
  bool saves_on_notice = false;
  // Seconds after its stall until a checkpoint survives the host's loss;
  // infinity: never.
  double host_safe_lag_s = 0;

  // Seconds after its stall until a checkpoint survives `loss`.
  double SafeLag(Loss loss) const { return loss == Loss::kHost ? host_safe_lag_s : 0; }
  // Whether a save on notice that starts at `heard` is taken before the
  // notice's deadline.
  bool NoticeSaveFits(double heard, double deadline) const {
    return saves_on_notice && heard + stall_s <= deadline;
  }
};

CheckpointPlan PlanCheckpoints(const Model& model, const Mechanisms& m, const TraceJob& job);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_SRC_CKPT_POLICY_H_
