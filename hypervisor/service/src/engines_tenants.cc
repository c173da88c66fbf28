// The engines' view of a tenant: its weight and checkpoint caps, and what they keep under its name
// (tenant.remove).
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

Status Engines::CheckTenantLimits(const TenantSpec& spec) const {
  if (disk_cap_ != 0 && spec.ckpt_disk_bytes > disk_cap_) {
    return Status::InvalidArgument("disk_bytes " + std::to_string(spec.ckpt_disk_bytes) +
                                   " is more than the disk space of all checkpoints (" +
                                   std::to_string(disk_cap_) + " bytes, [checkpoint] disk_bytes)");
  }
  if (spec.ckpt_staging_bytes > config_.ckpt_staging_bytes) {
    return Status::InvalidArgument("staging_bytes " + std::to_string(spec.ckpt_staging_bytes) +
                                   " is more than the staging pool (" +
                                   std::to_string(config_.ckpt_staging_bytes) +
                                   " bytes, [checkpoint] staging_bytes)");
  }
  return Status::Ok();
}

void Engines::SetTenantLimits(const TenantSpec& spec) {
  if (!ckpt_) return;
  checkpoint::TenantLimits limits;
  limits.staging_bytes =
      spec.ckpt_staging_bytes != 0 ? spec.ckpt_staging_bytes : config_.ckpt_tenant_staging_bytes;
  limits.disk_bytes =
      spec.ckpt_disk_bytes != 0 ? spec.ckpt_disk_bytes : config_.ckpt_tenant_disk_bytes;
  limits.weight = spec.weight;
  if (Status s = ckpt_->SetLimits(TenantId(spec.name), limits); !s.ok()) {
    spdlog::warn("event=ckpt_limits_not_applied tenant={} error=\"{}\"", spec.name, s.ToString());
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
