// Internal state of the checkpoint engine (engine.h). Split from engine.cc so
// the save/restore paths and the persist worker read as separate files.
#ifndef HZ_CHECKPOINT_ENGINE_IMPL_H_
#define HZ_CHECKPOINT_ENGINE_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "copy_pool.h"
#include "disk_tier.h"
#include "fair_scheduler.h"
#include "hz/checkpoint/engine.h"
#include "hz/checkpoint/manifest.h"
#include "request_queue.h"
#include "staging_pool.h"
#include "tenant_numbers.h"

namespace hz::checkpoint {

uint64_t SteadyNowUs();
// Sums span lengths up to cap; false on overflow or a null span with bytes.
bool SumSpans(std::span<const IoSpan> spans, uint64_t cap, uint64_t* total);
uint64_t WallTime10s();  // unix seconds rounded down to 10 s, as the wire reports times

// The copy of a checkpoint on another host (peer-host tier, peer.h).
enum class ReplicaState : uint8_t {
  kNone,     // not asked for (another tier), or adopted at start-up
  kPending,  // committed here; the copy is on its way
  kDone,     // durable on another host
  kFailed,   // the copy failed (replica_code says why); the local copy stands
};

// One checkpoint, staged or committed. Guarded by Engine::Impl::mu_.
struct Ckpt {
  Manifest manifest;  // chunk_crcs filled once sealed
  CkptState state = CkptState::kStaged;
  TierKind tier = TierKind::kLocalDisk;
  std::vector<uint32_t> chunks;  // staging-pool chunks while held in memory
  bool sealed = false;           // manifest.chunk_crcs valid
  bool want_memory = false;      // placed in the host-memory tier
  bool in_index = true;          // false once deleted, evicted or failed
  bool job_active = false;       // the worker still reads the chunks
  bool cancelled = false;        // deleted while persisting
  bool failed = false;           // persist failed (kept in memory while the budget allows)
  bool settled = false;          // the worker is done: events published, evictions removed
  int pins = 0;                  // restores in progress
  uint64_t disk_reserved = 0;    // bytes charged to the tenant's disk quota
  ReplicaState replica = ReplicaState::kNone;
  StatusCode replica_code = StatusCode::kOk;  // why, when replica is kFailed
};

struct QuiesceDecl {
  IoSpan word;
  std::vector<IoSpan> slices;
  std::vector<uint32_t> reserved;  // staging chunks set aside for the next JIT save
};

// A checkpoint committed on the local disk (found at start, or a replica
// stored): durable, sealed and settled, holding disk_reserved bytes of disk.
std::shared_ptr<Ckpt> CommittedOnDisk(Manifest m, uint64_t disk_reserved);

struct StreamState {
  Policy policy;
  bool saving = false;  // a save (or JIT save) of the stream is copying
  uint64_t saving_step = 0;
  std::map<uint64_t, std::shared_ptr<Ckpt>> ckpts;  // complete snapshots only
  std::unique_ptr<QuiesceDecl> quiesce;
  // While a just-in-time save copies the registration (saving with
  // saving_step == kLatestStep): its cancel flag, owned by OnNotice.
  std::atomic<bool>* jit_cancel = nullptr;
};

struct TenantState {
  TenantLimits limits;
  std::map<StreamId, StreamState> streams;
  TenantStats stats;
  uint64_t held_chunks = 0;    // staging-pool chunks held (staged + memory tier)
  uint64_t memory_chunks = 0;  // of which memory-tier checkpoints
  bool forgotten = false;      // removed: its number is never used again, it has no share
};

// A persist (or seal, for the memory tier) handled by the worker thread.
struct Job {
  uint64_t id = 0;
  TenantNo tenant = 0;
  StreamId stream = 0;
  std::shared_ptr<Ckpt> ckpt;
  Manifest manifest;  // worker's copy; crcs filled as chunks are sealed
  uint64_t not_before_us = 0;
  uint64_t next_chunk = 0;     // next chunk to submit
  uint64_t submitted = 0;      // chunk writes the tier accepted
  uint64_t done_chunks = 0;    // of which completed
  bool all_submitted = false;  // no longer in active_
  uint64_t write_id = 0;
  bool started = false;
  bool failed = false;
  uint64_t first_write_us = 0;
  uint64_t writes_done_us = 0;  // the last chunk write completed
  uint64_t commit_us = 0;       // time the commit took
  uint32_t rpo_s = 0;           // the stream's objective bounds any stagger delay
  uint64_t admitted_us = 0;     // when the save completed (the RPO clock starts)
};

using PendingEvent = CheckpointEvent;

// Numbers start at 1: no tenant owns 0.
inline constexpr TenantNo kNoTenant = 0;

class Engine::Impl {
 public:
  void PrepareStaging();  // Engine::PrepareStaging
  // Reads the tenant numbers (<root>/tenants.json); before Recover.
  Status LoadTenantNumbers();
  // The tenant's number, or kNoTenant when it has none yet.
  TenantNo NumberOf(const TenantId& tenant) const {
    return numbers_.Find(tenant).value_or(kNoTenant);
  }
  // The tenant's number, a new one when it has none (policies, limits).
  StatusOr<TenantNo> AssignNumber(const TenantId& tenant) { return numbers_.FindOrAssign(tenant); }
  std::vector<StreamId> StreamsOnDisk(TenantNo tenant) const { return disk_->Streams(tenant); }
  // Deletes every checkpoint of the tenant, then forgets its number.
  Status ForgetTenant(const TenantId& tenant, TenantNo number);

