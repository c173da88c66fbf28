// What a publisher hands to the bus: topic, kind, flags, deadline and an
// 80-byte payload. The kinds and payload layouts below are the event
// vocabulary of SPEC.md §8.3; every multi-byte field is little-endian and every
// payload struct fits hz_event::payload. Builders apply the coarse-value rules
// (coarse.h) so publishers cannot bypass them. No payload names another tenant
// or a physical identifier: devices appear only as tenant-visible indices.
#ifndef HZ_EVENTS_EVENT_SPEC_H_
#define HZ_EVENTS_EVENT_SPEC_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "hz/events/coarse.h"
#include "hz/events/status.h"
#include "protocol/harmonaize.h"

namespace hz::events {

// A device index meaning "the whole allocation".
inline constexpr uint32_t kAllDevices = 0xffffffffu;

// Kinds per topic.
enum FailureKind : uint16_t {
  kFailureDeviceFatal = 0,     // uncorrectable fatal errors: the device is lost
  kFailureDeviceNonFatal = 1,  // uncorrectable non-fatal errors: results suspect
  kFailureHost = 2,            // the host carrying the allocation failed
};
enum MaintenanceKind : uint16_t {
  kMaintenanceScheduled = 0,  // deadline_s: when it starts at the latest
  kMaintenanceStarted = 1,
  kMaintenanceCancelled = 2,
  kMaintenanceCompleted = 3,
};
enum PreemptionKind : uint16_t {
  kPreemptionNotice = 0,  // deadline_s: when the devices are taken
  kPreemptionCancelled = 1,
};
enum CapacityKind : uint16_t {
  kCapacityAvailable = 0,            // provider-wide free devices of a kind (bucketed)
  kCapacityReservationStarted = 1,   // devices of a reservation were attached
  kCapacityReservationEnded = 2,     // reservation ran out; devices detached
  kCapacityReservationReleased = 3,  // tenant gave devices back (NEG_RELEASE)
};
enum CongestionKind : uint16_t {
  kCongestionFabric = 0,      // network between the tenant's hosts
  kCongestionHostMemory = 1,  // host memory bandwidth
  kCongestionStorage = 2,     // checkpoint storage
};
enum CheckpointKind : uint16_t {
  kCheckpointDurable = 0,   // a save reached its tier
  kCheckpointFailed = 1,    // persisting a save failed
  kCheckpointJitSaved = 2,  // a just-in-time save was taken on a notice
};
enum NegotiationKind : uint16_t {
  kNegotiationRevoked = 0,         // an accepted reservation cannot be honoured
  kNegotiationOfferWithdrawn = 1,  // a pending offer lost its capacity
};
enum HintKind : uint16_t {
  kHintBatchSize = 0,
};
enum EnergyKind : uint16_t {
  kEnergyLevelChanged = 0,
};
enum LostKind : uint16_t {
  kLostOverflow = 0,
};

// Payload layouts.
struct FailurePayload {
  uint32_t device_index;  // tenant-visible index, or kAllDevices
  uint32_t reserved;
  uint64_t errors;  // new uncorrectable errors, power-of-two bucket
};
struct MaintenancePayload {
  uint64_t duration_s;  // expected impact, rounded down to 10 s; 0 unknown
  uint32_t device_index;
  uint32_t reserved;
};
struct PreemptionPayload {
  uint32_t devices;  // devices the tenant loses, power-of-two bucket
  uint32_t reserved;
};
struct CapacityPayload {
  uint64_t reservation_id;  // 0 for kCapacityAvailable
  uint64_t count;           // devices of this reservation, or bucketed free devices
  uint64_t devices_now;     // devices the tenant holds now (own allocation)
  uint16_t device_kind;     // enum hz_device_kind
  uint16_t reserved[3];
};
struct CongestionPayload {
  uint8_t level;  // enum CongestionLevel
  uint8_t reserved[7];
};
struct CheckpointPayload {
  uint32_t stream;
  uint32_t tier;  // enum hz_ckpt_tier
  uint64_t step;
};
struct NegotiationPayload {
  uint64_t negotiation_id;
  uint64_t reservation_id;  // 0 when the event concerns an offer
  uint64_t offer_id;        // 0 when the event concerns a reservation
  uint32_t reason;          // enum RevokeReason
  uint32_t reserved;
};
enum RevokeReason : uint32_t {
  kRevokeHardwareFailure = 0,
  kRevokeCapacityLost = 1,
  kRevokeAttachFailed = 2,
  kRevokeOperator = 3,
};
struct HintPayload {
  uint32_t suggested;
  uint32_t min_batch;
  uint32_t max_batch;
  uint32_t step;
  uint32_t devices_now;
  uint32_t devices_peak;
};
struct EnergyPayload {
  uint8_t level;  // enum EnergyLevel
  uint8_t reserved[7];
};
// The LOST record: events first..last (inclusive) fell out of the retained
// window before this subscriber read them.
struct LostPayload {
  uint64_t lost;
  uint64_t first_seq;
  uint64_t last_seq;
};

static_assert(sizeof(FailurePayload) <= HZ_EVENT_PAYLOAD_BYTES);
static_assert(sizeof(CapacityPayload) <= HZ_EVENT_PAYLOAD_BYTES);
static_assert(sizeof(NegotiationPayload) <= HZ_EVENT_PAYLOAD_BYTES);
static_assert(sizeof(HintPayload) <= HZ_EVENT_PAYLOAD_BYTES);
static_assert(sizeof(LostPayload) == 24);

// One event before the bus gives it a sequence number and a time.
struct EventSpec {
  uint16_t topic = 0;  // enum hz_topic, never HZ_TOPIC_LOST (the bus makes those)
  uint16_t kind = 0;
  uint32_t flags = 0;       // only HZ_EVENT_F_APPROVABLE
  uint64_t deadline_s = 0;  // 0 or unix seconds; the bus rounds it down
  std::array<uint8_t, HZ_EVENT_PAYLOAD_BYTES> payload{};

