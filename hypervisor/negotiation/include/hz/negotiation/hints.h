// Batch-size hints. A tenant declares [min_batch, max_batch] and a step; the
// suggestion is the largest min_batch + k * step that is at most
// max_batch * n_now / n_peak (n_now: devices held now, n_peak: most held since
// the declaration), and at least min_batch. A HINT event goes out whenever
// the allocation changes.
#ifndef HZ_NEGOTIATION_HINTS_H_
#define HZ_NEGOTIATION_HINTS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_spec.h"
#include "protocol/harmonaize.h"

namespace hz::negotiation {

// The pure rule; n_peak == 0 yields min_batch.
uint32_t SuggestBatch(uint32_t min_batch, uint32_t max_batch, uint32_t step, uint32_t n_now,
                      uint32_t n_peak);

class HintEngine {
 public:
  explicit HintEngine(events::EventSink* sink) : sink_(sink) {}

  // HINT_DECLARE: min > max, step 0 or non-zero flags are invalid. Starts a new
  // declaration (n_peak = devices now).
  Status Declare(const TenantId& tenant, const hz_hint_declare_args& args,
                 hz_hint_declare_result* result);
  // The tenant now holds `devices`; publishes a HINT event when it changed and
  // the tenant has a declaration.
  void SetDevices(const TenantId& tenant, uint32_t devices);
  // Current suggestion; kNotFound without a declaration.
  Status Current(const TenantId& tenant, events::HintPayload* hint) const;
  // The tenant is removed: its declaration and device count are forgotten.
  void Forget(const TenantId& tenant);

 private:
  struct TenantHint {
    bool declared = false;
    hz_hint_declare_args args{};
    uint32_t devices = 0;
    uint32_t peak = 0;
  };
  static events::HintPayload Compute(const TenantHint& t);

  events::EventSink* sink_;
  mutable std::mutex mu_;
  std::map<TenantId, TenantHint> tenants_;
};

}  // namespace hz::negotiation

#endif  // HZ_NEGOTIATION_HINTS_H_
