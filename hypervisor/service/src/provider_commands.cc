// The provider's operator commands (control API): the scheduler's inventory
// and allocations, simulated device failures, tenant domains and the open
// negotiations. Each command is declared once, in Provider::Commands.
#include "command_args.h"
#include "hz/service/provider.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;
namespace neg = hz::negotiation;
namespace sc = hz::scheduler;

namespace {

const char* ReservationStateName(neg::ReservationState s) {
  switch (s) {
    case neg::ReservationState::kAccepted:
      return "accepted";
    case neg::ReservationState::kActive:
      return "active";
    case neg::ReservationState::kEnded:
      return "ended";
    case neg::ReservationState::kReleased:
      return "released";
    case neg::ReservationState::kRevoked:
      return "revoked";
  }
  return "unknown";
}

}  // namespace

std::span<const CommandSpec<Provider>> Provider::Commands() {
  static const CommandSpec<Provider> kCommands[] = {
      {"inventory", false, &Provider::Inventory},
      {"allocation.list", false, &Provider::AllocationList},
      {"alloc", true, &Provider::Alloc},
      {"release", false, &Provider::ReleaseAllocation},
      {"allocation.spread", false, &Provider::SpreadList},
      {"device.fail", false, &Provider::DeviceFail},
      {"device.degrade", false, &Provider::DeviceDegrade},
      {"device.repair", false, &Provider::DeviceRepair},
      {"tenant.domain", true, &Provider::TenantDomain},
      {"negotiation.list", false, &Provider::NegotiationList},
  };
  return kCommands;
}

CommandResult Provider::Inventory(const json& req) {
  if (Status err = OnlyFields(req, {}); !err.ok()) return err;
  return sched_->Inventory();
}

CommandResult Provider::AllocationList(const json& req) {
  if (Status err = OnlyFields(req, {}); !err.ok()) return err;
  return sched_->Allocations();
}

CommandResult Provider::NegotiationList(const json& req) {
  if (Status err = OnlyFields(req, {}); !err.ok()) return err;
  return NegotiationJson();
}

CommandResult Provider::TenantDomain(const json& req) {
  Status err;
  if (!(err = OnlyFields(req, {"tenant", "domain"})).ok()) return err;
  std::string tenant, domain;
  if (!(err = GetString(req, "tenant", &tenant)).ok()) return err;
  if (!(err = GetString(req, "domain", &domain)).ok()) return err;
  Status s = sched_->BindTenant(TenantId(tenant), domain);
  if (!s.ok()) return s;
  spdlog::info("event=tenant_domain tenant={} domain={}", tenant, domain);
  return json{{"tenant", tenant}, {"domain", domain}};
}

namespace {

// "any", "host" or "group" (the operator's words for hz_locality).
bool ParseLocality(const std::string& locality, uint8_t* out) {
  if (locality == "any") {
    *out = HZ_LOC_ANY;
  } else if (locality == "host" || locality == "same_host") {
    *out = HZ_LOC_SAME_HOST;
  } else if (locality == "group" || locality == "same_group") {
    *out = HZ_LOC_SAME_GROUP;
  } else {
    return false;
  }
  return true;
}

}  // namespace

CommandResult Provider::Alloc(const json& req) {
  Status err;
  if (!(err = OnlyFields(req, {"tenant", "gpus", "nics", "locality", "this_host_only"})).ok()) {
    return err;
  }
  std::string tenant, locality = "any";
  uint64_t gpus = 0, nics = 0;
  bool here_only = false;
  if (!(err = GetString(req, "tenant", &tenant)).ok()) return err;
  if (!(err = GetUInt(req, "gpus", 0, 65535, &gpus)).ok()) return err;
  if (!(err = GetUInt(req, "nics", 0, 65535, &nics)).ok()) return err;
  if (!(err = GetBool(req, "this_host_only", false, &here_only)).ok()) return err;
  if (req.contains("locality") && !(err = GetString(req, "locality", &locality)).ok()) return err;
  sc::Request r;
  r.gpus = static_cast<uint32_t>(gpus);
  r.nics = static_cast<uint32_t>(nics);
  if (!ParseLocality(locality, &r.locality)) {
    return Status::InvalidArgument("field \"locality\" must be any, host or group");
  }
  if (r.gpus + r.nics == 0) {
    return Status::InvalidArgument("ask for at least one device (gpus or nics)");
  }
  CommandResult here = AllocHere(tenant, r);
  // What this host cannot hold (or place now, under maintenance) may be
  // spread over the cluster's hosts.
  const bool cannot_here = !here.ok() && (here.status().IsLimit() || here.status().IsBusy());
  if (!cannot_here || here_only || !spread_) return here;
  CommandResult spread = spread_->Allocate(tenant, r);
  if (spread.ok()) return spread;
  return Status(spread.status().code(), "not on this host (" + here.status().message() +
                                            ") nor across the cluster (" +
                                            spread.status().message() + ")");
}

