#include "hz/events/injection.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace hz::events {

namespace {

using nlohmann::json;

struct TopicInfo {
  uint16_t topic;
  std::vector<std::string> kinds;  // index = kind value
  std::set<std::string> keys;      // allowed keys besides topic and kind
};

const std::map<std::string, TopicInfo>& Topics() {
  static const std::map<std::string, TopicInfo> topics = {
      {"failure",
       {HZ_TOPIC_FAILURE,
        {"device_failed", "device_degraded", "host_failed"},
        {"device_index", "errors"}}},
      {"maintenance",
       {HZ_TOPIC_MAINTENANCE,
        {"scheduled", "started", "cancelled", "completed", "service_restarted"},
        {"deadline_s", "in_s", "duration_s", "device_index", "approvable"}}},
      {"preemption",
       {HZ_TOPIC_PREEMPTION,
        {"scheduled", "started", "cancelled"},
        {"deadline_s", "in_s", "devices", "device_index", "approvable"}}},
      {"capacity",
       {HZ_TOPIC_CAPACITY,
        {"available", "reservation_started", "reservation_ended", "reservation_released",
         "allocation_changed"},
        {"device_kind", "count", "devices_now", "reservation_id"}}},
      {"congestion",
       {HZ_TOPIC_CONGESTION, {"fabric", "host_memory", "storage"}, {"level", "used", "capacity"}}},
      {"checkpoint",
       {HZ_TOPIC_CHECKPOINT,
        {"durable", "failed", "jit_saved", "jit_failed"},
        {"stream", "tier", "step", "status", "flags"}}},
      {"negotiation",
       {HZ_TOPIC_NEGOTIATION,
        {"reservation_revoked", "offer_withdrawn", "offer_expired", "offer_made"},
        {"negotiation_id", "reservation_id", "offer_id", "reason", "count", "device_kind"}}},
      {"hint",
       {HZ_TOPIC_HINT,
        {"batch_size"},
        {"suggested", "min_batch", "max_batch", "step", "n_now", "n_peak"}}},
      {"energy", {HZ_TOPIC_ENERGY, {"level_changed"}, {"level", "draw", "budget", "sources"}}},
  };
  return topics;
}

// Reads optional unsigned key `key` into *out, at most `max`.
Status Get(const json& j, const char* key, uint64_t max, uint64_t* out) {
  if (!j.contains(key)) return Status::Ok();
  const json& v = j[key];
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max) {
    return Status::InvalidArgument(std::string("'") + key + "' must be an integer in 0.." +
                                   std::to_string(max));
  }
  *out = v.get<uint64_t>();
  return Status::Ok();
}

Status GetBool(const json& j, const char* key, bool* out) {
  if (!j.contains(key)) return Status::Ok();
  if (!j[key].is_boolean())
    return Status::InvalidArgument(std::string("'") + key + "' must be true or false");
  *out = j[key].get<bool>();
  return Status::Ok();
}

Status GetDeviceKind(const json& j, hz_device_kind* out) {
  if (!j.contains("device_kind")) return Status::Ok();
  const json& v = j["device_kind"];
  if (v == "gpu") {
    *out = HZ_DEV_GPU;
  } else if (v == "nic") {
    *out = HZ_DEV_NIC;
  } else {
    return Status::InvalidArgument("'device_kind' must be \"gpu\" or \"nic\"");
  }
  return Status::Ok();
}

#define HZ_TRY(expr)         \
  do {                       \
    Status _s = (expr);      \
    if (!_s.ok()) return _s; \
  } while (0)

}  // namespace

