#include "cluster_topology.h"

#include <optional>

namespace hz::service {

using json = nlohmann::json;
using scheduler::HostShape;

namespace {

// A host's tenant entry: {"groups": [[gpus, nics, intra_bw], ...],
// "cross_group_bw": class}. Bounded so that a record cannot make a summary
// outgrow its format.
std::optional<HostShape> ReadShape(const json& j) {
  if (!j.is_object()) return std::nullopt;
  auto groups = j.find("groups");
  auto cross = j.find("cross_group_bw");
  if (groups == j.end() || !groups->is_array() || groups->empty() || cross == j.end() ||
      !cross->is_number_unsigned() || cross->get<uint64_t>() > HZ_BW_ULTRA) {
    return std::nullopt;
  }
  HostShape shape;
  shape.cross_group_bw = static_cast<uint8_t>(cross->get<uint64_t>());
  uint64_t devices = 0;
  for (const json& g : *groups) {
    if (!g.is_array() || g.size() != 3) return std::nullopt;
    for (const json& v : g) {
      if (!v.is_number_unsigned()) return std::nullopt;
    }
    const uint64_t gpus = g[0], nics = g[1], bw = g[2];
    if (gpus > scheduler::kMaxSummaryDevices || nics > scheduler::kMaxSummaryDevices) {
      return std::nullopt;
    }
    devices += gpus + nics;
    if (gpus + nics == 0 || bw > HZ_BW_ULTRA || devices > scheduler::kMaxSummaryDevices) {
      return std::nullopt;
    }
    shape.groups.push_back(
        {static_cast<uint16_t>(gpus), static_cast<uint16_t>(nics), static_cast<uint8_t>(bw)});
  }
  return shape;
}

}  // namespace

json ShapesAttribute(const TenantShapes& shapes) {
  json tenants = json::object();
  for (const auto& [tenant, shape] : shapes) {
    json groups = json::array();
    for (const HostShape::Group& g : shape.groups) groups.push_back({g.gpus, g.nics, g.intra_bw});
    tenants[tenant] = {{"groups", std::move(groups)}, {"cross_group_bw", shape.cross_group_bw}};
  }
  return json{{"tenants", std::move(tenants)}};
}

std::map<std::string, std::vector<HostShape>> OtherHostsShapes(
    const std::vector<cluster::HostInfo>& hosts, uint64_t* malformed) {
  std::map<std::string, std::vector<HostShape>> out;
  for (const cluster::HostInfo& h : hosts) {
    if (h.self) continue;
    auto tenants = h.attributes.find("tenants");
    if (tenants == h.attributes.end()) continue;
    if (!tenants->is_object()) {
      ++*malformed;
      continue;
    }
    for (const auto& [tenant, entry] : tenants->items()) {
      std::optional<HostShape> shape = ReadShape(entry);
      if (!shape) {
        ++*malformed;
        continue;
      }
      out[tenant].push_back(std::move(*shape));
    }
  }
  return out;
}

}  // namespace hz::service
