// The operator's objects (tenants and VM bindings) across restarts of the
// service: <state_dir>/state.json.
#include <fstream>

#include "hz/common/file.h"
#include "hz/service/service.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

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
                       {"max_region_bytes", t->spec().limits.max_region_bytes}});
  }
  json bindings = json::array();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, b] : bindings_)
      bindings.push_back({{"tenant", b.tenant}, {"socket", path}});
  }
  json state = {{"tenants", tenants}, {"bindings", bindings}};
  const std::string path = config_.state_dir + "/state.json";
  // fsynced before and after the rename: a tenant or binding the operator
  // was told about is still there after a power loss.
  hz::Status s = WriteFileAtomic(path, state.dump(2) + "\n");
  if (!s.ok()) spdlog::error("event=state_save_failed path={} reason=\"{}\"", path, s.ToString());
}

void Service::LoadState() {
  std::string path = config_.state_dir + "/state.json";
  std::ifstream in(path);
  if (!in) return;
  json state = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object()) {
    spdlog::error("event=state_unreadable path={}", path);
    return;
  }
  loading_state_ = true;
  bool readable = true;
  try {
    for (const json& t : state.value("tenants", json::array())) {
      TenantSpec spec;
      spec.name = t.at("name").get<std::string>();
      spec.weight = t.at("weight").get<uint32_t>();
      spec.priority = t.at("priority").get<uint16_t>();
      spec.limits.max_regions = t.at("max_regions").get<uint32_t>();
      spec.limits.max_region_bytes = t.at("max_region_bytes").get<uint64_t>();
      if (hz::Status s = CreateTenant(spec); !s.ok()) {
        spdlog::warn("event=state_tenant_skipped tenant={} reason=\"{}\"", spec.name, s.message());
      }
    }
    for (const json& b : state.value("bindings", json::array())) {
      hz::StatusOr<std::string> bound =
          BindVm(b.at("tenant").get<std::string>(), b.at("socket").get<std::string>());
      if (!bound.ok()) {
        spdlog::warn("event=state_binding_skipped reason=\"{}\"", bound.status().message());
      }
    }
  } catch (const json::exception& e) {
    readable = false;
    spdlog::error("event=state_unreadable path={} error=\"{}\"", path, e.what());
  }
  loading_state_ = false;
  // Once: what was loaded, without the objects that were skipped. An
  // unreadable file is left as it is.
  if (readable) SaveState();
}

}  // namespace hz::service
