// The checkpoint engine: provider-executed checkpoints for tenants.
//
// Save (two phases, after CheckFreq): the caller's slices are copied into a
// bounded, preallocated host staging pool (the only stall the tenant sees);
// a background worker then seals each chunk with CRC32C and either keeps the
// snapshot in the host-memory tier or persists it to local disk with io_uring
// (O_DIRECT, registered buffers) and commits a manifest atomically. An
// EventSink hears "durable" once the checkpoint is committed.
//
// Placement and timing are the provider's: host memory first when the policy
// allows it and the memory-tier budget has room, otherwise disk; chunk writes
// of different tenants are interleaved by deficit round robin under a token
// bucket per tenant (a fair share of the configured disk bandwidth), and the
// start of a persist may be staggered within the stream's recovery-point
// objective. Every such choice is recorded (Decisions()).
//
// Restore verifies the size and checksum of every chunk before the first byte
// is written to the destination. On start-up the engine adopts every committed
// checkpoint under its root and removes what an interrupted persist left.
// Memory-tier checkpoints live in this process's staging pool: they survive
// the guest, not a restart of the host service (policies do).
//
// Quotas: a tenant's disk quota must hold retention + 1 checkpoints, since
// the oldest is evicted only after the newest is committed.
//
// Disk layout: <root>/tenants.json (tenant -> number, tenant_numbers.h),
//              <root>/<tenant number>/<stream>/policy.json and
//              <root>/<tenant number>/<stream>/<step, 20 digits>/{data,manifest.json}
// A step directory without a valid manifest.json was never committed.
//
// Thread safety: every public method may be called from any thread.
#ifndef HZ_CHECKPOINT_ENGINE_H_
#define HZ_CHECKPOINT_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "hz/checkpoint/peer.h"
#include "hz/checkpoint/types.h"
#include "hz/common/idle_class_guard.h"
#include "hz/common/waiting_window.h"

