#include "host_conditions.h"

#include <array>

#include "hz/common/file.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

constexpr std::array<CommandSpec<HostConditions>, 2> kConditionCommands = {{
    {"energy.schedule", false, &HostConditions::ScheduleCommand},
    {"energy.status", false, &HostConditions::StatusCommand},
}};

// A number of conditions.json: unsigned and at most max, else it throws.
uint64_t InRange(const nlohmann::json& v, const char* what, uint64_t max) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max) {
    throw std::out_of_range(std::string(what) + " is out of range");
  }
  return v.get<uint64_t>();
}

// Every resource whose congestion tenants are told of.
constexpr std::array<events::CongestionKind, 3> kResources = {
    events::kCongestionFabric, events::kCongestionHostMemory, events::kCongestionStorage};

// Keeps only the tenants still in `present` (a tenant that comes back is told afresh).
template <typename Map>
void Prune(Map* told, const std::set<std::string>& present) {
  std::erase_if(*told, [&](const auto& e) { return present.count(e.first) == 0; });
}

// How the operator's status and the hysteresis name each resource.
const char* CongestionName(events::CongestionKind kind) {
  switch (kind) {
    case events::kCongestionFabric:
      return "fabric";
    case events::kCongestionHostMemory:
      return "host_memory";
    case events::kCongestionStorage:
      return "storage";
  }
  return "unknown";
}

}  // namespace

HostConditions::HostConditions(const std::string& state_dir, uint64_t hysteresis_s,
                               ConditionHooks hooks)
    : path_(state_dir + "/energy.json"),
      state_path_(state_dir + "/conditions.json"),
      hooks_(std::move(hooks)),
      congestion_filter_(hysteresis_s) {}

std::span<const CommandSpec<HostConditions>> HostConditions::Commands() {
  return kConditionCommands;
}

