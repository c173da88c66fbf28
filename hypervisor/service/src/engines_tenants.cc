// The engines' view of a tenant: its weight, and what they keep under its name (tenant.remove).
#include "hz/checkpoint/engine.h"
#include "hz/events/event_bus.h"
#include "hz/service/engines.h"
#include "spdlog/spdlog.h"

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

void Engines::SetTenantWeight(const TenantId& tenant, uint32_t weight) {
  if (!ckpt_) return;
  checkpoint::TenantLimits limits;
  limits.staging_bytes = config_.ckpt_tenant_staging_bytes;
  limits.disk_bytes = config_.ckpt_tenant_disk_bytes;
  limits.weight = weight;
  if (Status s = ckpt_->SetLimits(tenant, limits); !s.ok()) {
    spdlog::warn("event=ckpt_weight_not_applied tenant={} error=\"{}\"", tenant.name(),
                 s.ToString());
  }
}

Status Engines::ForgetTenant(const TenantId& tenant) {
  if (ckpt_) {
    if (Status s = ckpt_->ForgetTenant(tenant); !s.ok()) return s;
  }
  if (bus_) return bus_->Forget(tenant);
  return Status::Ok();
}

}  // namespace hz::service
