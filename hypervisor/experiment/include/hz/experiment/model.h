// The figures the emulator models time and hardware with. Each carries its
// unit and where it comes from: a measurement of this project's own
// benchmarks in the same run (Calibrate), a published figure, or a stated
// assumption. Everything else, placement and topology summaries above all,
// is decided by the project's real code.
#ifndef HZ_EXPERIMENT_MODEL_H_
#define HZ_EXPERIMENT_MODEL_H_

#include <string>
#include <vector>

#include "hz/common/status.h"

namespace hz::experiment {

struct Figure {
  double value = 0;
  std::string unit;
  std::string source;
};

// How a Model field is named in meta.json and in a calibration file.
struct NamedFigure {
  const char* key;
  Figure* figure;
};

struct Model {
  // Checkpoints: bytes each GPU saves, and the rates of the two ways to save.
  Figure ckpt_gb_per_gpu{4, "GB", "Llama 3 405B (arXiv 2407.21783): 1 MB-4 GB per GPU; upper end"};
  Figure tenant_write_fsync_gbps{2.0, "GB/s per GPU",
                                 "assumption: one NVMe write+fsync stream per GPU"};
  // The provider's copy stalls the job this many times shorter than the
  // tenant's own write+fsync, and persists in the background at this share of
  // the tenant's write rate: ratios, measured by checkpoint_bench here and
  // applied to the GPU server's write rate above.
  Figure provider_stall_speedup{12.5, "x", "assumption: a host-memory copy at PCIe 4 x16 rate"};
  Figure persist_efficiency{1.0, "share", "assumption: as fast as the tenant's write"};
  Figure peer_copy_gbps{12.5, "GB/s per GPU", "assumption: a 100 Gb/s NIC per GPU"};
  Figure restore_gbps{2.0, "GB/s per GPU", "assumption: read back from NVMe"};
  Figure restart_s{120, "s", "assumption: container start and framework initialisation"};
  Figure standard_ckpt_interval_s{1800, "s", "assumption: a fixed 30-minute interval"};
  // Notices.
  Figure poll_interval_s{1, "s", "Azure Scheduled Events / GCE metadata: polled at 1 Hz"};
  Figure push_latency_s{0.000243, "s", "event_delivery_bench p99 at 1000 subscribers"};
  Figure maintenance_notice_s{900, "s",
                              "Azure Scheduled Events: 15 min for Freeze/Reboot/Redeploy"};
  Figure early_maintenance_notice_s{3600, "s",
                                    "assumption: the provider plans maintenance an hour ahead"};
  Figure preemption_notice_s{30, "s", "Azure Preempt and GCE Spot: 30 s"};
  Figure failure_warning_s{600, "s", "assumption: degraded-GPU warning from the health monitor"};
  Figure predictable_failure_share{0.3, "share",
                                   "assumption: failures announced by correctable errors first"};
  // Failures and maintenance (Llama 3 405B, 16,384 GPUs, 54 days, Table 5).
  Figure gpu_failures_per_gpu_hour{1.234e-5, "1/GPU-h",
                                   "Llama 3: 262 GPU-caused interruptions / 54 d / 16,384 GPUs"};
  Figure host_failures_per_host_hour{3.88e-5, "1/host-h",
                                     "Llama 3: 103 host, network and power interruptions / 54 d / "
                                     "2,048 hosts"};
  Figure maintenance_per_host_hour{1.77e-5, "1/host-h", "Llama 3: 47 planned / 54 d / 2,048 hosts"};
  Figure preemptions_per_job_hour{1.0 / 24, "1/job-h", "assumption: one reclaim a day"};
  Figure repair_s{4 * 3600, "s", "assumption: a failed GPU or host is back in 4 h"};
  Figure maintenance_s{2 * 3600, "s", "assumption: a maintenance takes 2 h"};
  // Jobs.
  Figure comm_share{0.25, "share", "assumption: communication share of a multi-GPU iteration"};
  Figure neighbour_slowdown{0.2, "share",
                            "assumption: comm slows by this per other multi-GPU job on the host"};
  // Energy (Llama 3: H100 at 700 W).
  Figure gpu_busy_w{700, "W", "Llama 3: H100 80GB, 700 W"};
  Figure gpu_idle_w{100, "W", "assumption: an idle H100"};

  std::vector<NamedFigure> Figures();
};

// Reads {"key": number, ...} (or {"key": {"value": number, "source": ...}})
// and overrides those figures, naming them in `applied`; an unknown key or a
// value that is not a positive number is kInvalidArgument, and nothing is
// changed.
Status ApplyCalibration(const std::string& json_text, Model* model,
                        std::vector<std::string>* applied = nullptr);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_MODEL_H_
