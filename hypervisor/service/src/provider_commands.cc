// The provider's operator commands (control API): the scheduler's inventory
// and allocations, simulated device failures, tenant domains and the open
// negotiations. Each command is declared once, in Provider::Commands.
#include <set>

#include "hz/service/provider.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;
namespace ev = hz::events;
namespace sc = hz::scheduler;

namespace {

const char* ReservationStateName(ev::ReservationState s) {
  switch (s) {
    case ev::ReservationState::kAccepted:
      return "accepted";
    case ev::ReservationState::kActive:
      return "active";
    case ev::ReservationState::kEnded:
      return "ended";
    case ev::ReservationState::kReleased:
      return "released";
    case ev::ReservationState::kRevoked:
      return "revoked";
  }
  return "unknown";
}

// Operator input: unknown fields are errors, as everywhere in the control API.
std::string OnlyFields(const json& req, std::initializer_list<const char*> allowed) {
  std::set<std::string> ok = {"cmd", "id"};
  for (const char* a : allowed) ok.insert(a);
  for (const auto& [k, v] : req.items()) {
    if (ok.count(k) == 0) return "unknown field \"" + k + "\"";
  }
  return {};
}

std::string GetString(const json& req, const char* key, std::string* out) {
  auto it = req.find(key);
  if (it == req.end() || !it->is_string())
    return std::string("field \"") + key + "\" must be a string";
  *out = it->get<std::string>();
  return {};
}

std::string GetUInt(const json& req, const char* key, uint64_t def, uint64_t max, uint64_t* out) {
  auto it = req.find(key);
  if (it == req.end()) {
    *out = def;
    return {};
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return std::string("field \"") + key + "\" must be an integer in 0.." + std::to_string(max);
  }
  *out = it->get<uint64_t>();
  return {};
}

std::string Why(const ev::Status& s) {
  return s.message().empty() ? s.ToString() : s.message();
}

}  // namespace

std::span<const CommandSpec<Provider>> Provider::Commands() {
  static const CommandSpec<Provider> kCommands[] = {
      {"inventory", false, &Provider::Inventory},
      {"allocation.list", false, &Provider::AllocationList},
      {"alloc", true, &Provider::Alloc},
      {"release", false, &Provider::ReleaseAllocation},
      {"device.fail", false, &Provider::DeviceFail},
      {"device.degrade", false, &Provider::DeviceDegrade},
      {"device.repair", false, &Provider::DeviceRepair},
      {"tenant.domain", true, &Provider::TenantDomain},
      {"negotiation.list", false, &Provider::NegotiationList},
  };
  return kCommands;
}

std::string Provider::Inventory(const json& req, json* out) {
  if (std::string err = OnlyFields(req, {}); !err.empty()) return err;
  *out = sched_->Inventory();
  return {};
}

std::string Provider::AllocationList(const json& req, json* out) {
  if (std::string err = OnlyFields(req, {}); !err.empty()) return err;
  *out = sched_->Allocations();
  return {};
}

std::string Provider::NegotiationList(const json& req, json* out) {
  if (std::string err = OnlyFields(req, {}); !err.empty()) return err;
  *out = NegotiationJson();
  return {};
}

std::string Provider::TenantDomain(const json& req, json* out) {
  std::string err;
  if (!(err = OnlyFields(req, {"tenant", "domain"})).empty()) return err;
  std::string tenant, domain;
  if (!(err = GetString(req, "tenant", &tenant)).empty()) return err;
  if (!(err = GetString(req, "domain", &domain)).empty()) return err;
  ev::Status s = sched_->BindTenant(tenant, domain);
  if (!s.ok()) return Why(s);
  spdlog::info("event=tenant_domain tenant={} domain={}", tenant, domain);
  *out = {{"tenant", tenant}, {"domain", domain}};
  return {};
}

