// Value types shared by the checkpoint engine's public interface.
//
// The engine knows nothing of rings, sockets or guest-physical addresses: the
// host service translates a guest request into these types (slices become host
// memory spans, the tenant comes from the VM binding) and maps the engine's
// hz::Status back to the wire.
#ifndef HZ_CHECKPOINT_TYPES_H_
#define HZ_CHECKPOINT_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "protocol/harmonaize.h"

namespace hz::checkpoint {

// A span of host memory: a guest slice after the service mapped it.
struct IoSpan {
  uint8_t* data = nullptr;
  size_t len = 0;
};

// The engine's own number for a tenant: its directory under the root
// (<root>/<number>/...). Callers name tenants by hz::TenantId; the engine
// keeps the numbering (in <root>/tenants.json), so that what was saved under
// a number is found again after a restart.
using TenantNo = uint64_t;
using StreamId = uint32_t;

// Reserved step meaning "the newest checkpoint" (HZ_STEP_LATEST).
inline constexpr uint64_t kLatestStep = HZ_STEP_LATEST;

// Where a checkpoint is held; values equal enum hz_ckpt_tier.
enum class TierKind : uint32_t {
  kHostMemory = HZ_TIER_HOST_MEMORY,  // host RAM: survives the guest, not the host
  kLocalDisk = HZ_TIER_LOCAL_DISK,    // committed files on the host's disk
  kPeerHost = HZ_TIER_PEER_HOST,      // local disk plus a replica on another host (peer.h)
};

// Values equal enum hz_ckpt_state.
enum class CkptState : uint32_t {
  kStaged = HZ_CKPT_STAGED,    // snapshot in host memory, persist pending
  kDurable = HZ_CKPT_DURABLE,  // committed at its tier
};

// A tenant's declaration for one stream (HZ_OP_CKPT_POLICY).
struct Policy {
  uint32_t retention = 1;                // durable checkpoints kept, >= 1
  TierKind tier = TierKind::kLocalDisk;  // minimum durability wanted
  uint32_t stall_budget_ms = 1000;       // longest acceptable save stall
  uint32_t rpo_s = 0;                    // recovery-point objective; 0: none declared
  bool auto_save_on_notice = false;      // snapshot on a preemption/maintenance notice
};

// Provider-side limits for one tenant. A tenant's weighted share of a
// resource is total * weight / (sum of the weights of the tenants the engine
// knows): what each may hold at once, so that no tenant's use makes another
// tenant's request wait or fail.
struct TenantLimits {
  // Staging-pool bytes held at once (saves in flight, quiescence
  // reservations, the memory tier); 0: the tenant's weighted share of the pool.
  uint64_t staging_bytes = 0;
  // Committed plus in-flight bytes on disk; with EngineConfig::disk_bytes set,
  // also at most the tenant's weighted share of it.
  uint64_t disk_bytes = 64ull << 30;
  uint32_t max_streams = 16;  // streams with a policy
  // Share of staging, the memory tier, disk space and disk bandwidth, 1..1000.
  uint32_t weight = 1;
};

// Kinds of event the engine publishes: topic HZ_TOPIC_CHECKPOINT, values as
// SPEC.md §8.3.6.
enum class EventKind : uint16_t {
  kDurable = 0,    // checkpoint (stream, step) is committed at `tier`
  kFailed = 1,     // persisting it failed; `status` says why
  kJitSaved = 2,   // a just-in-time checkpoint was taken on a notice
  kJitFailed = 3,  // a just-in-time checkpoint could not be taken; `status` says why
};

const char* EventKindName(EventKind k);

// bit 0 of CheckpointEvent::flags for kJitSaved: that step existed already.
inline constexpr uint32_t kJitFlagExisted = 1u << 0;

// Everything the CHECKPOINT payload carries (SPEC.md §8.3.6).
struct CheckpointEvent {
  TenantId tenant;
  EventKind kind = EventKind::kDurable;
  StreamId stream = 0;
  uint64_t step = 0;
  TierKind tier = TierKind::kLocalDisk;  // where it is held (kDurable) or the policy's tier
  StatusCode status = StatusCode::kOk;   // why, for kFailed and kJitFailed
  uint32_t flags = 0;                    // kJitFlagExisted
};

// Receives the engine's events; implemented by the event bus. Called on an
// engine thread, never under an engine lock, and must not call back into the
// engine. Implement PublishEvent for the full payload; its default forwards
// to Publish.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void Publish(const TenantId& tenant, EventKind kind, StreamId stream, uint64_t step) = 0;
  virtual void PublishEvent(const CheckpointEvent& e) {
    Publish(e.tenant, e.kind, e.stream, e.step);
  }
};

// One committed or staged checkpoint (HZ_OP_CKPT_LIST).
struct ListEntry {
  uint64_t step = 0;
  uint64_t bytes = 0;   // slice bytes, without metadata
  uint64_t time_s = 0;  // completion time, unix seconds, rounded down to 10 s
  CkptState state = CkptState::kStaged;
  TierKind tier = TierKind::kLocalDisk;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_TYPES_H_
