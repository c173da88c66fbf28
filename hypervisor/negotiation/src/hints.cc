#include "hz/negotiation/hints.h"

namespace hz::negotiation {

uint32_t SuggestBatch(uint32_t min_batch, uint32_t max_batch, uint32_t step, uint32_t n_now,
                      uint32_t n_peak) {
  if (n_peak == 0 || step == 0 || min_batch > max_batch) return min_batch;
  uint64_t limit = static_cast<uint64_t>(max_batch) * n_now / n_peak;
  if (limit > max_batch) limit = max_batch;  // n_now <= n_peak normally; be safe
  if (limit <= min_batch) return min_batch;
  uint64_t k = (limit - min_batch) / step;
  return static_cast<uint32_t>(min_batch + k * step);
}

events::HintPayload HintEngine::Compute(const TenantHint& t) {
  events::HintPayload p{};
  p.min_batch = t.args.min_batch;
  p.max_batch = t.args.max_batch;
  p.step = t.args.step;
  p.devices_now = t.devices;
  p.devices_peak = t.peak;
  p.suggested = SuggestBatch(t.args.min_batch, t.args.max_batch, t.args.step, t.devices, t.peak);
  return p;
}

Status HintEngine::Declare(const TenantId& tenant, const hz_hint_declare_args& args,
                           hz_hint_declare_result* result) {
  if (args.flags != 0) return Status::InvalidArgument("hint flags must be zero");
  if (args.step == 0) return Status::InvalidArgument("hint step is zero");
  if (args.min_batch > args.max_batch) return Status::InvalidArgument("min_batch > max_batch");
  std::lock_guard<std::mutex> lock(mu_);
  TenantHint& t = tenants_[tenant];
  t.declared = true;
  t.args = args;
  t.peak = t.devices;
  *result = hz_hint_declare_result{};
  result->suggested = Compute(t).suggested;
  return Status::Ok();
}

void HintEngine::SetDevices(const TenantId& tenant, uint32_t devices) {
  events::HintPayload hint{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TenantHint& t = tenants_[tenant];
    if (t.devices == devices) return;
    t.devices = devices;
    if (devices > t.peak) t.peak = devices;
    if (!t.declared) return;
    hint = Compute(t);
  }
  // A failed publish is not fatal to the allocation change; the next change retries.
  (void)sink_->Publish(tenant, events::MakeHint(hint), nullptr);
}

Status HintEngine::Current(const TenantId& tenant, events::HintPayload* hint) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end() || !it->second.declared) {
    return Status::NotFound("no batch-size declaration");
  }
  *hint = Compute(it->second);
  return Status::Ok();
}

void HintEngine::Forget(const TenantId& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  tenants_.erase(tenant);
}

}  // namespace hz::negotiation
