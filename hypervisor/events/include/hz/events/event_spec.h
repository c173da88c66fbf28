// What a publisher hands to the bus: topic, kind, flags, deadline and an
// 80-byte payload. The kinds and payload layouts below are those of SPEC.md
// §8.3; every multi-byte field is little-endian and every payload struct is
// checked against the offsets SPEC.md gives. Builders apply the coarse-value
// rules of §8.5 (coarse.h) so publishers cannot bypass them. No payload names
// another tenant or a physical identifier: devices appear only as
// tenant-visible indices.
#ifndef HZ_EVENTS_EVENT_SPEC_H_
#define HZ_EVENTS_EVENT_SPEC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/events/coarse.h"
#include "protocol/harmonaize.h"

namespace hz::events {

// A device index meaning "not one device" (the whole VM or allocation).
inline constexpr uint32_t kAllDevices = 0xffffffffu;

// Kinds per topic (SPEC.md §8.3).
enum FailureKind : uint16_t {
  kFailureDeviceFailed = 0,    // uncorrectable fatal errors: the device is lost
  kFailureDeviceDegraded = 1,  // uncorrectable non-fatal errors: results suspect
  kFailureHostFailed = 2,      // a host carrying part of the allocation failed
};
enum MaintenanceKind : uint16_t {
  kMaintenanceScheduled = 0,  // deadline_s: when it starts unless approved earlier
  kMaintenanceStarted = 1,
  kMaintenanceCancelled = 2,
  kMaintenanceCompleted = 3,
  // The host service was upgraded: the VM kept its device and its session
  // (SPEC.md §2.9). Nothing is asked of the tenant.
  kMaintenanceServiceRestarted = 4,
};
enum PreemptionKind : uint16_t {
  kPreemptionScheduled = 0,  // deadline_s: when the devices are taken
  kPreemptionStarted = 1,
  kPreemptionCancelled = 2,
};
enum CapacityKind : uint16_t {
  kCapacityAvailable = 0,            // free devices of a kind the tenant could get (bucketed)
  kCapacityReservationStarted = 1,   // devices of a reservation were attached
  kCapacityReservationEnded = 2,     // a reservation ran out; devices detached
  kCapacityReservationReleased = 3,  // the tenant gave devices back (NEG_RELEASE)
  kCapacityAllocationChanged = 4,    // failed device removed, replacement, operator action
};
enum CongestionKind : uint16_t {
  kCongestionFabric = 0,      // network between the tenant's hosts
  kCongestionHostMemory = 1,  // host memory bandwidth
  kCongestionStorage = 2,     // checkpoint storage
};
enum CheckpointKind : uint16_t {
  kCheckpointDurable = 0,    // a save reached its tier
  kCheckpointFailed = 1,     // persisting a save failed
  kCheckpointJitSaved = 2,   // a just-in-time save was taken on a notice
  kCheckpointJitFailed = 3,  // a just-in-time save could not be taken
};
enum NegotiationKind : uint16_t {
  kNegotiationReservationRevoked = 0,  // an accepted reservation cannot be honoured
  kNegotiationOfferWithdrawn = 1,      // an offer lost its capacity before it expired
  kNegotiationOfferExpired = 2,        // an offer expired without being accepted
  kNegotiationOfferMade = 3,           // an offer made outside a request (replacement)
};
enum HintKind : uint16_t {
  kHintBatchSize = 0,
};
enum EnergyKind : uint16_t {
  kEnergyLevelChanged = 0,
};
enum LostKind : uint16_t {
  kLostEvents = 0,
};

enum RevokeReason : uint32_t {
  kRevokeHardwareFailure = 0,
  kRevokeCapacityLost = 1,
  kRevokeAttachFailed = 2,
  kRevokeOperator = 3,
};

// ENERGY `sources` bits.
inline constexpr uint8_t kEnergySourcePowerBudget = 1u << 0;
inline constexpr uint8_t kEnergySourcePrice = 1u << 1;
inline constexpr uint8_t kEnergySourceCarbon = 1u << 2;

// Payload layouts.
struct FailurePayload {
  uint32_t device_index;  // tenant-visible index, or kAllDevices
  uint32_t reserved;
  uint64_t errors;  // new uncorrectable errors, power-of-two bucket; 0 if not counted
};
struct MaintenancePayload {
  uint64_t duration_s;  // expected impact, rounded down to 10 s; 0 unknown
  uint32_t device_index;
  uint32_t reserved;
};
struct PreemptionPayload {
  uint32_t devices;       // the tenant's devices taken (exact: its own allocation)
  uint32_t device_index;  // the device when exactly one is taken, else kAllDevices
};
struct CapacityPayload {
  uint64_t reservation_id;  // 0 for AVAILABLE and ALLOCATION_CHANGED
  uint64_t count;           // as the kind says (bucketed for AVAILABLE)
  uint64_t devices_now;     // devices of device_kind the tenant holds now; 0 for AVAILABLE
  uint16_t device_kind;     // enum hz_device_kind
  uint16_t reserved[3];
};
struct CongestionPayload {
  uint8_t level;  // enum CongestionLevel
};
struct CheckpointPayload {
  uint32_t stream;
  uint32_t tier;  // enum hz_ckpt_tier
  uint64_t step;
  uint32_t status;  // HZ_S_* for FAILED and JIT_FAILED, else 0
  uint32_t flags;   // JIT_SAVED bit 0: the step existed already, nothing new saved
};
struct NegotiationPayload {
  uint64_t negotiation_id;
  uint64_t reservation_id;  // 0 when the event concerns an offer
  uint64_t offer_id;        // 0 when the event concerns a reservation
  uint32_t reason;          // enum RevokeReason; 0 for OFFER_EXPIRED and OFFER_MADE
  uint32_t reserved;
  uint64_t start_s;     // OFFER_MADE: the offer's terms, exact
  uint64_t duration_s;  // OFFER_MADE
  uint64_t expires_s;   // OFFER_MADE
  uint16_t count;       // OFFER_MADE: devices offered; RESERVATION_REVOKED: devices taken back
  uint8_t locality;     // OFFER_MADE
  uint8_t device_kind;  // OFFER_MADE and RESERVATION_REVOKED
  uint32_t reserved2;
};
struct HintPayload {
  uint32_t suggested;
  uint32_t min_batch;
  uint32_t max_batch;
  uint32_t step;
  uint32_t devices_now;   // n_now: the tenant's GPUs now
  uint32_t devices_peak;  // n_peak: the most GPUs held since the declaration
};
struct EnergyPayload {
  uint8_t level;    // enum EnergyLevel
  uint8_t sources;  // kEnergySource* bits, 0 unspecified
};
// The LOST record: events first..last (inclusive) fell out of the retained
// window before this binding read them. The record's seq is last_seq.
struct LostPayload {
  uint64_t lost;
  uint64_t first_seq;
  uint64_t last_seq;
};

// The offsets SPEC.md §8.3 states.
static_assert(offsetof(FailurePayload, errors) == 8);
static_assert(offsetof(MaintenancePayload, device_index) == 8);
static_assert(offsetof(PreemptionPayload, device_index) == 4);
static_assert(offsetof(CapacityPayload, device_kind) == 24 && sizeof(CapacityPayload) == 32);
static_assert(offsetof(CheckpointPayload, status) == 16 &&
              offsetof(CheckpointPayload, flags) == 20);
static_assert(offsetof(NegotiationPayload, reason) == 24 &&
              offsetof(NegotiationPayload, start_s) == 32);
static_assert(offsetof(NegotiationPayload, count) == 56 &&
              offsetof(NegotiationPayload, locality) == 58);
static_assert(offsetof(NegotiationPayload, device_kind) == 59 && sizeof(NegotiationPayload) == 64);
static_assert(sizeof(HintPayload) == 24);
static_assert(offsetof(EnergyPayload, sources) == 1);
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

// Checks what the bus accepts: a topic of version 1.0 other than LOST, known
// flags, and APPROVABLE only on MAINTENANCE or PREEMPTION of kind SCHEDULED.
Status ValidateSpec(const EventSpec& spec);

// Builders, one per topic; each applies the coarse-value rules.
EventSpec MakeFailure(FailureKind kind, uint32_t device_index, uint64_t errors);
// deadline_s only for kMaintenanceScheduled; approvable only for it too.
EventSpec MakeMaintenance(MaintenanceKind kind, uint64_t deadline_s, uint64_t duration_s,
                          uint32_t device_index, bool approvable);
EventSpec MakePreemption(PreemptionKind kind, uint64_t deadline_s, uint32_t devices,
                         uint32_t device_index, bool approvable);
EventSpec MakeCapacityAvailable(hz_device_kind device_kind, uint64_t free_devices);
EventSpec MakeAllocationCapacity(CapacityKind kind, uint64_t reservation_id, uint64_t count,
                                 uint64_t devices_now, hz_device_kind device_kind);
EventSpec MakeCongestion(CongestionKind kind, CongestionLevel level);
EventSpec MakeCheckpoint(CheckpointKind kind, uint32_t stream, hz_ckpt_tier tier, uint64_t step,
                         uint32_t status = 0, uint32_t flags = 0);
EventSpec MakeNegotiation(NegotiationKind kind, const NegotiationPayload& payload);
EventSpec MakeHint(const HintPayload& hint);
EventSpec MakeEnergy(EnergyLevel level, uint8_t sources = 0);

// Something events can be published to. EventBus implements it; engines take
// a sink so tests can record what they publish.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Appends `spec` to `tenant`'s log; *seq (optional) receives its sequence number.
  virtual Status Publish(const TenantId& tenant, const EventSpec& spec, uint64_t* seq) = 0;
};

// Tenant and subscriber names become directory and key names: 1-64 of
// [A-Za-z0-9._-], not "." or "..".
bool ValidName(const std::string& name);

}  // namespace hz::events

#endif  // HZ_EVENTS_EVENT_SPEC_H_