Status SpecFromJson(const std::string& json_text, uint64_t now, EventSpec* spec) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("not a JSON object");
  if (!j.contains("topic") || !j["topic"].is_string()) {
    return Status::InvalidArgument("'topic' (a name) is required");
  }
  auto t = Topics().find(j["topic"].get<std::string>());
  if (t == Topics().end())
    return Status::InvalidArgument("unknown topic '" + j["topic"].get<std::string>() + "'");
  const TopicInfo& info = t->second;
  uint16_t kind = 0;
  if (j.contains("kind")) {
    if (!j["kind"].is_string()) return Status::InvalidArgument("'kind' must be a name");
    auto k = std::find(info.kinds.begin(), info.kinds.end(), j["kind"].get<std::string>());
    if (k == info.kinds.end()) {
      return Status::InvalidArgument("unknown kind '" + j["kind"].get<std::string>() +
                                     "' of topic " + t->first);
    }
    kind = static_cast<uint16_t>(k - info.kinds.begin());
  } else if (info.kinds.size() > 1) {
    return Status::InvalidArgument("'kind' is required for topic " + t->first);
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "topic" && key != "kind" && info.keys.count(key) == 0) {
      return Status::InvalidArgument("unknown key '" + key + "' for topic " + t->first);
    }
  }

  uint64_t deadline = 0;
  if (j.contains("deadline_s") && j.contains("in_s")) {
    return Status::InvalidArgument("give 'deadline_s' or 'in_s', not both");
  }
  HZ_TRY(Get(j, "deadline_s", uint64_t{1} << 62, &deadline));
  uint64_t in = 0;
  HZ_TRY(Get(j, "in_s", uint64_t{1} << 40, &in));
  if (j.contains("in_s")) deadline = now + in;

  uint64_t index = kAllDevices;
  HZ_TRY(Get(j, "device_index", UINT32_MAX, &index));
  bool approvable = false;
  HZ_TRY(GetBool(j, "approvable", &approvable));
  hz_device_kind device_kind = HZ_DEV_GPU;
  HZ_TRY(GetDeviceKind(j, &device_kind));

  switch (info.topic) {
    case HZ_TOPIC_FAILURE: {
      uint64_t errors = 0;
      HZ_TRY(Get(j, "errors", UINT64_MAX, &errors));
      *spec = MakeFailure(static_cast<FailureKind>(kind), static_cast<uint32_t>(index), errors);
      return Status::Ok();
    }
    case HZ_TOPIC_MAINTENANCE:
    case HZ_TOPIC_PREEMPTION: {
      const bool scheduled = kind == 0;
      if (scheduled && deadline == 0) {
        return Status::InvalidArgument("a SCHEDULED event needs 'deadline_s' or 'in_s'");
      }
      if (!scheduled && (deadline != 0 || approvable)) {
        return Status::InvalidArgument("only SCHEDULED events take a deadline or 'approvable'");
      }
      if (scheduled && deadline <= now)
        return Status::InvalidArgument("the deadline is in the past");
      if (info.topic == HZ_TOPIC_MAINTENANCE) {
        uint64_t duration = 0;
        HZ_TRY(Get(j, "duration_s", uint64_t{1} << 40, &duration));
        *spec = MakeMaintenance(static_cast<MaintenanceKind>(kind), deadline, duration,
                                static_cast<uint32_t>(index), approvable);
      } else {
        uint64_t devices = 0;
        HZ_TRY(Get(j, "devices", UINT32_MAX, &devices));
        *spec = MakePreemption(static_cast<PreemptionKind>(kind), deadline,
                               static_cast<uint32_t>(devices), static_cast<uint32_t>(index),
                               approvable);
      }
      return Status::Ok();
    }
    case HZ_TOPIC_CAPACITY: {
      uint64_t count = 0, devices_now = 0, reservation = 0;
      HZ_TRY(Get(j, "count", UINT32_MAX, &count));
      HZ_TRY(Get(j, "devices_now", UINT32_MAX, &devices_now));
      HZ_TRY(Get(j, "reservation_id", UINT64_MAX, &reservation));
      *spec = kind == kCapacityAvailable
                  ? MakeCapacityAvailable(device_kind, count)
                  : MakeAllocationCapacity(static_cast<CapacityKind>(kind), reservation, count,
                                           devices_now, device_kind);
      return Status::Ok();
    }
    case HZ_TOPIC_CONGESTION: {
      uint64_t level = 0, used = 0, capacity = 0;
      if (j.contains("level") == (j.contains("used") || j.contains("capacity"))) {
        return Status::InvalidArgument("give 'level', or 'used' and 'capacity'");
      }
      HZ_TRY(Get(j, "level", kCongestionSevere, &level));
      HZ_TRY(Get(j, "used", UINT64_MAX, &used));
      HZ_TRY(Get(j, "capacity", UINT64_MAX, &capacity));
      CongestionLevel l = j.contains("level") ? static_cast<CongestionLevel>(level)
                                              : CongestionFromUtilisation(used, capacity);
      *spec = MakeCongestion(static_cast<CongestionKind>(kind), l);
      return Status::Ok();
    }
    case HZ_TOPIC_CHECKPOINT: {
      uint64_t stream = 0, tier = 0, step = 0, status = 0, flags = 0;
      HZ_TRY(Get(j, "stream", UINT32_MAX, &stream));
      HZ_TRY(Get(j, "tier", HZ_TIER_PEER_HOST, &tier));
      HZ_TRY(Get(j, "step", UINT64_MAX, &step));
      HZ_TRY(Get(j, "status", HZ_S_MAX - 1, &status));
      HZ_TRY(Get(j, "flags", 1, &flags));
      *spec = MakeCheckpoint(static_cast<CheckpointKind>(kind), static_cast<uint32_t>(stream),
                             static_cast<hz_ckpt_tier>(tier), step, static_cast<uint32_t>(status),
                             static_cast<uint32_t>(flags));
      return Status::Ok();
    }
    case HZ_TOPIC_NEGOTIATION: {
      NegotiationPayload p{};
      uint64_t reason = 0, count = 0;
      HZ_TRY(Get(j, "negotiation_id", UINT64_MAX, &p.negotiation_id));
      HZ_TRY(Get(j, "reservation_id", UINT64_MAX, &p.reservation_id));
      HZ_TRY(Get(j, "offer_id", UINT64_MAX, &p.offer_id));
      HZ_TRY(Get(j, "reason", kRevokeOperator, &reason));
      HZ_TRY(Get(j, "count", UINT16_MAX, &count));
      p.reason = static_cast<uint32_t>(reason);
      p.count = static_cast<uint16_t>(count);
      p.device_kind = static_cast<uint8_t>(device_kind);
      *spec = MakeNegotiation(static_cast<NegotiationKind>(kind), p);
      return Status::Ok();
    }
    case HZ_TOPIC_HINT: {
      uint64_t v[6] = {};
      const char* keys[6] = {"suggested", "min_batch", "max_batch", "step", "n_now", "n_peak"};
      for (int i = 0; i < 6; ++i) HZ_TRY(Get(j, keys[i], UINT32_MAX, &v[i]));
      HintPayload h{};
      h.suggested = static_cast<uint32_t>(v[0]);
      h.min_batch = static_cast<uint32_t>(v[1]);
      h.max_batch = static_cast<uint32_t>(v[2]);
      h.step = static_cast<uint32_t>(v[3]);
      h.devices_now = static_cast<uint32_t>(v[4]);
      h.devices_peak = static_cast<uint32_t>(v[5]);
      *spec = MakeHint(h);
      return Status::Ok();
    }
    default: {  // energy
      uint64_t level = 0, draw = 0, budget = 0;
      if (j.contains("level") == (j.contains("draw") || j.contains("budget"))) {
        return Status::InvalidArgument("give 'level', or 'draw' and 'budget'");
      }
      HZ_TRY(Get(j, "level", kEnergyCritical, &level));
      HZ_TRY(Get(j, "draw", UINT64_MAX, &draw));
      HZ_TRY(Get(j, "budget", UINT64_MAX, &budget));
      uint8_t sources = 0;
      if (j.contains("sources")) {
        if (!j["sources"].is_array()) return Status::InvalidArgument("'sources' must be a list");
        for (const json& s : j["sources"]) {
          if (s == "power") {
            sources |= kEnergySourcePowerBudget;
          } else if (s == "price") {
            sources |= kEnergySourcePrice;
          } else if (s == "carbon") {
            sources |= kEnergySourceCarbon;
          } else {
            return Status::InvalidArgument(
                "'sources' entries are \"power\", \"price\" or \"carbon\"");
          }
        }
      }
      EnergyLevel l =
          j.contains("level") ? static_cast<EnergyLevel>(level) : EnergyFromDraw(draw, budget);
      *spec = MakeEnergy(l, sources);
      return Status::Ok();
    }
  }
}

}  // namespace hz::events