namespace hz::checkpoint {

struct EngineConfig {
  std::string root;                      // directory of the local-disk tier (created if absent)
  size_t chunk_bytes = 4u << 20;         // staging/persist unit; multiple of 4096
  size_t staging_bytes = 256u << 20;     // staging pool size; rounded down to whole chunks
  size_t memory_tier_bytes = 64u << 20;  // part of the pool that may hold memory-tier checkpoints
  unsigned queue_depth = 16;             // io_uring writes in flight
  unsigned copy_threads = 2;             // snapshot memcpy threads (1: copy on the caller)
  unsigned request_threads = 2;          // threads running RunAsync work (1..64)
  unsigned tenant_request_threads = 1;   // of which one tenant's work may use at once
  // Nice value of every thread above, or kIdleClassNice (thread_priority.h);
  // 0: the caller's.
  int thread_nice = 0;
  // When set, those threads wait in the idle class and take thread_nice only
  // while they starve (idle_class_guard.h).
  std::shared_ptr<IdleClassGuard> idle_guard;
  size_t parallel_copy_min_bytes = 8u << 20;  // smaller snapshots are copied on the caller
  uint64_t disk_bandwidth_bytes_per_s = 0;    // bandwidth shared by tenants; 0: unthrottled
  uint32_t stagger_ms = 0;                    // spacing between persist starts of different tenants
  bool direct_io = true;                      // O_DIRECT; falls back to buffered I/O where refused
  bool register_buffers = true;               // io_uring_register_buffers for the staging pool
  size_t max_decisions = 256;                 // decision log entries kept
  uint32_t max_stall_budget_ms = 60000;       // cap on a policy's stall_budget_ms
  uint32_t jit_max_attempts = 64;             // copies per stream and notice of a JIT save
  uint32_t waiting_window_ms = 10000;         // the window StorageWaiting() measures over
  // Open leaves the staging memory to fault in as it is used, and to be
  // registered with io_uring, until PrepareStaging: for a process started
  // after a crash, whose tenants wait until it serves.
  bool populate_staging_later = false;
  // All tenants' committed plus in-flight bytes on disk; 0: no cap. Each
  // tenant may use its weighted share of it.
  uint64_t disk_bytes = 0;
  // Staging memory all quiescence registrations may hold together; 0: half
  // the pool.
  uint64_t quiesce_bytes = 0;
  TenantLimits default_limits;  // for tenants without SetLimits
  EventSink* sink = nullptr;    // may be null; must outlive the engine
  // The peer-host tier (peer.h); null: policies naming it are kNotSupported.
  // Must outlive the engine, and have called every done before it goes.
  PeerLink* peer = nullptr;
};

struct SaveRequest {
  TenantId tenant;
  StreamId stream = 0;
  uint64_t step = 0;               // 1..2^64-2, above every step the stream holds
  std::span<const IoSpan> slices;  // at least one; empty slices allowed
  std::span<const uint8_t> meta;   // may be empty
  // Optional: once it returns true, the save stops waiting for staging and
  // copying and answers kCancelled without a checkpoint. Polled every few
  // milliseconds, possibly from several threads at once.
  std::function<bool()> cancelled = nullptr;
};

struct SaveResult {
  uint64_t step = 0;
  CkptState state = CkptState::kStaged;
  uint32_t stall_us = 0;  // time spent in Save (validation, backpressure, copy)
};

struct RestoreRequest {
  TenantId tenant;
  StreamId stream = 0;
  uint64_t step = kLatestStep;     // or a given step
  std::span<const IoSpan> slices;  // same count and sizes as saved; empty: probe
  // Optional, as for SaveRequest: the restore stops reading, verifying or
  // writing the destination and answers kCancelled (the destination may be
  // partly written).
  std::function<bool()> cancelled = nullptr;
};

struct RestoreResult {
  uint64_t step = 0;
  uint64_t bytes = 0;                    // slice bytes written
  std::vector<uint8_t> meta;             // the saved metadata
  TierKind tier = TierKind::kLocalDisk;  // where it was read from
};

// Outcome of OnNotice for one opted-in stream.
struct NoticeOutcome {
  StreamId stream = 0;
  Status status = Status::Ok();  // kOk: snapshot taken (or that step was already saved)
  uint64_t step = 0;             // the step read from the quiescence word
  uint32_t attempts = 0;         // seqlock copies tried
  bool existed = false;          // kOk without a new checkpoint: that step was saved already
};

// One provider decision, for metrics and hzctl.
struct Decision {
  enum class Kind : uint8_t {
    kPlaceMemory,       // kept in the host-memory tier
    kPlaceDisk,         // persisted to local disk (policy asks for disk)
    kSpillToDisk,       // policy allowed memory but the memory tier was full
    kStagger,           // persist start delayed; value = delay in microseconds
    kBackpressure,      // save waited for staging; value = wait in microseconds
    kRejectAgain,       // save refused with kAgain; value = bytes asked
    kEvict,             // dropped by retention
    kJit,               // just-in-time snapshot; value = attempts
    kRecoveredCleanup,  // start-up removed an uncommitted step directory
    kKeepAfterFailure,  // persist failed; the snapshot stays restorable in memory (STAGED)
    kReplicaDurable,    // the copy on another host is durable (peer-host tier)
    kReplicaFailed,     // the copy on another host failed; value = StatusCode
    kReplicaStored,     // a copy from another host was stored here
    kReplicaRefused,    // a copy from another host was refused; value = StatusCode
  };
  uint64_t time_us = 0;  // steady clock
  Kind kind = Kind::kPlaceDisk;
  TenantId tenant;
  StreamId stream = 0;
  uint64_t step = 0;
  uint64_t value = 0;
};
const char* DecisionKindName(Decision::Kind k);

struct TenantStats {
  TenantId tenant;
  uint32_t streams = 0;
  uint64_t staging_bytes = 0;  // pool bytes held (staged + memory tier)
  uint64_t memory_tier_bytes = 0;
  uint64_t disk_bytes = 0;  // committed + in flight
  uint64_t saves = 0;
  uint64_t saves_again = 0;  // refused with kAgain
  uint64_t durable = 0;
  uint64_t persist_failures = 0;
  uint64_t restores = 0;
  uint64_t corrupt_restores = 0;
  uint64_t bytes_persisted = 0;  // chunk bytes written to disk
  // Sums over the disk persists that became durable, by phase (microseconds):
  uint64_t persist_busy_us = 0;    // first chunk write to durable
  uint64_t persist_queue_us = 0;   // save completed to first chunk write (stagger, other tenants)
  uint64_t persist_write_us = 0;   // first chunk write to the last one completed
  uint64_t persist_commit_us = 0;  // the commit's flushes and rename
  uint64_t rpo_misses = 0;         // persists that became durable later than the stream's RPO
  uint32_t jit_copies = 0;         // just-in-time copies of guest memory running now
};

struct Stats {
  size_t chunk_bytes = 0;
  size_t pool_chunks = 0;
  size_t free_chunks = 0;
  size_t memory_tier_chunks = 0;
  bool direct_io = false;  // false after a fallback to buffered I/O
  bool registered_buffers = false;
  uint64_t persists_in_flight = 0;
  std::vector<TenantStats> tenants;
};

class Engine {
 public:
  // Opens (and recovers) the engine at config.root into *engine.
  static Status Open(const EngineConfig& config, std::unique_ptr<Engine>* engine);
  // Faults in now the staging memory an Open with config will take, so
  // that Open does not (a live upgrade's successor reserves it before its
  // predecessor freezes the tenants, which then wait for Open). Nothing
  // for a config Open would refuse.
  static void ReserveStaging(const EngineConfig& config);
  // With populate_staging_later: a thread of the engine faults in the
  // staging memory and registers it with io_uring, from now on; checkpoints
  // go on meanwhile. Once; nothing otherwise.
  void PrepareStaging();
  ~Engine();  // stops the worker; staged persists that did not finish are abandoned

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Per-tenant limits; applies to later requests.
  Status SetLimits(const TenantId& tenant, const TenantLimits& limits);

