#include "hz/experiment/model.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace hz::experiment {

std::vector<NamedFigure> Model::Figures() {
  return {
      {"ckpt_gb_per_gpu", &ckpt_gb_per_gpu},
      {"tenant_write_fsync_gbps", &tenant_write_fsync_gbps},
      {"provider_stall_speedup", &provider_stall_speedup},
      {"persist_efficiency", &persist_efficiency},
      {"peer_copy_gbps", &peer_copy_gbps},
      {"restore_gbps", &restore_gbps},
      {"restart_s", &restart_s},
      {"standard_ckpt_interval_s", &standard_ckpt_interval_s},
      {"poll_interval_s", &poll_interval_s},
      {"push_latency_s", &push_latency_s},
      {"maintenance_notice_s", &maintenance_notice_s},
      {"early_maintenance_notice_s", &early_maintenance_notice_s},
      {"preemption_notice_s", &preemption_notice_s},
      {"failure_warning_s", &failure_warning_s},
      {"predictable_failure_share", &predictable_failure_share},
      {"gpu_failures_per_gpu_hour", &gpu_failures_per_gpu_hour},
      {"host_failures_per_host_hour", &host_failures_per_host_hour},
      {"maintenance_per_host_hour", &maintenance_per_host_hour},
      {"preemptions_per_job_hour", &preemptions_per_job_hour},
      {"repair_s", &repair_s},
      {"maintenance_s", &maintenance_s},
      {"gpu_bf16_tflops", &gpu_bf16_tflops},
      {"mfu", &mfu},
      {"sequences_per_iteration", &sequences_per_iteration},
      {"sequence_tokens", &sequence_tokens},
      {"gradient_bucket_mb", &gradient_bucket_mb},
      {"nccl_alpha_s", &nccl_alpha_s},
      {"nccl_bus_efficiency", &nccl_bus_efficiency},
      {"net_gbs_per_gpu", &net_gbs_per_gpu},
      {"net_alpha_s", &net_alpha_s},
      {"provider_added_latency_s", &provider_added_latency_s},
      {"provider_busbw_ratio", &provider_busbw_ratio},
      {"provider_net_alpha_ratio", &provider_net_alpha_ratio},
      {"provider_net_efficiency", &provider_net_efficiency},
      {"standard_net_efficiency", &standard_net_efficiency},
      {"gpu_busy_w", &gpu_busy_w},
      {"gpu_idle_w", &gpu_idle_w},
  };
}

Status ApplyCalibration(const std::string& json_text, Model* model,
                        std::vector<std::string>* applied) {
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::InvalidArgument("calibration: not a JSON object");
  Model updated = *model;
  std::vector<std::string> keys;
  std::vector<NamedFigure> figures = updated.Figures();
  for (const auto& [key, entry] : doc.items()) {
    auto it = std::find_if(figures.begin(), figures.end(),
                           [&name = key](const NamedFigure& f) { return name == f.key; });
    if (it == figures.end()) return Status::InvalidArgument("calibration: unknown figure " + key);
    const nlohmann::json& v = entry.is_object() ? entry.value("value", nlohmann::json()) : entry;
    if (!v.is_number() || !(v.get<double>() > 0)) {
      return Status::InvalidArgument("calibration: " + key + " must be a positive number");
    }
    it->figure->value = v.get<double>();
    keys.push_back(key);
    if (entry.is_object() && entry.contains("source") && entry["source"].is_string())
      it->figure->source = entry["source"].get<std::string>();
  }
  *model = std::move(updated);
  if (applied != nullptr) *applied = std::move(keys);
  return Status::Ok();
}

}  // namespace hz::experiment