// {"tenant": T, "gpus": N, "nics": M, "locality": "any" | "host" | "group"}
std::string Provider::Alloc(const json& req, json* out) {
  std::string err;
  if (!(err = OnlyFields(req, {"tenant", "gpus", "nics", "locality"})).empty()) return err;
  std::string tenant, locality = "any";
  uint64_t gpus = 0, nics = 0;
  if (!(err = GetString(req, "tenant", &tenant)).empty()) return err;
  if (!(err = GetUInt(req, "gpus", 0, 65535, &gpus)).empty()) return err;
  if (!(err = GetUInt(req, "nics", 0, 65535, &nics)).empty()) return err;
  if (req.contains("locality") && !(err = GetString(req, "locality", &locality)).empty()) {
    return err;
  }
  sc::Request r;
  r.gpus = static_cast<uint32_t>(gpus);
  r.nics = static_cast<uint32_t>(nics);
  if (locality == "any") {
    r.locality = HZ_LOC_ANY;
  } else if (locality == "host" || locality == "same_host") {
    r.locality = HZ_LOC_SAME_HOST;
  } else if (locality == "group" || locality == "same_group") {
    r.locality = HZ_LOC_SAME_GROUP;
  } else {
    return "field \"locality\" must be any, host or group";
  }
  if (r.gpus + r.nics == 0) return "ask for at least one device (gpus or nics)";
  uint64_t id = 0;
  std::lock_guard<std::mutex> lock(mu_);
  ev::Status s = sched_->Allocate(tenant, r, &id);
  if (!s.ok()) return Why(s);
  SyncLocked();
  spdlog::info("event=allocated tenant={} id={} gpus={} nics={} locality={}", tenant, id, gpus,
               nics, locality);
  *out = {{"id", id}, {"tenant", tenant}};
  for (const json& a : sched_->Allocations()) {
    if (a.value("id", uint64_t{0}) == id) (*out)["devices"] = a["devices"];
  }
  return {};
}

std::string Provider::ReleaseAllocation(const json& req, json* out) {
  std::string err;
  if (!(err = OnlyFields(req, {"allocation"})).empty()) return err;
  uint64_t id = 0;
  if (!req.contains("allocation")) return "missing field \"allocation\"";
  if (!(err = GetUInt(req, "allocation", 0, UINT64_MAX, &id)).empty()) return err;
  std::lock_guard<std::mutex> lock(mu_);
  ev::Status s = sched_->Release(id);
  if (!s.ok()) return Why(s);
  SyncLocked();
  spdlog::info("event=released id={}", id);
  *out = json::object();
  return {};
}

std::string Provider::DeviceFail(const json& req, json* out) {
  return ChangeDevice("device.fail", req, out);
}

std::string Provider::DeviceDegrade(const json& req, json* out) {
  return ChangeDevice("device.degrade", req, out);
}

std::string Provider::DeviceRepair(const json& req, json* out) {
  return ChangeDevice("device.repair", req, out);
}

// device.fail / device.degrade / device.repair {"bdf": ..., "errors": N}
std::string Provider::ChangeDevice(const std::string& cmd, const json& req, json* out) {
  std::string err;
  if (!(err = OnlyFields(req, {"bdf", "errors"})).empty()) return err;
  std::string bdf;
  uint64_t errors = 0;
  if (!(err = GetString(req, "bdf", &bdf)).empty()) return err;
  if (!(err = GetUInt(req, "errors", 1, UINT32_MAX, &errors)).empty()) return err;
  std::lock_guard<std::mutex> lock(mu_);
  ev::Status s;
  if (cmd == "device.fail") {
    s = sched_->MarkFailed(bdf, errors, Now());
  } else if (cmd == "device.degrade") {
    s = sched_->MarkDegraded(bdf, errors);
  } else {
    if (req.contains("errors")) return "unknown field \"errors\"";
    s = sched_->Repair(bdf);
  }
  if (!s.ok()) return Why(s);
  SyncLocked();
  spdlog::info("event={} bdf={}", cmd == "device.fail" ? "device_failed" : cmd, bdf);
  *out = {{"bdf", bdf}};
  return {};
}

json Provider::NegotiationJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json reservations = json::array();
  for (const ev::ReservationInfo& r : engine_->Reservations()) {
    reservations.push_back({{"id", r.id},
                            {"tenant", r.tenant},
                            {"negotiation", r.negotiation_id},
                            {"kind", r.kind == HZ_DEV_GPU ? "gpu" : "nic"},
                            {"count", r.count},
                            {"start_s", r.start_s},
                            {"duration_s", r.duration_s},
                            {"state", ReservationStateName(r.state)}});
  }
  json offers = json::array();
  for (const ev::OfferInfo& o : engine_->Offers()) {
    offers.push_back({{"id", o.offer.offer_id},
                      {"tenant", o.tenant},
                      {"negotiation", o.negotiation_id},
                      {"count", o.offer.count},
                      {"start_s", o.offer.start_s},
                      {"duration_s", o.offer.duration_s},
                      {"expires_s", o.offer.expires_s}});
  }
  return {{"reservations", reservations}, {"offers", offers}};
}

}  // namespace hz::service
