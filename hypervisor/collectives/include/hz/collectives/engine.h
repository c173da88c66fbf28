// The collective engine: executes tenants' collectives directly over each
// rank's memory. It knows nothing of rings, vhost-user or sockets; the host
// service translates requests into these calls.
//
// Model
//  - A tenant asks for a Uid (NewUid), hands it to its ranks, and each rank
//    joins with Init. Communicators are scoped to the tenant that created the
//    uid: another tenant's Init gets kPermission.
//  - Collectives (everything except send and recv) are matched across ranks by
//    OpDesc::seq. Sequence numbers start at 0 and every rank uses each one
//    exactly once, in any posting order; seq s executes after seq s-1 has
//    completed on all ranks. When all ranks have posted seq s, the engine
//    checks that they agree on (op, count, dtype, redop, root); if not, all
//    of them complete with kMismatch. A rank whose descriptor is invalid gets
//    kInvalid at once; the other ranks of that seq then get kMismatch. Either
//    way the seq is consumed and the communicator stays usable.
//  - Send and recv do not use seq (it is ignored). Rank s's n-th send to rank
//    d pairs with rank d's n-th recv from rank s, as in NCCL; a pair that
//    disagrees on count or dtype completes with kMismatch on both sides.
//    Pairs execute as soon as both sides are posted, independent of the
//    collective sequence.
//  - Timeouts: an operation posted by some ranks but not all (or a send or
//    recv without its partner) for longer than the communicator's timeout,
//    and an Init that does not see all ranks join in time, abort the
//    communicator: every pending operation on every rank completes with
//    kTimedOut, later ones with kAborted.
//  - Destroy (a rank leaves or dies) and Abort abort the communicator: every
//    pending operation on every rank completes with kAborted, later ones too.
//  - Execution is zero-copy: inputs are read from and outputs written to the
//    ranks' IoVecs directly, in cache-sized blocks, by worker threads shared
//    by all tenants in weighted fair order (weights by priority class).
//  - Reductions run in rank order 0,1,...,p-1 for every element; fp16 and bf16
//    accumulate in fp32 and round to nearest even once; avg is sum / nranks
//    (integers truncate toward zero). Integer sum and prod wrap.
#ifndef HZ_COLLECTIVES_ENGINE_H_
#define HZ_COLLECTIVES_ENGINE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hz/collectives/types.h"
#include "hz/common/idle_class_guard.h"
#include "hz/common/waiting_window.h"

