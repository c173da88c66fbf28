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

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/negotiation/negotiation.h"
#include "protocol/harmonaize.h"

namespace hz::service {

class ProviderBackend {
 public:
  // Receives the decision of a request the device keeps pending.
  using DecisionFn = std::function<void(const negotiation::Decision&)>;

  virtual ~ProviderBackend() = default;

  // TOPOLOGY_GET: the tenant's private summary.
  virtual Status Summary(const TenantId& tenant, std::vector<uint8_t>* bytes) = 0;

  // NEG_REQUEST / NEG_COUNTER: queued; done runs (any thread) at the
  // decision point. weight, max_priority and max_open (open negotiations;
  // 0: the service's default) are the tenant's operator policy.
  virtual Status Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority,
                        uint32_t max_open, const hz_neg_request& request, DecisionFn done) = 0;
  virtual Status Counter(const TenantId& tenant, uint64_t negotiation_id,
                         const hz_neg_request& request, DecisionFn done) = 0;
  virtual Status Accept(const TenantId& tenant, uint64_t offer_id, uint64_t* reservation_id) = 0;
  virtual Status Decline(const TenantId& tenant, uint64_t negotiation_id) = 0;
  virtual Status Release(const TenantId& tenant, const hz_neg_release_args& args) = 0;

  // HINT_DECLARE.
  virtual Status DeclareHint(const TenantId& tenant, const hz_hint_declare_args& args,
                             hz_hint_declare_result* result) = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_PROVIDER_BACKEND_H_
