// The operator's objects (tenants and VM bindings) across restarts of the
// service: <state_dir>/state.json.
#include "host_conditions.h"
#include "hz/common/file.h"
#include "hz/service/provider.h"
#include "hz/service/service.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

// The engines and the provider keep their state by name: all of it goes
// with the tenant, so that a tenant created later under the same name starts
// with nothing. Without purge, a tenant that still holds anything is kept.
hz::Status Service::RemoveTenant(const std::string& name, bool purge) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, b] : bindings_) {
      if (b.tenant == name) {
        return hz::Status::Busy("tenant " + name + " still has a VM bound at " + path);
      }
    }
  }
  if (!tenants_.Find(name)) return hz::Status::NotFound("no tenant " + name);
  const TenantId id(name);
  std::vector<std::string> held;
  if (engines_) {
    hz::Status data = engines_->TenantData(id, &held);
    // With purge, data that cannot even be read (a corrupt events file) goes too.
    if (!data.ok() && !purge)
      return hz::Status(data.code(), "tenant " + name + ": " + data.message());
  }
  if (provider_) {
    for (std::string& h : provider_->TenantHoldings(id)) held.push_back(std::move(h));
  }
  if (!held.empty() && !purge) {
    std::string what;
    for (const std::string& h : held) what += (what.empty() ? "" : " and ") + h;
    return hz::Status::State("tenant " + name + " still has " + what +
                             "; remove it with --purge to release and delete them");
  }
  if (provider_) {
    if (hz::Status s = provider_->ForgetTenant(id); !s.ok()) {
      return hz::Status(s.code(), "tenant " + name + ": " + s.message());
    }
  }
  if (engines_) {
    if (hz::Status s = engines_->ForgetTenant(id); !s.ok()) {
      return hz::Status(s.code(), "tenant " + name + ": " + s.message());
    }
  }
  if (conditions_) conditions_->ForgetTenant(name);
  if (hz::Status s = tenants_.Remove(name); !s.ok()) return s;
  spdlog::info("event=tenant_removed tenant={} purge={}", name, purge);
  SaveState();
  return hz::Status::Ok();
}

// Sessions open now keep what their HELLO granted: taking a feature from a
// live session would strand what it holds of it (communicators, a
// subscription, checkpoint streams) half-usable. Its next HELLO gets the
// new allowance (SPEC §4.2).
hz::Status Service::SetTenantFeatures(const std::string& name, uint64_t features) {
  std::shared_ptr<Tenant> tenant = tenants_.Find(name);
  if (!tenant) return hz::Status::NotFound("no tenant " + name);
  if ((features & ~kEveryFeature) != 0) return hz::Status::InvalidArgument("unknown feature bits");
  tenant->set_features(features);
  spdlog::info("event=tenant_features tenant={} features={:#x}", name, features);
  SaveState();
  return hz::Status::Ok();
}

// The operator's objects survive restarts: tenants and bindings are saved
// in <state_dir>/state.json, replaced whole on every change.
void Service::SaveState() {
  if (loading_state_) return;
  json tenants = json::array();
  for (const auto& t : tenants_.List()) {
    tenants.push_back({{"name", t->name()},
                       {"weight", t->spec().weight},
                       {"priority", t->spec().priority},
                       {"max_regions", t->spec().limits.max_regions},
                       {"max_region_bytes", t->spec().limits.max_region_bytes},
                       {"max_extents", t->spec().limits.max_extents},
                       {"max_open_negotiations", t->spec().max_open_negotiations},
                       {"disk_bytes", t->spec().ckpt_disk_bytes},
                       {"staging_bytes", t->spec().ckpt_staging_bytes},
                       {"features", FeatureNamesOf(t->features())}});
    if (t->spec().latency_poll_us) tenants.back()["latency_poll_us"] = *t->spec().latency_poll_us;
  }
  json bindings = json::array();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, b] : bindings_)
      bindings.push_back({{"tenant", b.tenant}, {"socket", path}, {"domain", b.domain}});
  }
  json state = {{"tenants", tenants}, {"bindings", bindings}};
  const std::string path = config_.state_dir + "/state.json";
  // fsynced before and after the rename: a tenant or binding the operator
  // was told about is still there after a power loss.
  hz::Status s = WriteFileAtomic(path, state.dump(2) + "\n");
  if (!s.ok()) spdlog::error("event=state_save_failed path={} reason=\"{}\"", path, s.ToString());
}

// A state file that cannot be read whole stops the start-up: starting with
// fewer tenants or bindings and saving that on the next change would lose the
// rest for good. The file is kept as it is.
hz::Status Service::LoadState() {
  const std::string path = config_.state_dir + "/state.json";
  auto bad = [&](const std::string& why) {
    return hz::Status::Corruption(path + ": " + why +
                                  "; not starting without every tenant and binding in it (the "
                                  "file is kept as it is: repair it, or move it aside to start "
                                  "with none)");
  };
  hz::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok())
    return text.status().IsNotFound() ? hz::Status::Ok() : bad(text.status().ToString());
  json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object()) return bad("not a JSON object");
  loading_state_ = true;
  hz::Status result = hz::Status::Ok();
  try {
    for (const json& t : state.value("tenants", json::array())) {
      TenantSpec spec;
      spec.name = t.at("name").get<std::string>();
      spec.weight = t.at("weight").get<uint32_t>();
      spec.priority = t.at("priority").get<uint16_t>();
      spec.limits.max_regions = t.at("max_regions").get<uint32_t>();
      spec.limits.max_region_bytes = t.at("max_region_bytes").get<uint64_t>();
      // Files written before the extent quota existed get the default.
      spec.limits.max_extents = t.value("max_extents", config_.tenant_defaults.max_extents);
      // Absent from state files written before the per-tenant limit existed.
      spec.max_open_negotiations = t.value("max_open_negotiations", uint32_t{0});
      // Absent from state files written before the per-tenant checkpoint caps.
      spec.ckpt_disk_bytes = t.value("disk_bytes", uint64_t{0});
      spec.ckpt_staging_bytes = t.value("staging_bytes", uint64_t{0});
      // Set for a tenant given its own polling window only.
      if (t.contains("latency_poll_us"))
        spec.latency_poll_us = t.at("latency_poll_us").get<uint32_t>();
      // Absent from state files written before the allowance existed: every feature.
      if (t.contains("features")) {
        hz::StatusOr<uint64_t> features =
            ParseFeatures(t.at("features").get<std::vector<std::string>>());
        if (!features.ok()) {
          result = bad("tenant " + spec.name + ": " + features.status().message());
          break;
        }
        spec.features = *features;
      }
      if (hz::Status s = CreateTenant(spec); !s.ok()) {
        result = bad("tenant " + spec.name + ": " + s.message());
        break;
      }
    }
    for (const json& b : state.value("bindings", json::array())) {
      if (!result.ok()) break;
      const std::string socket = b.at("socket").get<std::string>();
      // Absent from state files written before a binding named its domain.
      hz::StatusOr<std::string> bound =
          BindVm(b.at("tenant").get<std::string>(), socket, b.value("domain", std::string()));
      if (!bound.ok()) result = bad("binding " + socket + ": " + bound.status().message());
    }
  } catch (const json::exception& e) {
    result = bad(e.what());
  }
  loading_state_ = false;
  if (!result.ok()) return result;
  SaveState();  // once, in the current format
  return hz::Status::Ok();
}

}  // namespace hz::service
