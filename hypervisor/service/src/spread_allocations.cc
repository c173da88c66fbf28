#include "hz/service/spread_allocations.h"

#include <algorithm>

#include "hz/common/file.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;
namespace sc = hz::scheduler;

namespace {

const char* LocalityName(uint8_t locality) {
  return locality == HZ_LOC_SAME_GROUP ? "group" : locality == HZ_LOC_SAME_HOST ? "host" : "any";
}

// A forwarded command's control answer as a result or a Status.
CommandResult FromAnswer(const std::string& host, const json& answer) {
  if (answer.value("ok", false) && answer.contains("result")) return answer["result"];
  const json code = answer.value("status", json());
  StatusCode c = StatusCode::kInvalidArgument;
  if (code.is_number_integer() && code.get<int64_t>() > 0 &&
      code.get<int64_t>() < kStatusCodeCount) {
    c = static_cast<StatusCode>(code.get<int64_t>());
  }
  const json error = answer.value("error", json());
  return Status(
      c, "host " + host + ": " +
             (error.is_string() ? error.get<std::string>() : std::string("no reason given")));
}

}  // namespace

SpreadAllocations::SpreadAllocations(std::string path, SpreadHooks hooks, bool sync)
    : path_(std::move(path)), hooks_(std::move(hooks)), sync_(sync) {}

Status SpreadAllocations::Load() {
  StatusOr<std::string> text = ReadFile(path_);
  if (text.status().IsNotFound()) return Status::Ok();
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [this] { return Status::Corruption(path_ + " is not a list of spread allocations"); };
  if (!j.is_object() || !j.value("next_id", json()).is_number_unsigned() ||
      !j.value("allocations", json()).is_array()) {
    return bad();
  }
  std::lock_guard<std::mutex> l(mu_);
  next_id_ = j["next_id"].get<uint64_t>();
  for (const json& a : j["allocations"]) {
    Spread s;
    if (!a.is_object() || !a.value("id", json()).is_number_unsigned() ||
        !a.value("tenant", json()).is_string() || !a.value("parts", json()).is_array()) {
      return bad();
    }
    s.id = a["id"].get<uint64_t>();
    s.tenant = a["tenant"].get<std::string>();
    for (const json& p : a["parts"]) {
      if (!p.is_object() || !p.value("host", json()).is_string() ||
          !p.value("allocation", json()).is_number_unsigned()) {
        return bad();
      }
      s.parts.push_back({p["host"].get<std::string>(), p["allocation"].get<uint64_t>()});
    }
    if (s.id >= next_id_) return bad();
    spreads_.push_back(std::move(s));
  }
  return Status::Ok();
}

Status SpreadAllocations::SaveLocked() const {
  json all = json::array();
  for (const Spread& s : spreads_) {
    json parts = json::array();
    for (const Part& p : s.parts) parts.push_back({{"host", p.host}, {"allocation", p.allocation}});
    all.push_back({{"id", s.id}, {"tenant", s.tenant}, {"parts", std::move(parts)}});
  }
  const json j = {{"next_id", next_id_}, {"allocations", std::move(all)}};
  return WriteFileAtomic(path_, j.dump(2) + "\n", sync_);
}

void SpreadAllocations::SetHosts(const std::vector<cluster::HostInfo>& hosts) {
  std::vector<sc::PlacementRecord> records;
  uint64_t malformed = 0;
  for (const cluster::HostInfo& h : hosts) {
    if (h.self || !h.attributes.contains("placement")) continue;  // no scheduler there
    StatusOr<sc::PlacementRecord> r = sc::ParsePlacementRecord(h.name, h.attributes["placement"]);
    if (r.ok()) {
      records.push_back(std::move(*r));
    } else {
      ++malformed;
      spdlog::warn("event=placement_record_malformed host={} error=\"{}\"", h.name,
                   r.status().ToString());
    }
  }
  malformed_ = malformed;
  std::lock_guard<std::mutex> l(mu_);
  others_ = std::move(records);
}

CommandResult SpreadAllocations::Run(const std::string& host, const json& request) {
  if (host == hooks_.self) return hooks_.run_here(request);
  StatusOr<json> answer = hooks_.call(host, request);
  if (!answer.ok()) {
    return Status(answer.status().code(), "host " + host + ": " + answer.status().message());
  }
  return FromAnswer(host, *answer);
}

