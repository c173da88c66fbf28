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
  // Jobs: an iteration of a job class (comm_model.h) on H100s.
  Figure gpu_bf16_tflops{989, "TFLOP/s per GPU", "NVIDIA H100 SXM datasheet: dense BF16"};
  Figure mfu{0.40, "share",
             "Llama 3 (arXiv 2407.21783) Table 4: 38-43% BF16 model FLOPs utilisation"};
  Figure sequences_per_iteration{16, "sequences",
                                 "assumption: per tensor-parallel group and iteration"};
  Figure sequence_tokens{4096, "tokens", "assumption: Llama 3 pre-training's first stage length"};
  Figure gradient_bucket_mb{25, "MB", "PyTorch DistributedDataParallel: bucket_cap_mb default"};
  // All-reduce on the GPU cluster by the tenant's own library with static
  // settings; link rates are the cluster's (Cluster::TrueBandwidthGBs).
  Figure nccl_alpha_s{2e-5, "s",
                      "assumption: the order of nccl-tests all_reduce_perf's small-message "
                      "time on 8 H100s"};
  Figure nccl_bus_efficiency{0.8, "share of the slowest link",
                             "assumption: nccl-tests ring busbw on 8 H100 SXM near 360 of "
                             "NVLink 4's 450 GB/s a direction"};
  Figure net_gbs_per_gpu{50, "GB/s per GPU",
                         "Llama 3 (arXiv 2407.21783) 3.3.1 and DGX H100: 400 Gb/s per GPU"};
  Figure net_alpha_s{5e-5, "s", "assumption: an all-reduce across hosts over RDMA"};
  // The provider's collectives against the tenant's own, measured by
  // service_allreduce_bench against Open MPI's shared-memory all-reduce and
  // by cluster_allreduce_bench (the device and flat Gloo over TCP against
  // the shaped link's rate), applied to the figures above. The latency
  // carries over as time added per call: the daemon's control path is CPU
  // work that a GPU does not shorten.
  Figure provider_added_latency_s{1e-5, "s", "assumption: a call through the provider's daemon"};
  Figure provider_busbw_ratio{1, "x", "assumption: as the tenant's own library"};
  Figure provider_net_alpha_ratio{1, "x", "assumption: as Gloo over TCP"};
  Figure provider_net_efficiency{0.9, "share of the link", "assumption: near the link's rate"};
  Figure standard_net_efficiency{0.9, "share of the link",
                                 "assumption: Gloo over TCP near the link's rate"};
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
