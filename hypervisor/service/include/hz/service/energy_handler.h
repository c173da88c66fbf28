// ENERGY_SLACK (SPEC.md §7.10, version 1.1): the energy family of one
// device, on an EnergyBackend. It answers at once and keeps nothing in
// flight; the declaration is the tenant's, kept by the backend.
#ifndef HZ_SERVICE_ENERGY_HANDLER_H_
#define HZ_SERVICE_ENERGY_HANDLER_H_

#include <cstdint>

#include "hz/service/energy_backend.h"
#include "hz/service/family_handler.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"

namespace hz::service {

class EnergyHandler : public FamilyHandler {
 public:
  EnergyHandler(EnergyBackend* backend, const HandlerContext& ctx, const Tenant& tenant)
      : backend_(backend), ctx_(ctx), tenant_(tenant) {}

  uint64_t Features() const override { return backend_ ? (1ull << HZ_F_ENERGY) : 0; }
  void EndSession(SessionEnd) override {}  // nothing in flight
  void Drain() override {}

  Reply Handle(const Request& req);

 private:
  EnergyBackend* const backend_;  // null: energy conditions not served
  const HandlerContext ctx_;
  const Tenant& tenant_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_ENERGY_HANDLER_H_