  Impl(const EngineConfig& config, std::unique_ptr<StagingPool> pool,
       std::unique_ptr<DiskTier> disk);
  ~Impl();

  Status Recover();
  void Start();

  Status SetLimits(TenantNo tenant, const TenantLimits& limits);
  // check_peer: a peer-host policy needs a live peer now (a tenant's
  // request); a replica's stream takes the source's policy as it is.
  Status SetPolicy(TenantNo tenant, StreamId stream, const Policy& policy, bool check_peer = true);
  // Delete, then the replicas of a peer-host stream's checkpoint (replica.cc).
  Status DeleteAndForget(const TenantId& name, TenantNo tenant, StreamId stream, uint64_t step);
  Status DeleteReplica(TenantNo tenant, StreamId stream, uint64_t step, uint32_t digest,
                       const std::string& source);
  bool IsCopyLocked(const Ckpt& c, const std::string& source, uint32_t digest) const;
  Status StoreReplica(TenantNo tenant, const ReplicaIn& in);
  void ResumeReplicas();
  Status Save(TenantNo tenant, const SaveRequest& req, SaveResult* result);
  Status Restore(TenantNo tenant, const RestoreRequest& req, RestoreResult* result);
  Status List(TenantNo tenant, StreamId stream, uint64_t start_after, uint32_t max_entries,
              std::vector<ListEntry>* entries, bool* more);
  // *replicated, when given, gets the deleted checkpoint's manifest if its
  // stream is of the peer-host tier (its replica is to go too).
  Status Delete(TenantNo tenant, StreamId stream, uint64_t step,
                std::optional<Manifest>* replicated = nullptr);
  Status DeclareQuiesce(TenantNo tenant, StreamId stream, IoSpan word,
                        std::span<const IoSpan> slices);
  Status CancelQuiesce(TenantNo tenant, StreamId stream);
  std::vector<NoticeOutcome> OnNotice(TenantNo tenant,
                                      std::chrono::steady_clock::time_point deadline,
                                      const std::set<StreamId>* only);
  Status WaitDurable(TenantNo tenant, StreamId stream, uint64_t step,
                     std::chrono::milliseconds timeout);
  Status Flush(std::chrono::milliseconds timeout);
  void RunAsync(const TenantId& tenant, std::function<void()> fn);
  Stats GetStats() const;
  WaitingTime StorageWaiting() const;
  std::vector<Decision> Decisions() const;

 private:
  // --- helpers under mu_ ---
  TenantState& TenantLocked(TenantNo tenant);
  StreamState* StreamLocked(TenantNo tenant, StreamId stream);
  void DecideLocked(Decision::Kind kind, TenantNo tenant, StreamId stream, uint64_t step,
                    uint64_t value);
  // Returns the chunks to the pool when nothing needs them any more.
  void MaybeReleaseLocked(TenantNo tenant, Ckpt* c);
  // Evicts durable checkpoints beyond retention; appends disk removals.
  void RetainLocked(TenantNo tenant, StreamId stream, StreamState* s,
                    std::vector<std::shared_ptr<Ckpt>>* remove_from_disk);
  // Waits for n chunks within the deadline (or until *cancel returns true:
  // kCancelled); takes them on success.
  Status AcquireLocked(std::unique_lock<std::mutex>& lock, TenantNo tenant, size_t n,
                       std::chrono::steady_clock::time_point deadline,
                       const std::function<bool()>* cancel, std::vector<uint32_t>* chunks,
                       uint64_t* waited_us);
  // Registers a complete snapshot (staged; durable at once in the memory
  // tier) and queues its job; appends retention's disk removals.
  std::shared_ptr<Ckpt> AdmitLocked(TenantNo tenant, StreamId stream, StreamState* s,
                                    Manifest manifest, std::vector<uint32_t> chunks,
                                    bool want_memory, uint64_t disk_reserved,
                                    std::vector<std::shared_ptr<Ckpt>>* evicted);
  // Validates a new step against what the stream holds (SPEC.md §7.5.2).
  Status CheckStepLocked(const StreamState& s, uint64_t step) const;
  void ReleaseChunksLocked(TenantNo tenant, const std::vector<uint32_t>& chunks);
  // The tenant's weighted share of `total` among the tenants the engine knows.
  uint64_t ShareLocked(const TenantState& t, uint64_t total) const;
  // Staging chunks the tenant may hold at once.
  uint64_t StagingQuotaLocked(const TenantState& t) const;
  // Bytes the tenant may hold on disk (committed plus in flight).
  uint64_t DiskQuotaLocked(const TenantState& t) const;
  // Staging chunks every quiescence registration holds, and their cap.
  uint64_t QuiesceChunksLocked() const;
  uint64_t QuiesceCapChunks() const;
  void DropQuiesceLocked(TenantNo tenant, StreamState* s);
  // Cancels the stream's just-in-time copy, if one is running, and waits
  // until it has stopped reading the registered guest memory. The copy
  // checks its flag between pieces, so the wait is short.
  void StopJitLocked(std::unique_lock<std::mutex>& lock, TenantNo tenant, StreamId stream);
  // The stall budget a save waits for staging memory: the policy's, capped
  // by the operator's maximum.
  std::chrono::milliseconds StallBudget(const Policy& p) const;
  void RemoveFromDisk(const std::vector<std::shared_ptr<Ckpt>>& ckpts);
  // Chooses memory or disk for a new snapshot and checks the disk quota.
  Status PlaceLocked(TenantNo tenant, StreamId stream, const StreamState& s, const Manifest& m,
                     bool* want_memory, uint64_t* disk_reserved);