  // Creates or updates a stream's policy (persisted with the stream).
  Status SetPolicy(const TenantId& tenant, StreamId stream, const Policy& policy);

  // Snapshots the slices and metadata, then returns; persistence continues in
  // the background (SPEC.md §7.5.2). A host-memory placement is kDurable at
  // once. kExists: that step is held; kInvalid: step 0, or below the highest
  // held; kBusy: another save of the stream is in progress; kAgain: staging
  // did not free up within the stall budget; kLimit: the snapshot can never
  // fit the pool or the tenant's quotas.
  Status Save(const SaveRequest& req, SaveResult* result);

  // Copies a checkpoint into req.slices after verifying every chunk (sizes and
  // CRC32C) and the metadata; on any failure no destination byte is written.
  // Empty req.slices is a probe: verify and return the metadata only.
  Status Restore(const RestoreRequest& req, RestoreResult* result);

  // Checkpoints of a stream (staged and durable) in step order, with step >
  // start_after_step, at most max_entries; *more says if any remain (with
  // max_entries 0: whether any exist).
  Status List(const TenantId& tenant, StreamId stream, uint64_t start_after_step,
              uint32_t max_entries, std::vector<ListEntry>* entries, bool* more);

  // Deletes one checkpoint (kLatestStep: the newest) from every tier; a pending
  // persist is cancelled. kBusy while it is being restored or saved.
  Status Delete(const TenantId& tenant, StreamId stream, uint64_t step);

  // Registers the quiescence word (16 bytes, 8-aligned, struct hz_quiesce_word)
  // and the state slices a just-in-time save copies for this stream, and
  // reserves staging memory for them (kLimit when it cannot). The stream's
  // policy must have auto_save_on_notice (kState). The spans must stay mapped
  // until the registration is replaced or cancelled.
  Status DeclareQuiesce(const TenantId& tenant, StreamId stream, IoSpan word,
                        std::span<const IoSpan> slices);