Status HostConditions::Load() {
  StatusOr<EnergySchedule> s = EnergySchedule::Load(path_);
  if (!s.ok()) return s.status();
  StatusOr<std::string> text = ReadFile(state_path_);
  if (!text.ok() && !text.status().IsNotFound()) {
    return Status(text.status().code(), state_path_ + ": " + text.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  schedule_ = std::move(*s);
  if (!text.ok()) return Status::Ok();
  json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  Status st = state.is_object() ? LoadStateLocked(state) : Status::Corruption("not a JSON object");
  if (!st.ok()) return Status::Corruption(state_path_ + ": " + st.message());
  saved_state_ = *text;
  return Status::Ok();
}

void HostConditions::Update(const ConditionInputs& in) {
  const uint64_t now = hooks_.unix_now();
  Events out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CongestionLocked(in, now, &out);
    EnergyLocked(in, now, &out);
    SharesLocked(now);
    // Before the events go: a restart after them never tells them again.
    if (Status st = SaveStateLocked(); !st.ok()) {
      spdlog::error("event=conditions_save_failed error=\"{}\"", st.ToString());
    }
  }
  Publish(out);
}

void HostConditions::CongestionLocked(const ConditionInputs& in, uint64_t now, Events* out) {
  ResourceLocked(events::kCongestionFabric, in.fabric, now, out);
  ResourceLocked(events::kCongestionHostMemory, in.host_memory, now, out);
  ResourceLocked(events::kCongestionStorage, in.storage, now, out);
}

void HostConditions::ResourceLocked(events::CongestionKind kind, const ResourceWaiting& in,
                                    uint64_t now, Events* out) {
  Resource& r = resources_[kind];
  r.last = in.waiting;
  // No window measured yet is no congestion (not, as a zero capacity would be, severe).
  const events::CongestionLevel level =
      in.waiting.window_ns == 0
          ? events::kCongestionNone
          : events::CongestionFromUtilisation(in.waiting.waiting_ns, in.waiting.window_ns);
  if (congestion_filter_.Update(CongestionName(kind), level, now)) r.level = level;
  Prune(&r.told, in.tenants);
  for (const std::string& t : in.tenants) {
    auto it = r.told.try_emplace(t, events::kCongestionNone).first;
    if (it->second == r.level) continue;
    it->second = r.level;
    out->emplace_back(t, events::MakeCongestion(kind, events::CongestionLevel(r.level)));
  }
}

void HostConditions::EnergyLocked(const ConditionInputs& in, uint64_t now, Events* out) {
  const EnergyCondition c = schedule_.At(now);
  Prune(&told_energy_, in.host_tenants);
  for (const std::string& t : in.host_tenants) {
    auto it = told_energy_.try_emplace(t, EnergyCondition{}).first;
    if (it->second == c) continue;
    it->second = c;
    out->emplace_back(t, events::MakeEnergy(events::EnergyLevel(c.level), c.sources));
  }
}

void HostConditions::SharesLocked(uint64_t now) {
  const bool capped = schedule_.At(now).level >= events::kEnergyConstrained;
  for (auto it = slack_.begin(); it != slack_.end();) {
    Slack& s = it->second;
    const bool in_force = capped && now < s.expires_s;
    const uint32_t want = in_force ? 100 - s.pct : 100;
    if (want != s.applied && hooks_.set_share) {
      hooks_.set_share(it->first, want, in_force ? s.expires_s - now : 0);
    }
    s.applied = want;
    it = now >= s.expires_s ? slack_.erase(it) : std::next(it);
  }
}

void HostConditions::Publish(const Events& out) {
  for (const auto& [tenant, spec] : out) {
    if (hooks_.publish) hooks_.publish(tenant, spec);
  }
}

void HostConditions::ForgetTenant(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slack_.find(tenant);
  if (it != slack_.end() && it->second.applied != 100 && hooks_.set_share) {
    hooks_.set_share(tenant, 100, 0);
  }
  slack_.erase(tenant);
  for (Resource& r : resources_) r.told.erase(tenant);
  told_energy_.erase(tenant);
  if (Status st = SaveStateLocked(); !st.ok()) {
    spdlog::error("event=conditions_save_failed error=\"{}\"", st.ToString());
  }
}

Status HostConditions::DeclareSlack(const TenantId& tenant, const hz_energy_slack_args& args,
                                    hz_energy_slack_result* result) {
  const uint32_t pct = args.slowdown_pct;
  const uint64_t duration = args.duration_s;
  if (pct > HZ_ENERGY_SLACK_MAX_PCT) {
    return Status::InvalidArgument("slowdown_pct is above HZ_ENERGY_SLACK_MAX_PCT");
  }
  if (pct == 0 && duration != 0) return Status::InvalidArgument("a withdrawal has duration_s 0");
  if (pct != 0 && (duration == 0 || duration > HZ_ENERGY_SLACK_MAX_S)) {
    return Status::InvalidArgument("duration_s must be 1..HZ_ENERGY_SLACK_MAX_S");
  }
  const uint64_t now = hooks_.unix_now();
  std::lock_guard<std::mutex> lock(mu_);
  // The declaration is answered only once it is on disk.
  const std::map<std::string, Slack> before = slack_;
  Slack& s = slack_[tenant.name()];
  s.pct = pct;
  s.expires_s = pct == 0 ? now : now + duration;  // a withdrawal ends at once
  // The engine holds the old share's end: tell it the new one (no share is
  // 0, so SharesLocked does), unless it was never told anything.
  if (s.applied != 100 || schedule_.At(now).level >= events::kEnergyConstrained) s.applied = 0;
  if (Status st = SaveStateLocked(); !st.ok()) {
    slack_ = before;
    return Status(st.code(), "the declaration could not be kept: " + st.message());
  }
  SharesLocked(now);
  result->expires_s = pct == 0 ? 0 : now + duration;
  return Status::Ok();
}

CommandResult HostConditions::ScheduleCommand(const json& req) {
  json windows = req.contains("windows") ? req["windows"] : json::array();
  StatusOr<EnergySchedule> s = EnergySchedule::FromJson({{"windows", windows}});
  if (!s.ok()) return s.status();
  if (Status st = s->Save(path_); !st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    schedule_ = std::move(*s);
    SharesLocked(hooks_.unix_now());
  }
  spdlog::info("event=energy_schedule windows={}", windows.size());
  return StatusCommand(req);
}

CommandResult HostConditions::StatusCommand(const json&) {
  const uint64_t now = hooks_.unix_now();
  std::lock_guard<std::mutex> lock(mu_);
  const EnergyCondition c = schedule_.At(now);
  json slack = json::array();
  for (const auto& [tenant, s] : slack_) {
    slack.push_back({{"tenant", tenant},
                     {"slowdown_pct", s.pct},
                     {"expires_s", s.expires_s},
                     {"share_pct", s.applied}});
  }
  json out = schedule_.ToJson();
  out["now_s"] = now;
  out["level"] = EnergyLevelName(c.level);
  out["sources"] = EnergySourceNames(c.sources);
  out["next_change_s"] = schedule_.NextChange(now);
  out["slack"] = std::move(slack);
  json congestion = json::object();
  for (events::CongestionKind kind : kResources) {
    const Resource& r = resources_[kind];
    congestion[CongestionName(kind)] = {{"level", r.level},
                                        {"waiting_ms", r.last.waiting_ns / 1000000},
                                        {"window_ms", r.last.window_ns / 1000000}};
  }
  out["congestion"] = std::move(congestion);
  return out;
}

// The shares the collective engine was told are not kept: a restarted
// engine has none, and the next Update applies the slack again.
json HostConditions::StateLocked() const {
  json slack = json::object();
  for (const auto& [tenant, s] : slack_) {
    slack[tenant] = {{"slowdown_pct", s.pct}, {"expires_s", s.expires_s}};
  }
  json energy = json::object();
  for (const auto& [tenant, c] : told_energy_) {
    energy[tenant] = {{"level", c.level}, {"sources", c.sources}};
  }
  json congestion = json::object();
  for (events::CongestionKind kind : kResources) {
    congestion[CongestionName(kind)] = resources_[kind].told;
  }
  return {{"slack", slack}, {"told_energy", energy}, {"told_congestion", congestion}};
}

Status HostConditions::LoadStateLocked(const json& state) {
  auto number = [](const json& j, const char* key, uint64_t max) {
    return InRange(j.at(key), key, max);
  };
  auto tenants = [](const json& j) {
    for (const auto& [tenant, v] : j.items()) {
      if (!events::ValidName(tenant)) throw std::out_of_range("invalid tenant name " + tenant);
    }
    return j.items();
  };
  try {
    for (const auto& [tenant, s] : tenants(state.at("slack"))) {
      slack_[tenant] =
          Slack{static_cast<uint32_t>(number(s, "slowdown_pct", HZ_ENERGY_SLACK_MAX_PCT)),
                number(s, "expires_s", UINT64_MAX), 100};
    }
    for (const auto& [tenant, c] : tenants(state.at("told_energy"))) {
      told_energy_[tenant] = {static_cast<uint8_t>(number(c, "level", events::kEnergyCritical)),
                              static_cast<uint8_t>(number(c, "sources", 0xff))};
    }
    const json& congestion = state.at("told_congestion");
    for (events::CongestionKind kind : kResources) {
      for (const auto& [tenant, level] : tenants(congestion.at(CongestionName(kind)))) {
        resources_[kind].told[tenant] =
            static_cast<uint8_t>(InRange(level, CongestionName(kind), events::kCongestionSevere));
      }
    }
  } catch (const std::exception& e) {
    slack_.clear();
    told_energy_.clear();
    for (Resource& r : resources_) r.told.clear();
    return Status::Corruption(e.what());
  }
  return Status::Ok();
}

Status HostConditions::SaveStateLocked() {
  std::string text = StateLocked().dump(1) + "\n";
  if (text == saved_state_) return Status::Ok();
  Status st = WriteFileAtomic(state_path_, text);
  if (!st.ok()) return Status(st.code(), state_path_ + ": " + st.message());
  saved_state_ = std::move(text);
  return Status::Ok();
}

}  // namespace hz::service