CommandResult SpreadAllocations::Allocate(const std::string& tenant, const sc::Request& request) {
  std::lock_guard<std::mutex> one_at_a_time(placing_);
  std::vector<sc::PlacementRecord> hosts = {hooks_.local_record()};
  hosts[0].host.name = hooks_.self;
  {
    std::lock_guard<std::mutex> l(mu_);
    hosts.insert(hosts.end(), others_.begin(), others_.end());
  }
  StatusOr<std::vector<sc::HostPart>> plan = sc::PlanAcrossHosts(hosts, tenant, request);
  if (!plan.ok()) return plan.status();
  std::vector<Part> placed;
  json parts = json::array();
  for (const sc::HostPart& part : *plan) {
    const json req = {{"cmd", "alloc"},
                      {"tenant", tenant},
                      {"gpus", part.request.gpus},
                      {"nics", part.request.nics},
                      {"locality", LocalityName(part.request.locality)},
                      {"this_host_only", true}};
    CommandResult r = Run(part.host, req);
    const json id = r.ok() ? r->value("id", json()) : json();
    if (!id.is_number_unsigned()) {
      Status why = r.ok() ? Status::Corruption("host " + part.host + " returned no allocation id")
                          : r.status();
      Status undo;
      for (const Part& left : ReleaseParts(placed, &undo)) {
        spdlog::error("event=spread_rollback_failed host={} allocation={} error=\"{}\"", left.host,
                      left.allocation, undo.ToString());
      }
      return Status(why.code(),
                    "the part on " + part.host + " failed, nothing was kept: " + why.message());
    }
    placed.push_back({part.host, id.get<uint64_t>()});
    parts.push_back({{"host", part.host},
                     {"allocation", id},
                     {"gpus", part.request.gpus},
                     {"nics", part.request.nics},
                     {"devices", r->value("devices", json::array())}});
  }
  std::lock_guard<std::mutex> l(mu_);
  Spread s{next_id_++, tenant, placed};
  spreads_.push_back(s);
  if (Status st = SaveLocked(); !st.ok()) {
    spreads_.pop_back();
    Status undo;
    ReleaseParts(placed, &undo);
    return st;
  }
  spdlog::info("event=spread_allocated id={} tenant={} hosts={}", s.id, tenant, placed.size());
  return json{{"spread", s.id}, {"tenant", tenant}, {"parts", std::move(parts)}};
}

std::vector<SpreadAllocations::Part> SpreadAllocations::ReleaseParts(const std::vector<Part>& parts,
                                                                     Status* first_error) {
  std::vector<Part> kept;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    CommandResult r = Run(it->host, {{"cmd", "release"}, {"allocation", it->allocation}});
    if (r.ok() || r.status().IsNotFound()) continue;
    if (first_error->ok()) *first_error = r.status();
    kept.insert(kept.begin(), *it);
  }
  return kept;
}

CommandResult SpreadAllocations::Release(uint64_t id) {
  std::lock_guard<std::mutex> one_at_a_time(placing_);
  std::vector<Part> parts;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = std::find_if(spreads_.begin(), spreads_.end(),
                           [id](const Spread& s) { return s.id == id; });
    if (it == spreads_.end()) return Status::NotFound("no spread allocation " + std::to_string(id));
    parts = it->parts;
  }
  Status err;
  std::vector<Part> kept = ReleaseParts(parts, &err);
  std::lock_guard<std::mutex> l(mu_);
  auto it =
      std::find_if(spreads_.begin(), spreads_.end(), [id](const Spread& s) { return s.id == id; });
  if (kept.empty()) {
    spreads_.erase(it);
  } else {
    it->parts = kept;
  }
  if (Status st = SaveLocked(); !st.ok() && err.ok()) err = st;
  if (!err.ok()) {
    return Status(err.code(),
                  std::to_string(kept.size()) + " part(s) still held: " + err.message());
  }
  spdlog::info("event=spread_released id={}", id);
  return json::object();
}

json SpreadAllocations::List() const {
  std::lock_guard<std::mutex> l(mu_);
  json out = json::array();
  for (const Spread& s : spreads_) {
    json parts = json::array();
    for (const Part& p : s.parts) parts.push_back({{"host", p.host}, {"allocation", p.allocation}});
    out.push_back({{"spread", s.id}, {"tenant", s.tenant}, {"parts", std::move(parts)}});
  }
  return out;
}

}  // namespace hz::service
