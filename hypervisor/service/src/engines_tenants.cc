// What the engines keep under a tenant's name, for tenant.remove.
#include "hz/checkpoint/engine.h"
#include "hz/events/event_bus.h"
#include "hz/service/engines.h"

namespace hz::service {

Status Engines::TenantData(const TenantId& tenant, std::vector<std::string>* held) const {
  held->clear();
  if (ckpt_ && !ckpt_->Streams(tenant).empty()) held->push_back("checkpoints");
  if (bus_) {
    StatusOr<bool> events = bus_->HoldsEvents(tenant);
    if (!events.ok()) return events.status();
    if (*events) held->push_back("events");
  }
  return Status::Ok();
}

Status Engines::ForgetTenant(const TenantId& tenant) {
  if (ckpt_) {
    if (Status s = ckpt_->ForgetTenant(tenant); !s.ok()) return s;
  }
  if (bus_) return bus_->Forget(tenant);
  return Status::Ok();
}

}  // namespace hz::service