CommandResult Provider::AllocHere(const std::string& tenant, const sc::Request& r) {
  uint64_t id = 0;
  std::lock_guard<std::mutex> lock(mu_);
  Status s = sched_->Allocate(TenantId(tenant), r, &id);
  if (!s.ok()) return s;
  SyncLocked();
  spdlog::info("event=allocated tenant={} id={} gpus={} nics={} locality={}", tenant, id, r.gpus,
               r.nics, r.locality);
  json out = {{"id", id}, {"tenant", tenant}};
  for (const json& a : sched_->Allocations()) {
    if (a.value("id", uint64_t{0}) == id) out["devices"] = a["devices"];
  }
  return out;
}

// {"allocation": ID} on this host, or {"spread": ID} on every host it spans.
CommandResult Provider::ReleaseAllocation(const json& req) {
  Status err;
  if (!(err = OnlyFields(req, {"allocation", "spread"})).ok()) return err;
  uint64_t id = 0;
  if (req.contains("spread") && !req.contains("allocation")) {
    if (!(err = GetUInt(req, "spread", 0, UINT64_MAX, &id)).ok()) return err;
    if (!spread_) return Status::NotFound("no spread allocation: this host is not in a cluster");
    return spread_->Release(id);
  }
  if (!req.contains("allocation") || req.contains("spread")) {
    return Status::InvalidArgument("give one of the fields \"allocation\" and \"spread\"");
  }
  if (!(err = GetUInt(req, "allocation", 0, UINT64_MAX, &id)).ok()) return err;
  // Without mu_: the release waits for the guest to let go of the devices,
  // and the scheduler locks itself.
  Status s = sched_->Release(id);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SyncLocked();
  }
  spdlog::info("event=released id={}", id);
  return json::object();
}

CommandResult Provider::SpreadList(const json& req) {
  if (Status err = OnlyFields(req, {}); !err.ok()) return err;
  return spread_ ? spread_->List() : json::array();
}

CommandResult Provider::DeviceFail(const json& req) {
  return ChangeDevice("device.fail", req);
}

CommandResult Provider::DeviceDegrade(const json& req) {
  return ChangeDevice("device.degrade", req);
}

CommandResult Provider::DeviceRepair(const json& req) {
  return ChangeDevice("device.repair", req);
}

// device.fail / device.degrade / device.repair {"bdf": ..., "errors": N}
CommandResult Provider::ChangeDevice(const std::string& cmd, const json& req) {
  Status err;
  if (!(err = OnlyFields(req, {"bdf", "errors"})).ok()) return err;
  std::string bdf;
  uint64_t errors = 0;
  if (!(err = GetString(req, "bdf", &bdf)).ok()) return err;
  if (!(err = GetUInt(req, "errors", 1, UINT32_MAX, &errors)).ok()) return err;
  if (cmd == "device.repair" && req.contains("errors")) {
    return Status::InvalidArgument("unknown field \"errors\"");
  }
  // The scheduler without mu_: a failed device leaves its VM first, which
  // waits for the guest.
  Status s;
  std::optional<sc::DeviceLoss> lost;
  if (cmd == "device.fail") {
    StatusOr<sc::DeviceLoss> loss = sched_->MarkFailed(bdf, errors);
    s = loss.status();
    if (loss.ok()) lost = *loss;
  } else if (cmd == "device.degrade") {
    s = sched_->MarkDegraded(bdf, errors);
  } else {
    s = sched_->Repair(bdf);
  }
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost) OfferReplacementLocked(*lost, Now());
    SyncLocked();
  }
  spdlog::info("event={} bdf={}", cmd == "device.fail" ? "device_failed" : cmd, bdf);
  return json{{"bdf", bdf}};
}

json Provider::NegotiationJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json reservations = json::array();
  for (const neg::ReservationInfo& r : engine_->Reservations()) {
    reservations.push_back({{"id", r.id},
                            {"tenant", r.tenant.name()},
                            {"negotiation", r.negotiation_id},
                            {"kind", r.kind == HZ_DEV_GPU ? "gpu" : "nic"},
                            {"count", r.count},
                            {"start_s", r.start_s},
                            {"duration_s", r.duration_s},
                            {"state", ReservationStateName(r.state)}});
  }
  json offers = json::array();
  for (const neg::OfferInfo& o : engine_->Offers()) {
    offers.push_back({{"id", o.offer.offer_id},
                      {"tenant", o.tenant.name()},
                      {"negotiation", o.negotiation_id},
                      {"count", o.offer.count},
                      {"start_s", o.offer.start_s},
                      {"duration_s", o.offer.duration_s},
                      {"expires_s", o.offer.expires_s}});
  }
  return {{"reservations", reservations}, {"offers", offers}};
}

}  // namespace hz::service
