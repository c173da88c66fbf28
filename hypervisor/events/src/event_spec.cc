#include "hz/events/event_spec.h"

#include "hz/events/coarse.h"

namespace hz::events {

namespace {
bool KnownTopic(uint16_t topic) {
  return topic <= HZ_TOPIC_ENERGY;
}

}  // namespace

Status ValidateSpec(const EventSpec& spec) {
  if (spec.topic == HZ_TOPIC_LOST) {
    return Status::InvalidArgument("LOST records are made by the bus, not published");
  }
  if (!KnownTopic(spec.topic)) {
    return Status::InvalidArgument("unknown topic " + std::to_string(spec.topic));
  }
  if ((spec.flags & ~HZ_EVENT_F_APPROVABLE) != 0) {
    return Status::InvalidArgument("unknown or bus-owned event flags");
  }
  if ((spec.flags & HZ_EVENT_F_APPROVABLE) != 0 &&
      !((spec.topic == HZ_TOPIC_MAINTENANCE && spec.kind == kMaintenanceScheduled) ||
        (spec.topic == HZ_TOPIC_PREEMPTION && spec.kind == kPreemptionScheduled))) {
    return Status::InvalidArgument(
        "only maintenance and preemption events of kind SCHEDULED are approvable");
  }
  return Status::Ok();
}

EventSpec MakeFailure(FailureKind kind, uint32_t device_index, uint64_t errors) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_FAILURE;
  spec.kind = kind;
  FailurePayload p{};
  p.device_index = kind == kFailureHostFailed ? kAllDevices : device_index;
  p.errors = CapacityBucket(errors);
  spec.SetPayload(p);
  return spec;
}

EventSpec MakeMaintenance(MaintenanceKind kind, uint64_t deadline_s, uint64_t duration_s,
                          uint32_t device_index, bool approvable) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_MAINTENANCE;
  spec.kind = kind;
  bool scheduled = kind == kMaintenanceScheduled;
  spec.flags = scheduled && approvable ? HZ_EVENT_F_APPROVABLE : 0;
  spec.deadline_s = scheduled ? RoundDownTime(deadline_s) : 0;
  MaintenancePayload p{};
  p.duration_s = RoundDownTime(duration_s);
  p.device_index = device_index;
  spec.SetPayload(p);
  return spec;
}

EventSpec MakePreemption(PreemptionKind kind, uint64_t deadline_s, uint32_t devices,
                         uint32_t device_index, bool approvable) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_PREEMPTION;
  spec.kind = kind;
  bool scheduled = kind == kPreemptionScheduled;
  spec.flags = scheduled && approvable ? HZ_EVENT_F_APPROVABLE : 0;
  spec.deadline_s = scheduled ? RoundDownTime(deadline_s) : 0;
  PreemptionPayload p{};
  p.devices = devices;  // the tenant's own allocation: exact
  p.device_index = devices == 1 ? device_index : kAllDevices;
  spec.SetPayload(p);
  return spec;
}

EventSpec MakeCapacityAvailable(hz_device_kind device_kind, uint64_t free_devices) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_CAPACITY;
  spec.kind = kCapacityAvailable;
  CapacityPayload p{};
  p.count = CapacityBucket(free_devices);  // not the tenant's own devices: bucketed
  p.device_kind = static_cast<uint16_t>(device_kind);
  spec.SetPayload(p);
  return spec;
}

EventSpec MakeAllocationCapacity(CapacityKind kind, uint64_t reservation_id, uint64_t count,
                                 uint64_t devices_now, hz_device_kind device_kind) {
  // The counts are the tenant's own allocation, which it knows exactly anyway.
  EventSpec spec;
  spec.topic = HZ_TOPIC_CAPACITY;
  spec.kind = kind;
  CapacityPayload p{};
  p.reservation_id = kind == kCapacityAllocationChanged ? 0 : reservation_id;
  p.count = count;
  p.devices_now = devices_now;
  p.device_kind = static_cast<uint16_t>(device_kind);
  spec.SetPayload(p);
  return spec;
}

EventSpec MakeCongestion(CongestionKind kind, CongestionLevel level) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_CONGESTION;
  spec.kind = kind;
  CongestionPayload p{};
  p.level = level;
  spec.SetPayload(p);
  return spec;
}

EventSpec MakeCheckpoint(CheckpointKind kind, uint32_t stream, hz_ckpt_tier tier, uint64_t step,
                         uint32_t status, uint32_t flags) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_CHECKPOINT;
  spec.kind = kind;
  CheckpointPayload p{};
  p.stream = stream;
  p.tier = static_cast<uint32_t>(tier);
  p.step = step;
  p.status = status;
  p.flags = flags;
  spec.SetPayload(p);
  return spec;
}

EventSpec MakeNegotiation(NegotiationKind kind, const NegotiationPayload& payload) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_NEGOTIATION;
  spec.kind = kind;
  spec.SetPayload(payload);
  return spec;
}

EventSpec MakeHint(const HintPayload& hint) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_HINT;
  spec.kind = kHintBatchSize;
  spec.SetPayload(hint);
  return spec;
}

EventSpec MakeEnergy(EnergyLevel level, uint8_t sources) {
  EventSpec spec;
  spec.topic = HZ_TOPIC_ENERGY;
  spec.kind = kEnergyLevelChanged;
  EnergyPayload p{};
  p.level = level;
  p.sources = sources & (kEnergySourcePowerBudget | kEnergySourcePrice | kEnergySourceCarbon);
  spec.SetPayload(p);
  return spec;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace hz::events
