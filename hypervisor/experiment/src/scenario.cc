#include "hz/experiment/scenario.h"

#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>

namespace hz::experiment {
namespace {

using nlohmann::json;

Status Invalid(const std::string& what) {
  return Status::InvalidArgument("scenario: " + what);
}

// Only the keys named: a misspelt one would silently keep a default.
Status OnlyKeys(const json& obj, std::initializer_list<const char*> keys,
                const std::string& where) {
  if (!obj.is_object()) return Invalid(where + " is not an object");
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (const char* k : keys) known = known || key == k;
    if (!known) return Invalid(where + ": unknown key " + key);
  }
  return Status::Ok();
}

// A number in [low, high] at obj[key].
Status Number(const json& obj, const char* key, double low, double high, const std::string& where,
              double* out) {
  if (!obj.contains(key) || !obj[key].is_number()) return Invalid(where + ": " + key + " missing");
  *out = obj[key].get<double>();
  if (!(*out >= low && *out <= high)) return Invalid(where + ": " + key + " out of range");
  return Status::Ok();
}

Status ParseJob(const json& j, int gpus_per_host, const std::string& where, TraceJob* out) {
  if (Status st = OnlyKeys(j, {"arrival_s", "duration_s", "gpus"}, where); !st.ok()) return st;
  double arrival, duration, gpus;
  for (Status st : {Number(j, "arrival_s", 0, 1e9, where, &arrival),
                    Number(j, "duration_s", 1, 1e9, where, &duration),
                    Number(j, "gpus", 1, gpus_per_host, where, &gpus)}) {
    if (!st.ok()) return st;
  }
  out->arrival_s = static_cast<uint64_t>(std::llround(arrival));
  out->duration_s = static_cast<uint64_t>(std::llround(duration));  // whole seconds, as traced
  out->gpus = static_cast<uint32_t>(gpus);
  return Status::Ok();
}

Status ParseEvent(const json& e, size_t jobs, const std::string& where, FixedEvent* out) {
  if (Status st = OnlyKeys(e, {"time_s", "kind", "job"}, where); !st.ok()) return st;
  double job;
  for (Status st : {Number(e, "time_s", 0, 1e12, where, &out->time),
                    Number(e, "job", 0, static_cast<double>(jobs) - 1, where, &job)}) {
    if (!st.ok()) return st;
  }
  out->job = static_cast<size_t>(job);
  const std::string kind = e.value("kind", "");
  if (kind == "gpu_failure") {
    out->kind = Outage::kGpuFailure;
  } else if (kind == "host_failure") {
    out->kind = Outage::kHostFailure;
  } else if (kind == "maintenance") {
    out->kind = Outage::kMaintenance;
  } else {
    return Invalid(where + ": kind must be gpu_failure, host_failure or maintenance");
  }
  return Status::Ok();
}

}  // namespace

Status ParseScenario(const std::string& json_text, Scenario* out, Model* model) {
  const json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (Status st = OnlyKeys(doc, {"hosts", "gpus_per_host", "jobs", "events", "model"}, "document");
      !st.ok())
    return st;
  Scenario s;
  double hosts, gpus_per_host;
  for (Status st : {Number(doc, "hosts", 1, 100000, "document", &hosts),
                    Number(doc, "gpus_per_host", 1, 8, "document", &gpus_per_host)}) {
    if (!st.ok()) return st;
  }
  s.hosts = static_cast<int>(hosts);
  s.gpus_per_host = static_cast<int>(gpus_per_host);
  if (!doc.contains("jobs") || !doc["jobs"].is_array() || doc["jobs"].empty())
    return Invalid("no jobs");
  for (size_t i = 0; i < doc["jobs"].size(); ++i) {
    TraceJob job;
    const std::string where = "job " + std::to_string(i);
    if (Status st = ParseJob(doc["jobs"][i], s.gpus_per_host, where, &job); !st.ok()) return st;
    s.jobs.push_back(job);
  }
  const json events = doc.value("events", json::array());
  if (!events.is_array()) return Invalid("events is not an array");
  for (size_t i = 0; i < events.size(); ++i) {
    FixedEvent e;
    const std::string where = "event " + std::to_string(i);
    if (Status st = ParseEvent(events[i], s.jobs.size(), where, &e); !st.ok()) return st;
    s.events.push_back(e);
  }
  Model updated = *model;
  if (doc.contains("model")) {
    Status st = ApplyCalibration(doc["model"].dump(), &updated, &s.calibrated);
    if (!st.ok()) return Invalid(st.ToString());
  }
  *out = std::move(s);
  *model = std::move(updated);
  return Status::Ok();
}

}  // namespace hz::experiment
