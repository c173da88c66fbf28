// What the per-VM device needs from the provider side (SPEC §7.7-§7.9): the
// scheduler's topology summaries, the negotiation engine and the hint
// engine. The service runs it on Provider; tests substitute their own.
// Requests name the VM's tenant, never anything the guest chose, so a tenant
// reaches only its own objects. Every method may be called from any thread.
#ifndef HZ_SERVICE_PROVIDER_BACKEND_H_
#define HZ_SERVICE_PROVIDER_BACKEND_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hz/events/negotiation.h"
#include "hz/events/status.h"
#include "protocol/harmonaize.h"

namespace hz::service {

class ProviderBackend {
 public:
  // Receives the decision of a request the device keeps pending.
  using DecisionFn = std::function<void(const events::Decision&)>;

  virtual ~ProviderBackend() = default;

  // TOPOLOGY_GET: the tenant's private summary.
  virtual events::Status Summary(const std::string& tenant, std::vector<uint8_t>* bytes) = 0;

  // NEG_REQUEST / NEG_COUNTER: queued; done runs (any thread) at the
  // decision point. weight and max_priority are the tenant's operator policy.
  virtual events::Status Submit(const std::string& tenant, uint32_t weight, uint8_t max_priority,
                                const hz_neg_request& request, DecisionFn done) = 0;
  virtual events::Status Counter(const std::string& tenant, uint64_t negotiation_id,
                                 const hz_neg_request& request, DecisionFn done) = 0;
  virtual events::Status Accept(const std::string& tenant, uint64_t offer_id,
                                uint64_t* reservation_id) = 0;
  virtual events::Status Decline(const std::string& tenant, uint64_t negotiation_id) = 0;
  virtual events::Status Release(const std::string& tenant, const hz_neg_release_args& args) = 0;

  // HINT_DECLARE.
  virtual events::Status DeclareHint(const std::string& tenant, const hz_hint_declare_args& args,
                                     hz_hint_declare_result* result) = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_PROVIDER_BACKEND_H_
