// What the per-VM device needs for energy slack (SPEC.md §7.10): the host's
// energy conditions, which the service keeps (HostConditions). Tests
// substitute their own. Requests name the VM's tenant, never anything the
// guest chose. Every method may be called from any thread.
#ifndef HZ_SERVICE_ENERGY_BACKEND_H_
#define HZ_SERVICE_ENERGY_BACKEND_H_

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "protocol/harmonaize.h"

namespace hz::service {

class EnergyBackend {
 public:
  virtual ~EnergyBackend() = default;
  // ENERGY_SLACK: replaces (or, with slowdown_pct 0, withdraws) the
  // tenant's declaration. kInvalidArgument for values SPEC §7.10 refuses.
  virtual Status DeclareSlack(const TenantId& tenant, const hz_energy_slack_args& args,
                              hz_energy_slack_result* result) = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_ENERGY_BACKEND_H_