  std::vector<CopyOp> SnapshotOps(std::span<const IoSpan> slices, std::span<const uint8_t> meta,
                                  const std::vector<uint32_t>& chunks) const;
  void ZeroTail(const Manifest& m, const std::vector<uint32_t>& chunks) const;
  void Publish(const std::vector<PendingEvent>& events);

  // --- peer-host tier (replica.cc) ---
  // Hands a checkpoint committed here to the peer link.
  void StartReplica(TenantNo tenant, StreamId stream, const std::shared_ptr<Ckpt>& c,
                    const Policy& policy);
  void OnReplicated(TenantNo tenant, StreamId stream, const std::shared_ptr<Ckpt>& c, Status st);
  // StoreReplica's checks and disk reservation, under mu_.
  Status ReserveReplicaLocked(TenantNo tenant, const Manifest& m, uint64_t* reserved);
  // Reads, verifies and writes every chunk, then commits (StoreReplica).
  Status WriteReplica(const Manifest& m, const ChunkReader& read_chunk);
  // Lists the replica's checkpoint and applies retention.
  void AdoptReplicaLocked(TenantNo tenant, Manifest m, uint64_t reserved,
                          std::vector<std::shared_ptr<Ckpt>>* evicted);

  // --- persist worker (worker.cc) ---
  void WorkerLoop();
  void Intake(std::vector<std::shared_ptr<Job>>* fresh);
  void SealInMemory(const std::shared_ptr<Job>& job);
  bool SubmitMore(uint64_t now_us, uint64_t* retry_us);
  // Marks whether ready chunks now wait for a busy disk (StorageWaiting).
  void MarkStorageWaiting(bool disk_busy);
  void OnCompletions(const std::vector<Tier::Completion>& done);
  void FinishJob(const std::shared_ptr<Job>& job);
  void CommitLoop();
  void CompleteJob(const std::shared_ptr<Job>& job, Status st, bool cancelled);
  void Settle(const std::shared_ptr<Job>& job);
  void AbandonAll();

  const EngineConfig config_;
  std::unique_ptr<StagingPool> pool_;
  std::unique_ptr<DiskTier> disk_;
  CopyPool copier_;
  // Callers' tenants -> the numbers below. A tenant without one is kNoTenant,
  // which holds nothing, so every lookup of it finds nothing.
  TenantNumbers numbers_;

  mutable std::mutex mu_;
  std::condition_variable staging_cv_;  // chunks released
  std::condition_variable durable_cv_;  // a job finished
  std::condition_variable worker_cv_;   // new jobs or stop
  std::condition_variable jit_cv_;      // a just-in-time copy ended
  std::map<TenantNo, TenantState> tenants_;
  std::deque<std::shared_ptr<Job>> incoming_;
  std::deque<Decision> decisions_;
  uint64_t jobs_pending_ = 0;  // admitted and not finished
  uint64_t memory_tier_chunks_ = 0;
  uint64_t next_job_id_ = 1;
  bool stop_ = false;

  // Worker-only state.
  FairScheduler sched_;
  std::vector<std::shared_ptr<Job>> waiting_;                    // staggered
  std::map<TenantNo, std::deque<std::shared_ptr<Job>>> active_;  // submitting, per tenant
  std::map<uint64_t, std::shared_ptr<Job>> in_flight_jobs_;      // by job id
  std::map<TenantNo, uint64_t> last_start_us_;
  std::thread worker_;
  // Chunks waiting for the disk (the worker marks, the service measures).
  mutable std::mutex storage_mu_;
  mutable WaitingWindow storage_waiting_;

  // Request threads: run RunAsync work, per tenant in turn.
  RequestQueue requests_;
  std::vector<std::thread> requesters_;

  // Commit thread: flushes and renames while the worker keeps writing.
  std::mutex commit_mu_;
  std::condition_variable commit_cv_;
  std::deque<std::shared_ptr<Job>> commits_;
  bool commit_stop_ = false;
  std::thread committer_;
  // Faults in and registers the staging memory (PrepareStaging).
  std::thread staging_setup_;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_ENGINE_IMPL_H_