  // Cancels a registration (kNotFound if none). Clearing auto_save_on_notice
  // in the policy cancels it too.
  Status CancelQuiesce(const TenantId& tenant, StreamId stream);

  // A preemption/maintenance notice: snapshots every opted-in stream of the
  // tenant with a registration before the deadline (SPEC.md §7.5.7) and
  // publishes JIT_SAVED or JIT_FAILED for each.
  // only: the streams to save (those of the VMs the notice concerns); null:
  // every registered stream of the tenant.
  std::vector<NoticeOutcome> OnNotice(const TenantId& tenant,
                                      std::chrono::steady_clock::time_point deadline,
                                      const std::set<StreamId>* only = nullptr);

  // Runs fn on one of the engine's request threads, for callers that must
  // not block on Save or Restore (the host service's connection threads).
  // Each tenant's work runs in submission order; tenants with queued work
  // are served in turn, and a tenant runs at most tenant_request_threads
  // pieces at once, so its waiting requests never hold every thread. fn runs
  // exactly once: a fn still queued when the engine stops runs during its
  // destruction (Save then answers kShutdown).
  void RunAsync(const TenantId& tenant, std::function<void()> fn);

  // Stores a checkpoint another host sends for the peer-host tier (peer.h):
  // every chunk is read through in.read_chunk and its CRC32C verified, then
  // committed on the local disk exactly as a local persist (flushed before
  // kOk). The tenant's stream is created with in.policy if it does not exist.
  // kOk without reading a chunk when this very copy of in.source_host's is
  // held already (the source resends one whose answer it lost).
  // kExists: another checkpoint of that step is held here; kInvalid: below the highest step here or
  // a malformed manifest; kBusy: a save of the stream is in progress; kLimit:
  // the tenant's stream or disk quota; kCorruption: a chunk failed its check.
  Status StoreReplica(const ReplicaIn& in);
  // Host `source`'s tenant deleted (stream, step) there: its copy here goes,
  // if it is that copy (stored as source's copy and ReplicaDigest matches;
  // else kMismatch: the tenant's own checkpoint of that step stays).
  Status DeleteReplica(const TenantId& tenant, StreamId stream, uint64_t step, uint32_t digest,
                       const std::string& source);
  // Copies to the peer-host tier that a restart interrupted start again:
  // every checkpoint saved here on a peer-host stream whose copy was not
  // known durable (DURABLE or FAILED at tier PEER_HOST follows, as for a new
  // save). Once the peer link can reach another host.
  void ResumeReplicas();

  // Waits until the step is durable (kOk), failed (kIo; for the peer-host
  // tier the replica's failure), deleted (kNotFound) or the timeout passed
  // (kTimedOut). With the peer-host tier, durable means the replica is.
  Status WaitDurable(const TenantId& tenant, StreamId stream, uint64_t step,
                     std::chrono::milliseconds timeout);

  // Waits until no persist is queued or in flight.
  Status Flush(std::chrono::milliseconds timeout);

  // Whether the tenant has a number here (has ever set a policy or limits).
  bool HasTenant(const TenantId& tenant) const;
  // Deletes every checkpoint of the tenant and forgets it: a tenant created
  // later under the same name starts with nothing. kBusy (nothing forgotten)
  // while one of its checkpoints is being saved or restored.
  Status ForgetTenant(const TenantId& tenant);
  // The streams of the tenant on disk, in order (the operator's view).
  std::vector<StreamId> Streams(const TenantId& tenant) const;

  Stats GetStats() const;
  // Of the last waiting_window_ms, how long chunks ready to persist waited
  // for the disk: its queue full, or the configured disk bandwidth spent
  // (SPEC.md §8.3.5 CONGESTION/STORAGE; hz/common/waiting_window.h).
  WaitingTime StorageWaiting() const;
  std::vector<Decision> Decisions() const;  // oldest first

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_ENGINE_H_
