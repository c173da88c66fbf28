// RegionTable's part in a live upgrade: the regions as the guest registered
// them, registered again in the next process.

#include <nlohmann/json.hpp>

#include "command_args.h"
#include "hz/service/region_table.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

Status ReadExtents(const json& in, uint64_t max_extents, std::vector<hz_extent>* out) {
  if (!in.is_array() || in.size() > max_extents) {
    return Status::InvalidArgument("extents must be a list of at most " +
                                   std::to_string(max_extents));
  }
  for (const json& e : in) {
    uint64_t gpa_len[2];
    if (!GetUInts(e, gpa_len)) return Status::InvalidArgument("an extent must be [gpa, len]");
    out->push_back(hz_extent{gpa_len[0], gpa_len[1]});
  }
  return Status::Ok();
}

}  // namespace

void RegionTable::Save(json* out) const {
  json regions = json::array();
  for (const auto& [id, r] : regions_) {
    json extents = json::array();
    for (const hz_extent& e : r->extents) extents.push_back({e.gpa, e.len});
    regions.push_back(
        {{"id", id}, {"flags", r->flags}, {"total_len", r->total_len}, {"extents", extents}});
  }
  *out = {{"next_id", next_id_}, {"regions", std::move(regions)}};
}

Status RegionTable::Restore(const vdev::MemoryMapPtr& memory, const json& in) {
  if (!regions_.empty()) return Status::State("regions are registered already");
  uint64_t next_id = 0;
  if (Status st = GetUInt(in, "next_id", kU32Max, &next_id); !st.ok()) return st;
  const auto list = in.find("regions");
  if (list == in.end() || !list->is_array() || list->size() > limits_.max_regions) {
    return Status::InvalidArgument("regions must be a list of at most " +
                                   std::to_string(limits_.max_regions));
  }
  for (const json& r : *list) {
    uint64_t id = 0, flags = 0, total_len = 0;
    std::vector<hz_extent> extents;
    Status st = GetUInt(r, "id", kU32Max, &id);
    if (st.ok()) st = GetUInt(r, "flags", kU32Max, &flags);
    if (st.ok()) st = GetUInt(r, "total_len", kU64Max, &total_len);
    if (st.ok() && !r.contains("extents")) st = Status::InvalidArgument("extents are missing");
    if (st.ok()) st = ReadExtents(r["extents"], limits_.max_extents, &extents);
    if (st.ok() && (id == HZ_REGION_NONE || id == HZ_REGION_INLINE || regions_.count(id) != 0)) {
      st = Status::InvalidArgument("region id " + std::to_string(id) + " cannot be used");
    }
    uint32_t status = HZ_S_OK, detail = 0;
    if (st.ok()) {
      Prepared p = Prepare(limits_, memory, static_cast<uint32_t>(flags), total_len, extents,
                           index_, static_cast<uint32_t>(id));
      Commit(p, &status, &detail);
      if (status != HZ_S_OK) {
        st =
            Status::InvalidArgument("region " + std::to_string(id) + " does not register: status " +
                                    std::to_string(status) + ", extent " + std::to_string(detail));
      }
    }
    if (!st.ok()) {
      Clear();
      return st;
    }
  }
  next_id_ = static_cast<uint32_t>(next_id);
  return Status::Ok();
}

}  // namespace hz::service