  template <typename T>
  void SetPayload(const T& value) {
    static_assert(sizeof(T) <= HZ_EVENT_PAYLOAD_BYTES);
    payload.fill(0);
    std::memcpy(payload.data(), &value, sizeof(T));
  }
};

// Checks what the bus accepts: a known topic other than LOST, known flags,
// APPROVABLE only on maintenance and preemption.
Status ValidateSpec(const EventSpec& spec);

// Builders, one per topic; each applies the coarse-value rules.
EventSpec MakeFailure(FailureKind kind, uint32_t device_index, uint64_t errors);
EventSpec MakeMaintenance(MaintenanceKind kind, uint64_t deadline_s, uint64_t duration_s,
                          uint32_t device_index, bool approvable);
EventSpec MakePreemption(PreemptionKind kind, uint64_t deadline_s, uint32_t devices,
                         bool approvable);
EventSpec MakeCapacityAvailable(hz_device_kind device_kind, uint64_t free_devices);
EventSpec MakeReservationCapacity(CapacityKind kind, uint64_t reservation_id, uint64_t count,
                                  uint64_t devices_now, hz_device_kind device_kind);
EventSpec MakeCongestion(CongestionKind kind, CongestionLevel level);
EventSpec MakeCheckpoint(CheckpointKind kind, uint32_t stream, hz_ckpt_tier tier, uint64_t step);
EventSpec MakeNegotiation(NegotiationKind kind, uint64_t negotiation_id, uint64_t reservation_id,
                          uint64_t offer_id, RevokeReason reason);
EventSpec MakeHint(const HintPayload& hint);
EventSpec MakeEnergy(EnergyLevel level);

// Something events can be published to. EventBus implements it; engines take
// a sink so tests can record what they publish.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Appends `spec` to `tenant`'s log; *seq (optional) receives its sequence number.
  virtual Status Publish(const std::string& tenant, const EventSpec& spec, uint64_t* seq) = 0;
};

// Tenant and subscriber names become directory and key names: 1-64 of
// [A-Za-z0-9._-], not "." or "..".
bool ValidName(const std::string& name);

}  // namespace hz::events

#endif  // HZ_EVENTS_EVENT_SPEC_H_