namespace hz::coll {

namespace internal {
class Comm;
class EngineImpl;
}  // namespace internal

// The size of the L3 cache this CPU shares (from sysfs), at most 32 MiB;
// 32 MiB when it cannot be read.
uint64_t DefaultStreamMinBytes();

struct EngineOptions {
  uint32_t worker_threads = 0;  // 0: std::thread::hardware_concurrency()
  // The workers' nice value (0..19, or kIdleClassNice for the kernel's idle
  // class: thread_priority.h). Above 0, a reduction yields the CPU to
  // the threads that serve requests (small collectives run inline on them):
  // one tenant's large operations then cannot delay another tenant's small
  // ones on a host short of cores. The scheduler below still shares the
  // workers among tenants by weight.
  int worker_nice = 0;
  // When set, the workers wait in the idle class and take worker_nice only
  // while they starve (idle_class_guard.h).
  std::shared_ptr<IdleClassGuard> idle_guard;
  // How long a worker in the idle class polls for the next task before it
  // sleeps, while its last wait for one was no longer (scheduler.h): a
  // tenant's back-to-back operations then start without waking a worker.
  // 0: workers sleep at once.
  uint32_t worker_poll_us = 0;
  uint32_t default_timeout_ms = 60000;  // when Constraints::timeout_ms is 0
  uint32_t max_ranks = 64;              // nranks above this is kInvalid
  uint32_t max_uids_per_tenant = 4096;  // NewUid beyond this is kLimit
  // A uid that no Init has used for this long is forgotten when its tenant
  // asks for a new one at max_uids_per_tenant, so a tenant that handed out
  // uids it never used is not locked out. 0: unused uids never expire.
  uint32_t unused_uid_lifetime_ms = 3600 * 1000;
  // What uids age by, the waiting window and the end of energy shares are
  // measured by; std::chrono::steady_clock::now when empty (tests).
  std::function<std::chrono::steady_clock::time_point()> clock;
  // The window WorkerWaiting() measures over (SPEC.md §8.5: at least 10 s
  // for a published congestion level).
  uint32_t waiting_window_ms = 10000;
  uint32_t max_seq_window = 1024;   // seq more than this ahead of the next one is kLimit
  uint32_t max_pending_p2p = 4096;  // unmatched sends + recvs per communicator (kLimit)
  // Scheduler weights of the priority classes low, normal, high.
  std::array<uint32_t, 3> priority_weights = {1, 2, 4};
  // Collectives touching at most this many bytes in total run at once on the
  // thread that completed the match (no hand-off to a worker). 0 disables.
  uint64_t inline_max_bytes = 64 * 1024;
  // Larger collectives touching at most this many bytes are started by the
  // thread that completed the match: it runs one runner's share itself
  // while the workers it woke join in, instead of waiting for a worker to
  // wake (tens of microseconds on a busy host, a large part of a 1 MiB
  // operation). Bounded so that a vhost-user thread is never tied up for
  // long, and only while no other task waits for a worker, so that under
  // contention the priority weights still decide. 0 disables.
  uint64_t caller_runs_max_bytes = 8ull << 20;
  // Collectives moving at most this many bytes (read plus written; half as
  // many when the ranks' buffers span NUMA nodes) run on one thread: more
  // threads share the memory traffic, but each costs a wake-up and a CPU the
  // ranks may want: through the service, a 2-rank 1 MiB all-reduce (4 MiB
  // moved) ran faster on one thread than on two, at half the CPU time
  // (hypervisor/service/README.md has the figures). 0: split all past the
  // inline size.
  uint64_t single_thread_max_bytes = 8ull << 20;
  // Override the block size (bytes per rank per block); 0: chosen per op.
  uint64_t block_bytes = 0;
  // Operations moving at least this many bytes (read plus written) write
  // their outputs with non-temporal stores, which bypass the caches. 0: never.
  // The default is the last-level cache size, at most 32 MiB
  // (DefaultStreamMinBytes): an operation whose working set exceeds it has
  // its outputs evicted before anyone reads them, and regular stores would
  // first read every output line from memory.
  uint64_t stream_min_bytes = DefaultStreamMinBytes();
  // Runs each delivery of completions (an operation's, to every rank; an
  // abort's, to every waiter): a service whose callbacks wake other threads
  // holds those wake-ups here until all are handed over (vdev::PostBatch).
  // Empty: the callbacks just run.
  std::function<void(const std::function<void()>& deliver)> deliver_batch;
};

// How an operation was executed (the micro-level choice).
enum class Algorithm : uint8_t {
  kNone,             // nothing to move (barrier, count 0)
  kInline,           // one pass on the matching thread
  kSingleThread,     // blocked, one worker
  kBlockedParallel,  // blocked, several workers; each block reduced across ranks while hot in cache
};
inline constexpr size_t kAlgorithmCount = 4;
const char* AlgorithmName(Algorithm a);

struct TenantStats {
  uint64_t ops_completed = 0;  // per rank: an all-reduce over 4 ranks counts 4
  uint64_t ops_failed = 0;
  uint64_t bytes = 0;        // payload bytes (B per rank, as in OpDesc)
  uint64_t blocks = 0;       // blocks executed for this tenant
  uint64_t block_bytes = 0;  // bytes read and written by those blocks
  uint64_t busy_ns = 0;      // worker time spent on this tenant's blocks
};

struct EngineStats {
  std::array<uint64_t, kOpCount> ops{};    // operations executed (one per collective)
  std::array<uint64_t, kOpCount> bytes{};  // payload bytes of those (B per rank x ranks)
  std::array<uint64_t, kAlgorithmCount> algorithms{};
  uint64_t threads_chosen = 0;  // sum of worker threads chosen over parallel ops
  uint64_t mismatches = 0;
  uint64_t invalid = 0;
  uint64_t aborts = 0;         // communicators aborted (Destroy, Abort, timeout)
  uint64_t timeouts = 0;       // communicators aborted by a timeout
  uint64_t numa_remote = 0;    // ops whose ranks' memory spans several NUMA nodes
  uint64_t caller_shares = 0;  // ops whose matching thread ran a share (caller_runs_max_bytes)
  // Of those, ops the matching thread also finished: their completions went
  // out from it rather than from a worker (no hand-over to another thread).
  uint64_t caller_finishes = 0;
  // Ops whose outputs went out with non-temporal stores (stream_min_bytes).
  uint64_t streamed = 0;
  // Times a worker polled for its next task (worker_poll_us), and tasks one
  // took at the end of such a poll, without a wake-up.
  uint64_t worker_polls = 0;
  uint64_t worker_polled_tasks = 0;
  uint64_t communicators = 0;  // live communicators
  std::map<TenantId, TenantStats> tenants;
};

enum class CommState : uint8_t { kJoining, kActive, kAborted };
const char* CommStateName(CommState s);

// What an operator may see about one communicator.
struct CommInfo {
  uint64_t id = 0;  // engine-wide, stable for the communicator's life
  TenantId tenant;
  uint32_t nranks = 0;
  uint32_t joined = 0;    // ranks that joined and have not left
  uint64_t next_seq = 0;  // next collective seq to execute
  uint32_t pending = 0;   // collectives and point-to-point ops waiting for peers
  CommState state = CommState::kJoining;
  Status abort_reason = Status::Ok();
  AbortCause abort_cause = AbortCause::kNone;
  Constraints constraints;
};

// One rank's membership in one communicator, from Init. Opaque; the engine
// keeps the communicator alive while any Member exists.
class Member {
 public:
  Member(std::shared_ptr<internal::Comm> comm, uint32_t rank);
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  uint32_t rank() const { return rank_; }
  uint32_t nranks() const;
  TenantId tenant() const;
  uint64_t comm_id() const;

