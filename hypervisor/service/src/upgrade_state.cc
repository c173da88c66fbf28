#include "upgrade_state.h"

#include <nlohmann/json.hpp>

#include "hz/cluster/membership.h"

namespace hz::service {

namespace {

constexpr char kClusterInstance[] = "cluster_instance";

}  // namespace

std::string EncodeUpgradeState(const UpgradeState& state) {
  if (state.cluster_instance.empty()) return {};
  return nlohmann::json{{kClusterInstance, state.cluster_instance}}.dump();
}

StatusOr<UpgradeState> ParseUpgradeState(const std::string& text) {
  UpgradeState state;
  if (text.empty()) return state;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("the upgrade state is not a JSON object");
  auto instance = j.find(kClusterInstance);
  if (instance == j.end()) return state;
  if (!instance->is_string() || !cluster::IsInstanceId(instance->get<std::string>())) {
    return Status::InvalidArgument(
        "the upgrade state's cluster_instance is not 16 lower-case hex digits");
  }
  state.cluster_instance = instance->get<std::string>();
  return state;
}

}  // namespace hz::service
