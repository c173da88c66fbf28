#include "energy_schedule.h"

#include <algorithm>
#include <array>

#include "hz/common/file.h"
#include "hz/events/coarse.h"
#include "hz/events/event_spec.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

// One table for names and bits, both directions.
constexpr std::array<std::pair<const char*, uint8_t>, 3> kSources = {{
    {"power", events::kEnergySourcePowerBudget},
    {"price", events::kEnergySourcePrice},
    {"carbon", events::kEnergySourceCarbon},
}};
constexpr std::array<const char*, 3> kLevels = {"normal", "constrained", "critical"};

Status Field(size_t i, const std::string& why) {
  return Status::InvalidArgument("energy window " + std::to_string(i) + ": " + why);
}

Status ParseLevel(size_t i, const json& v, uint8_t* level) {
  if (v.is_number_integer() && v.get<int64_t>() >= 0 &&
      v.get<int64_t>() <= events::kEnergyCritical) {
    *level = v.get<uint8_t>();
    return Status::Ok();
  }
  for (size_t l = 0; l < kLevels.size() && v.is_string(); ++l) {
    if (v.get<std::string>() == kLevels[l]) {
      *level = static_cast<uint8_t>(l);
      return Status::Ok();
    }
  }
  return Field(i, "level must be 0, 1, 2, normal, constrained or critical");
}

Status ParseSources(size_t i, const json& v, uint8_t* sources) {
  if (!v.is_array()) return Field(i, "sources must be a list of power, price, carbon");
  for (const json& s : v) {
    auto it = std::find_if(kSources.begin(), kSources.end(), [&](const auto& e) {
      return s.is_string() && s.get<std::string>() == e.first;
    });
    if (it == kSources.end()) return Field(i, "unknown source " + s.dump());
    *sources |= it->second;
  }
  return Status::Ok();
}

Status ParseWindow(size_t i, const json& w, EnergyWindow* out) {
  if (!w.is_object()) return Field(i, "not an object");
  for (const auto& [key, v] : w.items()) {
    if (key != "start_s" && key != "end_s" && key != "level" && key != "sources") {
      return Field(i, "unknown field " + key);
    }
  }
  for (const char* key : {"start_s", "end_s"}) {
    if (!w.contains(key) || !w[key].is_number_integer() || w[key].get<int64_t>() < 0) {
      return Field(i, std::string(key) + " must be unix seconds");
    }
  }
  out->start_s = w["start_s"].get<uint64_t>();
  out->end_s = w["end_s"].get<uint64_t>();
  if (out->start_s >= out->end_s) return Field(i, "start_s must be before end_s");
  if (!w.contains("level")) return Field(i, "level is missing");
  if (Status s = ParseLevel(i, w["level"], &out->level); !s.ok()) return s;
  if (!w.contains("sources")) return Status::Ok();
  return ParseSources(i, w["sources"], &out->sources);
}

}  // namespace

const char* EnergyLevelName(uint8_t level) {
  return level < kLevels.size() ? kLevels[level] : "unknown";
}

json EnergySourceNames(uint8_t sources) {
  json out = json::array();
  for (const auto& [name, bit] : kSources) {
    if (sources & bit) out.push_back(name);
  }
  return out;
}

StatusOr<EnergySchedule> EnergySchedule::FromJson(const json& j) {
  if (!j.is_object() || !j.contains("windows") || !j["windows"].is_array()) {
    return Status::InvalidArgument("an energy schedule is {\"windows\": [...]}");
  }
  const json& ws = j["windows"];
  if (ws.size() > kMaxWindows) {
    return Status::InvalidArgument("an energy schedule holds at most " +
                                   std::to_string(kMaxWindows) + " windows");
  }
  EnergySchedule s;
  for (size_t i = 0; i < ws.size(); ++i) {
    EnergyWindow w;
    if (Status st = ParseWindow(i, ws[i], &w); !st.ok()) return st;
    s.windows_.push_back(w);
  }
  std::stable_sort(
      s.windows_.begin(), s.windows_.end(),
      [](const EnergyWindow& a, const EnergyWindow& b) { return a.start_s < b.start_s; });
  return s;
}

json EnergySchedule::ToJson() const {
  json ws = json::array();
  for (const EnergyWindow& w : windows_) {
    ws.push_back({{"start_s", w.start_s},
                  {"end_s", w.end_s},
                  {"level", EnergyLevelName(w.level)},
                  {"sources", EnergySourceNames(w.sources)}});
  }
  return {{"windows", std::move(ws)}};
}

StatusOr<EnergySchedule> EnergySchedule::Load(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok() && text.status().IsNotFound()) return EnergySchedule{};
  if (!text.ok()) return Status(text.status().code(), path + ": " + text.status().message());
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption(path + ": not valid JSON");
  StatusOr<EnergySchedule> s = FromJson(j);
  if (!s.ok()) return Status::Corruption(path + ": " + s.status().message());
  return s;
}

Status EnergySchedule::Save(const std::string& path) const {
  Status s = WriteFileAtomic(path, ToJson().dump(1) + "\n");
  return s.ok() ? s : Status(s.code(), path + ": " + s.message());
}

EnergyCondition EnergySchedule::At(uint64_t unix_s) const {
  EnergyCondition c;
  for (const EnergyWindow& w : windows_) {
    if (w.start_s > unix_s) break;
    if (unix_s >= w.end_s) continue;
    if (w.level > c.level) c = EnergyCondition{w.level, 0};
    if (w.level == c.level) c.sources |= w.sources;
  }
  return c;
}

uint64_t EnergySchedule::NextChange(uint64_t unix_s) const {
  uint64_t next = 0;
  for (const EnergyWindow& w : windows_) {
    for (uint64_t edge : {w.start_s, w.end_s}) {
      if (edge > unix_s && (next == 0 || edge < next)) next = edge;
    }
  }
  return next;
}

}  // namespace hz::service