 private:
  friend class internal::EngineImpl;
  std::shared_ptr<internal::Comm> comm_;
  uint32_t rank_;
};

class Engine {
 public:
  explicit Engine(EngineOptions opts = {});
  // Fails every pending operation with kShutdown, waits for running ones to
  // stop touching memory and joins the workers.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A fresh random uid owned by tenant. kLimit when the tenant already holds
  // max_uids_per_tenant uids that are not used by a live communicator.
  Status NewUid(TenantId tenant, Uid* out);

  // Forgets the tenant's uids that no communicator uses yet, e.g. when its VM
  // goes away; later Inits with them get kNotFound. Communicators end when
  // their members are destroyed (or their init times out). Returns how many.
  size_t ReleaseUnusedUids(TenantId tenant);

  // Joins rank `rank` of an `nranks` communicator. done(kOk, member) once all
  // ranks have joined; otherwise done(error, nullptr) with kTimedOut (not all
  // joined in time), kPermission (uid of another tenant), kNotFound (unknown
  // uid, or one whose communicator has ended: every member destroyed, or its
  // init timed out), kExists (rank taken), kMismatch (nranks differs from the
  // first joiner's), kAborted (the uid's communicator was aborted and still
  // has members), kInvalid (nranks 0 or above max_ranks, rank >= nranks, bad
  // priority class), kShutdown.
  void Init(TenantId tenant, const Uid& uid, uint32_t nranks, uint32_t rank, Constraints c,
            std::function<void(Status, std::shared_ptr<Member>)> done);

