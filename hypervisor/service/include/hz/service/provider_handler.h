// TOPOLOGY_GET, NEG_* and HINT_DECLARE (SPEC §7.7-§7.9): the provider side
// of one device, on a ProviderBackend. The scheduler, the negotiation engine
// and the hint engine are shared by every VM; requests name the VM's tenant,
// never anything the guest chose, so a tenant only reaches its own objects.
//
// NEG_REQUEST and NEG_COUNTER are validated and queued at once and complete
// at the decision point with the offers (SPEC §9.3). Until then they are in
// flight like a collective: a reset forgets them, a drain answers
// HZ_S_ESHUTDOWN.
#ifndef HZ_SERVICE_PROVIDER_HANDLER_H_
#define HZ_SERVICE_PROVIDER_HANDLER_H_

#include <cstdint>
#include <vector>

#include "hz/service/family_handler.h"
#include "hz/service/provider_backend.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"
#include "vdev/device.h"

namespace hz::service {

class ProviderHandler : public FamilyHandler {
 public:
  ProviderHandler(ProviderBackend* backend, const HandlerContext& ctx, const Tenant& tenant);

  uint64_t Features() const override;
  // A new session keeps its negotiations waiting; otherwise their ring is gone.
  void EndSession(SessionEnd end) override;
  void Drain() override;

  Reply HandleTopology(const Request& req);
  Reply HandleNegotiation(const vdev::Queue& queue, const Request& req);
  Reply HandleHint(const Request& req);

 private:
  Reply Accept(const Request& req);
  // NEG_REQUEST (counter_id 0) or NEG_COUNTER: waits for the decision point.
  Reply Wait(const vdev::Queue& queue, const Request& req, uint64_t counter_id,
             const hz_neg_request& r);
  void OnDecision(uint64_t id, const std::vector<uint8_t>& result);

  ProviderBackend* const backend_;  // null: no scheduler, negotiation or hints
  const HandlerContext ctx_;
  const Tenant& tenant_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_PROVIDER_HANDLER_H_
