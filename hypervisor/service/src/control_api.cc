#include "hz/service/control_api.h"

#include <map>
#include <stdexcept>

#include "command_args.h"
#include "hz/service/request.h"

namespace hz::service {

namespace {

using json = nlohmann::json;

// A request error: becomes {"ok": false, "error": what, "status": code}.
// The code (a StatusCode) lets another host that forwarded the command act
// on the kind of failure, not only print it.
struct BadRequest : std::runtime_error {
  explicit BadRequest(const std::string& what, StatusCode c = StatusCode::kInvalidArgument)
      : std::runtime_error(what), code(c) {}
  StatusCode code;
};

void Check(const Status& s) {
  if (!s.ok()) throw BadRequest(OperatorError(s), s.code());
}

void CheckOnlyFields(const json& req, std::initializer_list<const char*> allowed) {
  Check(OnlyFields(req, allowed));
}

std::string Str(const json& req, const char* key) {
  auto it = req.find(key);
  if (it == req.end()) throw BadRequest(std::string("missing field \"") + key + "\"");
  if (!it->is_string()) throw BadRequest(std::string("field \"") + key + "\" must be a string");
  return it->get<std::string>();
}

// An optional string field: empty when absent.
std::string OptionalStr(const json& req, const char* key) {
  return req.contains(key) ? Str(req, key) : std::string();
}

uint64_t UInt(const json& req, const char* key, uint64_t def, uint64_t max) {
  auto it = req.find(key);
  if (it == req.end()) return def;
  if (!it->is_number_unsigned()) {
    throw BadRequest(std::string("field \"") + key + "\" must be a non-negative integer");
  }
  uint64_t v = it->get<uint64_t>();
  if (v > max) throw BadRequest(std::string("field \"") + key + "\" is too large");
  return v;
}

// A tenant's own checkpoint cap: absent (0) means the [checkpoint] default.
uint64_t OwnCap(const json& req, const char* key, const char* default_key) {
  uint64_t v = UInt(req, key, 0, INT64_MAX);
  if (v == 0 && req.contains(key)) {
    throw BadRequest(std::string("field \"") + key +
                     "\" must be at least 1 (leave it out for [checkpoint] " + default_key + ")");
  }
  return v;
}

uint16_t Priority(const json& req) {
  auto it = req.find("priority");
  if (it == req.end()) return HZ_PRIO_NORMAL;
  if (it->is_string()) {
    std::string p = it->get<std::string>();
    if (p == "low") return HZ_PRIO_LOW;
    if (p == "normal") return HZ_PRIO_NORMAL;
    if (p == "high") return HZ_PRIO_HIGH;
  } else if (it->is_number_unsigned() && it->get<uint64_t>() < HZ_PRIO_MAX) {
    return static_cast<uint16_t>(it->get<uint64_t>());
  }
  throw BadRequest("field \"priority\" must be low, normal or high");
}

// The tenant's feature allowance: a list of names of hz/service/features.h.
uint64_t Features(const json& req) {
  auto it = req.find("features");
  if (it == req.end()) return kEveryFeature;
  if (!it->is_array()) throw BadRequest("field \"features\" must be a list of feature names");
  std::vector<std::string> names;
  for (const json& n : *it) {
    if (!n.is_string()) throw BadRequest("field \"features\" must be a list of feature names");
    names.push_back(n.get<std::string>());
  }
  StatusOr<uint64_t> bits = ParseFeatures(names);
  Check(bits.status());
  return *bits;
}

const char* PriorityName(uint16_t p) {
  switch (p) {
    case HZ_PRIO_LOW:
      return "low";
    case HZ_PRIO_HIGH:
      return "high";
    default:
      return "normal";
  }
}

json TenantJson(const Tenant& t) {
  Tenant::Usage u = t.usage();
  return {{"name", t.name()},
          {"weight", t.spec().weight},
          {"priority", PriorityName(t.spec().priority)},
          {"max_regions", t.spec().limits.max_regions},
          {"max_region_bytes", t.spec().limits.max_region_bytes},
          {"max_extents", t.spec().limits.max_extents},
          {"max_open_negotiations", t.spec().max_open_negotiations},
          {"disk_bytes", t.spec().ckpt_disk_bytes},
          {"staging_bytes", t.spec().ckpt_staging_bytes},
          {"features", FeatureNamesOf(t.features())},
          {"latency_poll_us", t.spec().latency_poll_us ? json(*t.spec().latency_poll_us) : json()},
          {"regions", u.regions},
          {"region_bytes", u.region_bytes},
          {"extents", u.extents}};
}

}  // namespace

std::string OperatorError(const Status& status) {
  return status.message().empty() ? status.ToString() : status.message();
}

json ControlApi::DeviceJson(const DeviceInfo& d) {
  json comms = json::array();
  for (const auto& c : d.comms) {
    comms.push_back(
        {{"handle", c.handle}, {"comm_id", c.comm_id}, {"rank", c.rank}, {"nranks", c.nranks}});
  }
  return {{"connected", d.connected},    {"hello", d.hello},
          {"draining", d.draining},      {"features", d.features},
          {"session_id", d.session_id},  {"queues", d.queues_started},
          {"regions", d.regions},        {"region_bytes", d.region_bytes},
          {"communicators", comms},      {"requests", d.requests},
          {"errors", d.errors},          {"in_flight", d.in_flight},
          {"events_held", d.events_held}};
}

json ControlApi::Handle(const std::string& line) {
  json req;
  json id;
  try {
    req = json::parse(line);
  } catch (const json::exception&) {
    return {{"ok", false}, {"error", "malformed JSON"}};
  }
  try {
    if (!req.is_object()) throw BadRequest("a request must be a JSON object");
    if (req.contains("id")) id = req["id"];
    std::string cmd = Str(req, "cmd");
    json out = {{"ok", true}, {"result", Dispatch(cmd, req)}};
    if (!id.is_null()) out["id"] = id;
    return out;
  } catch (const BadRequest& e) {
    json out = {{"ok", false}, {"error", e.what()}, {"status", static_cast<int>(e.code)}};
    if (!id.is_null()) out["id"] = id;
    return out;
  } catch (const std::exception& e) {
    json out = {{"ok", false}, {"error", std::string("internal error: ") + e.what()}};
    if (!id.is_null()) out["id"] = id;
    return out;
  }
}

json ControlApi::Dispatch(const std::string& cmd, const json& req) {
  // The service's own commands; the engines' are in the target's registry.
  static const std::map<std::string, json (ControlApi::*)(const json&)> kCommands = {
      {"ping", &ControlApi::Ping},
      {"status", &ControlApi::GetStatus},
      {"tenant.create", &ControlApi::CreateTenant},
      {"tenant.list", &ControlApi::ListTenants},
      {"tenant.remove", &ControlApi::RemoveTenant},
      {"tenant.features", &ControlApi::SetTenantFeatures},
      {"vm.bind", &ControlApi::BindVm},
      {"vm.unbind", &ControlApi::UnbindVm},
      {"vm.attach", &ControlApi::AttachVm},
      {"vm.detach", &ControlApi::DetachVm},
      {"vm.list", &ControlApi::ListVms},
      {"comm.list", &ControlApi::ListComms},
      {"counters", &ControlApi::GetCounters},
      {"upgrade", &ControlApi::Upgrade},
  };
  if (auto it = kCommands.find(cmd); it != kCommands.end()) return (this->*it->second)(req);
  if (std::optional<CommandResult> result = target_->EngineCommand(cmd, req)) {
    Check(result->status());
    return **result;
  }
  throw BadRequest("unknown command \"" + cmd + "\"");
}

json ControlApi::Ping(const json& req) {
  CheckOnlyFields(req, {});
  return "pong";
}

json ControlApi::GetStatus(const json& req) {
  CheckOnlyFields(req, {});
  return target_->Status();
}

json ControlApi::CreateTenant(const json& req) {
  CheckOnlyFields(
      req, {"name", "weight", "priority", "max_regions", "max_region_bytes", "max_extents",
            "max_open_negotiations", "disk_bytes", "staging_bytes", "features", "latency_poll_us"});
  TenantSpec spec;
  spec.name = Str(req, "name");
  TenantLimits def = target_->DefaultTenantLimits();
  spec.weight = static_cast<uint32_t>(UInt(req, "weight", 1, 1000000));
  spec.priority = Priority(req);
  spec.limits.max_regions =
      static_cast<uint32_t>(UInt(req, "max_regions", def.max_regions, UINT32_MAX));
  spec.limits.max_region_bytes = UInt(req, "max_region_bytes", def.max_region_bytes, INT64_MAX);
  spec.limits.max_extents =
      static_cast<uint32_t>(UInt(req, "max_extents", def.max_extents, UINT32_MAX));
  spec.max_open_negotiations =
      static_cast<uint32_t>(UInt(req, "max_open_negotiations", 0, kMaxOpenNegotiations));
  spec.ckpt_disk_bytes = OwnCap(req, "disk_bytes", "tenant_disk_bytes");
  spec.ckpt_staging_bytes = OwnCap(req, "staging_bytes", "tenant_staging_bytes");
  spec.features = Features(req);
  if (req.contains("latency_poll_us")) {
    spec.latency_poll_us = static_cast<uint32_t>(UInt(req, "latency_poll_us", 0, UINT32_MAX));
  }
  Check(target_->CreateTenant(spec));
  return {{"name", spec.name}};
}

json ControlApi::ListTenants(const json& req) {
  CheckOnlyFields(req, {});
  json out = json::array();
  for (const auto& t : target_->Tenants()) out.push_back(TenantJson(*t));
  return out;
}

json ControlApi::RemoveTenant(const json& req) {
  CheckOnlyFields(req, {"name", "purge"});
  bool purge = false;
  if (auto it = req.find("purge"); it != req.end()) {
    if (!it->is_boolean()) Check(Status::InvalidArgument("field \"purge\" must be true or false"));
    purge = it->get<bool>();
  }
  Check(target_->RemoveTenant(Str(req, "name"), purge));
  return json::object();
}

json ControlApi::SetTenantFeatures(const json& req) {
  CheckOnlyFields(req, {"name", "features"});
  const std::string name = Str(req, "name");
  if (!req.contains("features")) throw BadRequest("missing field \"features\"");
  const uint64_t features = Features(req);
  Check(target_->SetTenantFeatures(name, features));
  return {{"name", name}, {"features", FeatureNamesOf(features)}};
}

json ControlApi::BindVm(const json& req) {
  CheckOnlyFields(req, {"tenant", "socket", "domain"});
  const std::string domain = OptionalStr(req, "domain");
  StatusOr<std::string> resolved = target_->BindVm(Str(req, "tenant"), Str(req, "socket"), domain);
  Check(resolved.status());
  return {{"socket", *resolved}};
}

json ControlApi::UnbindVm(const json& req) {
  CheckOnlyFields(req, {"socket", "domain"});
  const std::string domain = OptionalStr(req, "domain");
  Check(target_->UnbindVm(Str(req, "socket"), domain));
  return json::object();
}

namespace {

json AttachmentJson(const VmAttachment& a) {
  return {{"domain", a.domain},
          {"tenant", a.tenant},
          {"socket", a.socket},
          {"running", a.running},
          {"bound", a.bound}};
}

}  // namespace

json ControlApi::AttachVm(const json& req) {
  CheckOnlyFields(req, {"tenant", "domain", "socket"});
  VmAttachRequest r;
  r.tenant = Str(req, "tenant");
  r.domain = Str(req, "domain");
  r.socket = OptionalStr(req, "socket");
  StatusOr<VmAttachment> a = target_->AttachVm(r);
  Check(a.status());
  return AttachmentJson(*a);
}

json ControlApi::DetachVm(const json& req) {
  CheckOnlyFields(req, {"domain"});
  StatusOr<VmAttachment> a = target_->DetachVm(Str(req, "domain"));
  Check(a.status());
  return AttachmentJson(*a);
}

json ControlApi::ListVms(const json& req) {
  CheckOnlyFields(req, {});
  json out = json::array();
  for (const VmView& v : target_->Vms()) {
    json devices = json::array();
    for (const DeviceInfo& d : v.devices) devices.push_back(DeviceJson(d));
    out.push_back({{"socket", v.socket_path},
                   {"tenant", v.tenant},
                   {"domain", v.domain},
                   {"listening", v.listening},
                   {"thread", v.thread},
                   {"devices", devices}});
  }
  return out;
}

json ControlApi::ListComms(const json& req) {
  CheckOnlyFields(req, {});
  json out = json::array();
  for (const CommSummary& c : target_->Communicators()) {
    out.push_back({{"id", c.id},
                   {"tenant", c.tenant},
                   {"nranks", c.nranks},
                   {"joined", c.joined},
                   {"next_seq", c.next_seq},
                   {"pending", c.pending},
                   {"state", c.state},
                   {"abort_reason", c.abort_reason}});
  }
  return out;
}

json ControlApi::GetCounters(const json& req) {
  CheckOnlyFields(req, {});
  return target_->Counters();
}

json ControlApi::Upgrade(const json& req) {
  CheckOnlyFields(req, {"binary"});
  std::string binary;
  if (req.contains("binary")) binary = Str(req, "binary");
  StatusOr<json> started = target_->StartUpgrade(binary);
  Check(started.status());
  return *started;
}

}  // namespace hz::service