  // One rank's part of an operation; done gets the outcome (see the model
  // above; kInvalid for a bad descriptor, kLimit when too far ahead).
  void Post(const std::shared_ptr<Member>& m, OpDesc op, Done done);

  // The rank leaves (or died). Its pending operations, and every other
  // rank's, complete with kAborted; the communicator accepts nothing more.
  // When Destroy returns the engine no longer touches this member's memory,
  // so the service may unmap it. Idempotent. Must not be called from a Done
  // callback (it would wait for itself); Abort may be.
  // cause says why (a session that ended, or a rank's explicit destroy); it
  // is what AbortCauseOf reports to the other ranks.
  void Destroy(const std::shared_ptr<Member>& m, AbortCause cause = AbortCause::kSessionEnded);

  // Aborts the whole communicator: all pending and future operations on every
  // rank complete with kAborted. Does not wait for running blocks.
  void Abort(const std::shared_ptr<Member>& m, AbortCause cause = AbortCause::kAbortCalled);

  // Live upgrade of the service: the communicators go on in another
  // process's engine.
  //
  // Takes back every operation of m that has not started (a collective
  // waiting for other ranks or for an earlier seq, a send or receive waiting
  // for its partner), as if it had never been posted: its done runs with
  // kTryAgain before Withdraw returns. Nothing else completes a posted
  // operation with kTryAgain. Operations running are left alone, and so is
  // a post already answered (an invalid descriptor). Returns how many.
  size_t Withdraw(const std::shared_ptr<Member>& m);
  // What re-forms m's membership in another engine (kState unless the
  // communicator is active).
  Status SaveMember(const std::shared_ptr<Member>& m, MemberState* out) const;
  // Init for a communicator that was formed in another engine: the first
  // rank to rejoin creates the uid here for tenant (it counts against
  // max_uids_per_tenant), the others must bring the same nranks,
  // constraints and next_seq (else kMismatch). The communicator is active
  // once every rank rejoined, with collectives continuing at next_seq; the
  // ranks that do not come within its timeout abort it, as for Init. An
  // Init on such a uid gets kExists.
  void Rejoin(TenantId tenant, const MemberState& state,
              std::function<void(Status, std::shared_ptr<Member>)> done);

  // Why m's communicator was aborted (kNone while it is not). The first
  // cause wins: later destroys of an aborted communicator do not change it.
  AbortCause AbortCauseOf(const std::shared_ptr<Member>& m) const;

  // Graceful stop: everything pending completes with kShutdown, running
  // operations stop after their current block; later calls get kShutdown.
  // Must not be called from a Done callback.
  void Shutdown();

  EngineStats Stats() const;
  std::vector<CommInfo> Communicators() const;

  // The operator's weight for the tenant (1..1000; 1 until set): its
  // communicators' share of the workers is the priority class's weight
  // times this one, so a heavier tenant gets more worker time under load.
  void SetTenantWeight(const TenantId& tenant, uint32_t weight);
  // The weight the tenant's communicators are scheduled with (read-only).
  uint32_t TenantWeight(const TenantId& tenant) const;

  // Energy slack (SPEC.md §7.10): until `until` (by EngineOptions::clock)
  // the tenant's weight is scaled to percent (1..100) of itself, so under
  // contention its share of the workers falls by at most 100 - percent of
  // what it was, and the other tenants' shares only grow. 100, or a time
  // already past, restores the full weight.
  void SetTenantShare(const TenantId& tenant, uint32_t percent,
                      std::chrono::steady_clock::time_point until);

  // Of the last waiting_window_ms: how long collective work waited for a
  // worker while every worker was busy (waiting_window.h says why this
  // measures host memory congestion).
  WaitingTime WorkerWaiting() const;

  // Number of worker threads.
  uint32_t workers() const;

 private:
  std::unique_ptr<internal::EngineImpl> impl_;
};

}  // namespace hz::coll

#endif  // HZ_COLLECTIVES_ENGINE_H_
