#include "hz/collectives/engine.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <queue>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "comm.h"
#include "hz/common/spin.h"
#include "hz/common/thread_priority.h"
#include "job.h"
#include "kernels.h"
#include "planner.h"
#include "protocol/harmonaize.h"
#include "scheduler.h"
#include "validate.h"

namespace hz::coll {
namespace internal {

// Callbacks collected under a lock and run after it is dropped.
struct Completions {
  std::vector<std::pair<Done, Status>> ops;
  std::vector<std::pair<InitDone, Status>> inits;
  std::vector<std::pair<InitDone, std::shared_ptr<Member>>> joined;
  bool empty() const { return ops.empty() && inits.empty() && joined.empty(); }
};

class EngineImpl {
 public:
  explicit EngineImpl(EngineOptions opts);
  ~EngineImpl();

  Status NewUid(TenantId tenant, Uid* out);
  size_t ReleaseUnusedUids(TenantId tenant);
  void Init(TenantId tenant, const Uid& uid, uint32_t nranks, uint32_t rank, Constraints c,
            InitDone done);
  void Post(const std::shared_ptr<Member>& m, OpDesc op, Done done);
  size_t Withdraw(const std::shared_ptr<Member>& m);
  Status SaveMember(const std::shared_ptr<Member>& m, MemberState* out) const;
  void Rejoin(TenantId tenant, const MemberState& state, InitDone done);
  void Destroy(const std::shared_ptr<Member>& m, AbortCause cause);
  void Abort(const std::shared_ptr<Member>& m, AbortCause cause);
  AbortCause AbortCauseOf(const std::shared_ptr<Member>& m) const;
  void Shutdown();
  EngineStats Stats() const;
  std::vector<CommInfo> Communicators() const;
  uint32_t workers() const { return sched_->threads(); }

  void SetTenantWeight(const TenantId& tenant, uint32_t weight);
  uint32_t TenantWeight(const TenantId& tenant) const;
  void SetTenantShare(const TenantId& tenant, uint32_t percent, Clock::time_point until);
  WaitingTime WorkerWaiting() const { return sched_->Waiting(); }

 private:
  struct Share {
    uint32_t percent = 100;
    Clock::time_point until;
  };
  struct UidEntry {
    TenantId tenant;
    std::shared_ptr<Comm> comm;  // null until the first Init
    Clock::time_point created;
  };
  // A tenant's unused uids, oldest first.
  using UnusedUids = std::set<std::pair<Clock::time_point, Uid>>;
  struct TimerEntry {
    Clock::time_point when;
    std::weak_ptr<Comm> comm;
    bool operator>(const TimerEntry& o) const { return when > o.when; }
  };

  bool IsShutdown() const;
  void Deliver(TenantId tenant, Completions& c);
  // Requires c.mu. Fails every pending operation and init with reason.
  void AbortLocked(Comm& c, Status reason, AbortCause cause, Completions& out);
  void ReleaseUid(const std::shared_ptr<Comm>& c);
  // Requires reg_mu_. A communicator for uid, registered for tenant.
  std::shared_ptr<Comm> NewCommLocked(TenantId tenant, const Uid& uid, uint32_t nranks,
                                      Constraints c);
  // The rank joins comm (Init, Rejoin); done runs once it is active.
  void Join(const std::shared_ptr<Comm>& comm, uint32_t nranks, uint32_t rank, InitDone done);
  // Requires reg_mu_. Forgets the tenant's unused uids older than the
  // lifetime; returns how many.
  uint32_t ExpireUnusedUidsLocked(TenantId tenant);
  // Requires reg_mu_. The uid is in use now: it no longer ages.
  void ForgetUnusedLocked(TenantId tenant, Clock::time_point created, const Uid& uid);
  Clock::time_point Now() const { return opts_.clock ? opts_.clock() : Clock::now(); }
  void PostP2P(const std::shared_ptr<Comm>& c, uint32_t rank, OpDesc op, Done done,
               Completions& out, std::shared_ptr<Job>* job);
  std::shared_ptr<Job> MakeJob(const std::shared_ptr<Comm>& c, const OpDesc& d);
  // Starts every collective that is ready, in seq order.
  void Pump(const std::shared_ptr<Comm>& c);
  // Plans and starts a job; true when it ran to completion inline.
  bool Start(const std::shared_ptr<Job>& job);
  // Runs blocks of the job until none are left. A worker's runner yields to
  // the scheduler when other tasks wait, and the last one out finishes the
  // job and starts the communicator's next. The caller's runner (see
  // EngineOptions::caller_runs_max_bytes) never yields, since it holds no
  // worker, and leaves the next job to its caller. Returns true when this
  // runner finished the job.
  bool RunRunner(const std::shared_ptr<Job>& job, bool on_caller = false);
  // The caller's runner, out of blocks: cancels the runners that have not
  // started and waits, briefly, for the others to finish their last block,
  // so that it finishes the job itself (see the definition).
  // per_block: how long one block took this runner.
  void AwaitOtherRunners(Job& job, Clock::duration per_block);
  void Finish(const std::shared_ptr<Job>& job, bool incomplete, bool pump);
  void RecordBlocks(TenantId tenant, uint64_t blocks, uint64_t cost, Clock::duration busy);
  void ArmTimerLocked(const std::shared_ptr<Comm>& c, Clock::time_point when);
  void TimerLoop();
  void CheckTimeouts(const std::shared_ptr<Comm>& c, Clock::time_point now);
  uint32_t WeightOf(const Comm& c) const;

  mutable std::mutex weight_mu_;
  std::map<TenantId, uint32_t> tenant_weights_;  // operator's weights; 1 when absent
  std::map<TenantId, Share> tenant_shares_;      // energy slack in force; 100 % when absent

  const EngineOptions opts_;

  mutable std::mutex reg_mu_;
  std::map<Uid, UidEntry> uids_;
  std::map<TenantId, uint32_t> uids_per_tenant_;
  std::map<TenantId, UnusedUids> unused_uids_;
  uint64_t next_comm_id_ = 1;
  bool shutdown_ = false;

  mutable std::mutex stats_mu_;
  EngineStats stats_;

  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  std::priority_queue<TimerEntry, std::vector<TimerEntry>, std::greater<>> timers_;
  bool timer_stop_ = false;
  std::thread timer_;

  std::unique_ptr<Scheduler> sched_;
};

EngineImpl::EngineImpl(EngineOptions opts) : opts_(opts) {
  uint32_t n = opts_.worker_threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  sched_ = std::make_unique<Scheduler>(
      n, BulkPriority(opts_.worker_nice, opts_.idle_guard),
      uint64_t{opts_.waiting_window_ms} * 1000000,
      [this] {
        return static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Now().time_since_epoch()).count());
      },
      std::chrono::microseconds(opts_.worker_poll_us));
  timer_ = NamedThread("hz-coll-timer", [this] { TimerLoop(); });
  spdlog::debug("collectives: engine with {} workers, kernels {}", n, KernelIsa());
}

EngineImpl::~EngineImpl() {
  Shutdown();
  sched_.reset();  // drains queued runners (they see the abort) and joins
}

bool EngineImpl::IsShutdown() const {
  std::lock_guard<std::mutex> lock(reg_mu_);
  return shutdown_;
}

uint32_t EngineImpl::WeightOf(const Comm& c) const {
  uint16_t p = std::min<uint16_t>(c.constraints.priority_class, kPriorityCount - 1);
  // In hundredths, so that an energy share scales the weight exactly.
  uint32_t percent = 100;
  {
    std::lock_guard<std::mutex> lock(weight_mu_);
    auto it = tenant_shares_.find(c.tenant);
    if (it != tenant_shares_.end() && Now() < it->second.until) percent = it->second.percent;
  }
  return std::max(1u, opts_.priority_weights[p]) * TenantWeight(c.tenant) * percent;
}

void EngineImpl::SetTenantShare(const TenantId& tenant, uint32_t percent, Clock::time_point until) {
  std::lock_guard<std::mutex> lock(weight_mu_);
  if (percent >= 100 || until <= Now()) {
    tenant_shares_.erase(tenant);
    return;
  }
  tenant_shares_[tenant] = Share{std::max(percent, 1u), until};
}

uint32_t EngineImpl::TenantWeight(const TenantId& tenant) const {
  std::lock_guard<std::mutex> lock(weight_mu_);
  auto it = tenant_weights_.find(tenant);
  return it != tenant_weights_.end() ? it->second : 1;
}

void EngineImpl::SetTenantWeight(const TenantId& tenant, uint32_t weight) {
  std::lock_guard<std::mutex> lock(weight_mu_);
  tenant_weights_[tenant] = std::clamp<uint32_t>(weight, 1, 1000);
}

void EngineImpl::Deliver(TenantId tenant, Completions& c) {
  if (c.empty()) return;
  uint64_t failed = 0;
  for (auto& [fn, st] : c.ops) failed += !st.ok();
  if (failed != 0) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.tenants[tenant].ops_failed += failed;
  }
  const auto deliver = [&c] {
    for (auto& [fn, st] : c.ops) {
      if (fn) fn(st);
    }
    for (auto& [fn, st] : c.inits) {
      if (fn) fn(st, nullptr);
    }
    for (auto& [fn, m] : c.joined) {
      if (fn) fn(Status::Ok(), std::move(m));
    }
  };
  if (opts_.deliver_batch) {
    opts_.deliver_batch(deliver);
  } else {
    deliver();
  }
  c = Completions{};
}

Status EngineImpl::NewUid(TenantId tenant, Uid* out) {
  if (out == nullptr) return Status::InvalidArgument();
  Uid uid;
  size_t got = 0;
  while (got < uid.bytes.size()) {
    ssize_t n = getrandom(uid.bytes.data() + got, uid.bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::TryAgain();
    }
    got += static_cast<size_t>(n);
  }
  std::lock_guard<std::mutex> lock(reg_mu_);
  if (shutdown_) return Status::Shutdown();
  uint32_t& count = uids_per_tenant_[tenant];
  if (count >= opts_.max_uids_per_tenant) count -= ExpireUnusedUidsLocked(tenant);
  if (count >= opts_.max_uids_per_tenant) return Status::Limit();
  const Clock::time_point now = Now();
  // 256 random bits do not collide; the check keeps the map honest anyway.
  if (!uids_.emplace(uid, UidEntry{tenant, nullptr, now}).second) return Status::TryAgain();
  unused_uids_[tenant].emplace(now, uid);
  ++count;
  *out = uid;
  return Status::Ok();
}

uint32_t EngineImpl::ExpireUnusedUidsLocked(TenantId tenant) {
  auto unused = unused_uids_.find(tenant);
  if (opts_.unused_uid_lifetime_ms == 0 || unused == unused_uids_.end()) return 0;
  const Clock::time_point cutoff = Now() - std::chrono::milliseconds(opts_.unused_uid_lifetime_ms);
  uint32_t n = 0;
  UnusedUids& set = unused->second;
  while (!set.empty() && set.begin()->first <= cutoff) {
    uids_.erase(set.begin()->second);
    set.erase(set.begin());
    ++n;
  }
  if (set.empty()) unused_uids_.erase(unused);
  return n;
}

void EngineImpl::ForgetUnusedLocked(TenantId tenant, Clock::time_point created, const Uid& uid) {
  auto unused = unused_uids_.find(tenant);
  if (unused == unused_uids_.end()) return;
  unused->second.erase({created, uid});
  if (unused->second.empty()) unused_uids_.erase(unused);
}

size_t EngineImpl::ReleaseUnusedUids(TenantId tenant) {
  std::lock_guard<std::mutex> lock(reg_mu_);
  unused_uids_.erase(tenant);
  size_t n = 0;
  for (auto it = uids_.begin(); it != uids_.end();) {
    if (it->second.tenant == tenant && !it->second.comm) {
      it = uids_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  auto t = uids_per_tenant_.find(tenant);
  if (t != uids_per_tenant_.end()) {
    t->second -= static_cast<uint32_t>(n);
    if (t->second == 0) uids_per_tenant_.erase(t);
  }
  return n;
}

void EngineImpl::ReleaseUid(const std::shared_ptr<Comm>& c) {
  std::lock_guard<std::mutex> lock(reg_mu_);
  auto it = uids_.find(c->uid);
  if (it == uids_.end() || it->second.comm != c) return;
  uids_.erase(it);
  auto t = uids_per_tenant_.find(c->tenant);
  if (t != uids_per_tenant_.end() && --t->second == 0) uids_per_tenant_.erase(t);
  std::lock_guard<std::mutex> slock(stats_mu_);
  --stats_.communicators;
}

std::shared_ptr<Comm> EngineImpl::NewCommLocked(TenantId tenant, const Uid& uid, uint32_t nranks,
                                                Constraints c) {
  uint32_t timeout = c.timeout_ms != 0 ? c.timeout_ms : opts_.default_timeout_ms;
  auto comm = std::make_shared<Comm>(next_comm_id_++, tenant, uid, nranks, c, timeout);
  comm->init_deadline = Clock::now() + comm->timeout;
  std::lock_guard<std::mutex> slock(stats_mu_);
  ++stats_.communicators;
  return comm;
}

void EngineImpl::Init(TenantId tenant, const Uid& uid, uint32_t nranks, uint32_t rank,
                      Constraints c, InitDone done) {
  if (nranks == 0 || nranks > opts_.max_ranks || rank >= nranks ||
      c.priority_class >= kPriorityCount) {
    done(Status::InvalidArgument(), nullptr);
    return;
  }
  std::shared_ptr<Comm> comm;
  Status st = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(reg_mu_);
    auto it = uids_.find(uid);
    if (shutdown_) {
      st = Status::Shutdown();
    } else if (it == uids_.end()) {
      st = Status::NotFound();
    } else if (it->second.tenant != tenant) {
      st = Status::Permission();
    } else if (it->second.comm && it->second.comm->rejoined) {
      st = Status::Exists("the communicator is re-forming after a hand-over");
    } else {
      if (!it->second.comm) {
        it->second.comm = NewCommLocked(tenant, uid, nranks, c);
        ForgetUnusedLocked(tenant, it->second.created, uid);
      }
      comm = it->second.comm;
    }
  }
  if (!st.ok()) {
    done(st, nullptr);
    return;
  }
  Join(comm, nranks, rank, std::move(done));
}

namespace {

bool SameConstraints(const Constraints& a, const Constraints& b) {
  return a.deterministic == b.deterministic && a.allow_lossy == b.allow_lossy &&
         a.priority_class == b.priority_class && a.max_threads == b.max_threads &&
         a.timeout_ms == b.timeout_ms;
}

}  // namespace

void EngineImpl::Rejoin(TenantId tenant, const MemberState& state, InitDone done) {
  const uint32_t nranks = state.nranks;
  if (nranks == 0 || nranks > opts_.max_ranks || state.rank >= nranks ||
      state.constraints.priority_class >= kPriorityCount) {
    done(Status::InvalidArgument(), nullptr);
    return;
  }
  std::shared_ptr<Comm> comm;
  Status st = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(reg_mu_);
    auto it = uids_.find(state.uid);
    if (shutdown_) {
      st = Status::Shutdown();
    } else if (it == uids_.end()) {
      uint32_t& count = uids_per_tenant_[tenant];
      if (count >= opts_.max_uids_per_tenant) count -= ExpireUnusedUidsLocked(tenant);
      if (count >= opts_.max_uids_per_tenant) {
        st = Status::Limit();
      } else {
        comm = NewCommLocked(tenant, state.uid, nranks, state.constraints);
        comm->rejoined = true;
        comm->next_seq = state.next_seq;  // not shared yet: no lock needed
        uids_.emplace(state.uid, UidEntry{tenant, comm, Now()});
        ++count;
      }
    } else if (it->second.tenant != tenant) {
      st = Status::Permission();
    } else if (!it->second.comm || !it->second.comm->rejoined) {
      st = Status::Exists("the uid is in use by a communicator formed here");
    } else {
      comm = it->second.comm;
      if (!SameConstraints(comm->constraints, state.constraints)) st = Status::Mismatch();
    }
  }
  if (st.ok()) {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->state == CommState::kJoining && comm->next_seq != state.next_seq) {
      st = Status::Mismatch("ranks disagree on where the collectives stand");
    }
  }
  if (!st.ok()) {
    done(st, nullptr);
    return;
  }
  Join(comm, nranks, state.rank, std::move(done));
}

void EngineImpl::Join(const std::shared_ptr<Comm>& comm, uint32_t nranks, uint32_t rank,
                      InitDone done) {
  Status st = Status::Ok();
  Completions out;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->state == CommState::kAborted) {
      st = Status::Aborted();
    } else if (comm->nranks != nranks) {
      st = Status::Mismatch();
    } else if (comm->joined[rank] || comm->state != CommState::kJoining) {
      st = Status::Exists();
    }
    if (!st.ok()) {
      out.inits.emplace_back(std::move(done), st);
    } else {
      comm->joined[rank] = 1;
      ++comm->njoined;
      comm->init_waiters.emplace_back(rank, std::move(done));
      if (comm->njoined == comm->nranks) {
        comm->state = CommState::kActive;
        for (auto& [r, fn] : comm->init_waiters) {
          out.joined.emplace_back(std::move(fn), std::make_shared<Member>(comm, r));
        }
        comm->init_waiters.clear();
        spdlog::debug("collectives: communicator {} of tenant {} active, {} ranks", comm->id,
                      comm->tenant.name(), nranks);
      } else {
        ArmTimerLocked(comm, comm->init_deadline);
      }
    }
  }
  Deliver(comm->tenant, out);
}

size_t EngineImpl::Withdraw(const std::shared_ptr<Member>& m) {
  if (!m || !m->comm_) return 0;
  Comm& comm = *m->comm_;
  const uint32_t rank = m->rank_;
  const Status withdrawn = Status::TryAgain("withdrawn before it started");
  std::vector<Done> dones;
  {
    std::lock_guard<std::mutex> lock(comm.mu);
    // Everything still in colls waits: Pump takes a collective out before
    // it starts it.
    for (auto it = comm.colls.begin(); it != comm.colls.end();) {
      std::optional<CollPost>& post = it->second.posts[rank];
      if (post && post->done) {
        dones.push_back(std::move(post->done));
        post.reset();
        --it->second.nposted;
      }
      it = it->second.nposted == 0 ? comm.colls.erase(it) : std::next(it);
    }
    for (auto* posts : {&comm.sends, &comm.recvs}) {
      for (auto it = posts->begin(); it != posts->end();) {
        std::erase_if(it->second, [&](P2PPost& p) {
          if (p.rank != rank) return false;
          dones.push_back(std::move(p.done));
          --comm.pending_p2p;
          return true;
        });
        it = it->second.empty() ? posts->erase(it) : std::next(it);
      }
    }
  }
  // Not Deliver: a withdrawn operation did not fail.
  for (Done& done : dones) done(withdrawn);
  return dones.size();
}

Status EngineImpl::SaveMember(const std::shared_ptr<Member>& m, MemberState* out) const {
  if (!m || !m->comm_) return Status::InvalidArgument();
  Comm& comm = *m->comm_;
  std::lock_guard<std::mutex> lock(comm.mu);
  if (comm.state != CommState::kActive) return Status::State("the communicator is not active");
  out->uid = comm.uid;
  out->nranks = comm.nranks;
  out->rank = m->rank_;
  out->constraints = comm.constraints;
  out->next_seq = comm.next_seq;
  return Status::Ok();
}

void EngineImpl::Post(const std::shared_ptr<Member>& m, OpDesc op, Done done) {
  if (!m || !m->comm_) {
    done(Status::InvalidArgument());
    return;
  }
  const std::shared_ptr<Comm>& comm = m->comm_;
  const uint32_t rank = m->rank_;
  if (IsShutdown()) {
    done(Status::Shutdown());
    return;
  }
  const Status valid = ValidateDesc(op, rank, comm->nranks);
  if (!valid.ok()) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.invalid;
  }

  Completions out;
  std::shared_ptr<Job> p2p_job;
  bool pump = false;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->state != CommState::kActive || comm->left[rank]) {
      out.ops.emplace_back(std::move(done), Status::Aborted());
    } else if (op.op == Op::kSend || op.op == Op::kRecv) {
      if (!valid.ok()) {
        out.ops.emplace_back(std::move(done), valid);
      } else {
        PostP2P(comm, rank, std::move(op), std::move(done), out, &p2p_job);
      }
    } else if (op.seq < comm->next_seq) {
      out.ops.emplace_back(std::move(done), Status::InvalidArgument());  // already executed
    } else if (op.seq - comm->next_seq >= opts_.max_seq_window) {
      out.ops.emplace_back(std::move(done), Status::Limit());
    } else {
      auto [it, fresh] = comm->colls.try_emplace(op.seq);
      PendingColl& pc = it->second;
      if (fresh) {
        pc.posts.resize(comm->nranks);
        pc.deadline = Clock::now() + comm->timeout;
        ArmTimerLocked(comm, pc.deadline);
      }
      if (pc.posts[rank]) {
        out.ops.emplace_back(std::move(done), Status::InvalidArgument());  // seq used twice
      } else {
        CollPost post;
        post.valid = valid.ok();
        if (!post.valid) {
          out.ops.emplace_back(std::move(done), valid);
          pc.poisoned = true;
        } else {
          post.done = std::move(done);
        }
        post.desc = std::move(op);
        pc.posts[rank] = std::move(post);
        ++pc.nposted;
        pump = pc.nposted == comm->nranks && it->first == comm->next_seq;
      }
    }
    if (p2p_job) ++comm->running_jobs;
  }
  Deliver(comm->tenant, out);
  if (p2p_job) Start(p2p_job);
  if (pump) Pump(comm);
}

// Requires comm->mu.
void EngineImpl::PostP2P(const std::shared_ptr<Comm>& comm, uint32_t rank, OpDesc op, Done done,
                         Completions& out, std::shared_ptr<Job>* job) {
  const bool is_send = op.op == Op::kSend;
  const auto key = is_send ? std::make_pair(rank, op.peer) : std::make_pair(op.peer, rank);
  auto& partners = is_send ? comm->recvs : comm->sends;
  auto it = partners.find(key);
  if (it == partners.end() || it->second.empty()) {
    if (comm->pending_p2p >= opts_.max_pending_p2p) {
      out.ops.emplace_back(std::move(done), Status::Limit());
      return;
    }
    P2PPost post{rank, std::move(op), std::move(done), Clock::now() + comm->timeout};
    ArmTimerLocked(comm, post.deadline);
    (is_send ? comm->sends : comm->recvs)[key].push_back(std::move(post));
    ++comm->pending_p2p;
    return;
  }
  P2PPost partner = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) partners.erase(it);
  --comm->pending_p2p;
  if (partner.desc.count != op.count || partner.desc.dtype != op.dtype) {
    out.ops.emplace_back(std::move(partner.done), Status::Mismatch());
    out.ops.emplace_back(std::move(done), Status::Mismatch());
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.mismatches;
    return;
  }
  const OpDesc& send = is_send ? op : partner.desc;
  const OpDesc& recv = is_send ? partner.desc : op;
  auto j = std::make_shared<Job>();
  j->op = Op::kSend;
  j->count = send.count;
  j->dtype = send.dtype;
  j->nranks = comm->nranks;
  j->esize = hz_dtype_size(send.dtype);
  j->io.push_back(RankIo{SpanList(send.send), SpanList(recv.recv)});
  j->comm = comm;
  j->collective = false;
  j->done_ranks = {is_send ? rank : partner.rank, is_send ? partner.rank : rank};
  j->dones.push_back(is_send ? std::move(done) : std::move(partner.done));
  j->dones.push_back(is_send ? std::move(partner.done) : std::move(done));
  *job = std::move(j);
}

std::shared_ptr<Job> EngineImpl::MakeJob(const std::shared_ptr<Comm>& comm, const OpDesc& d) {
  auto j = std::make_shared<Job>();
  j->op = d.op;
  j->count = d.op == Op::kBarrier ? 0 : d.count;
  j->dtype = d.dtype;
  j->redop = d.redop;
  j->root = d.peer;
  j->nranks = comm->nranks;
  j->esize = d.op == Op::kBarrier ? 0 : hz_dtype_size(d.dtype);
  if (hz_op_reduces(OpcodeOf(d.op))) j->kernel = GetReduceKernel(d.dtype, d.redop);
  j->comm = comm;
  j->collective = true;
  return j;
}

void EngineImpl::Pump(const std::shared_ptr<Comm>& comm) {
  for (;;) {
    Completions out;
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      if (comm->coll_running || comm->state != CommState::kActive) return;
      auto it = comm->colls.find(comm->next_seq);
      if (it == comm->colls.end() || it->second.nposted < comm->nranks) return;
      PendingColl pc = std::move(it->second);
      comm->colls.erase(it);
      const uint64_t seq = comm->next_seq;
      bool agree = !pc.poisoned;
      for (uint32_t r = 1; agree && r < comm->nranks; ++r) {
        agree = SameCollective(pc.posts[0]->desc, pc.posts[r]->desc);
      }
      if (!agree) {
        for (auto& p : pc.posts) {
          if (p->done) out.ops.emplace_back(std::move(p->done), Status::Mismatch());
        }
        ++comm->next_seq;
        spdlog::debug("collectives: communicator {} seq {} mismatch", comm->id, seq);
        std::lock_guard<std::mutex> slock(stats_mu_);
        ++stats_.mismatches;
      } else {
        job = MakeJob(comm, pc.posts[0]->desc);
        job->io.resize(comm->nranks);
        for (uint32_t r = 0; r < comm->nranks; ++r) {
          CollPost& p = *pc.posts[r];
          job->io[r] = RankIo{SpanList(p.desc.send), SpanList(p.desc.recv)};
          job->dones.push_back(std::move(p.done));
          job->done_ranks.push_back(r);
        }
        comm->coll_running = true;
        ++comm->running_jobs;
      }
    }
    Deliver(comm->tenant, out);
    if (job && !Start(job)) return;  // a worker finishes it and pumps again
  }
}

bool EngineImpl::Start(const std::shared_ptr<Job>& job) {
  const Comm& comm = *job->comm;
  PlanInput in;
  in.op = job->op;
  in.count = job->count;
  in.nranks = job->nranks;
  in.esize = job->esize;
  in.acc_size = job->kernel ? job->kernel->acc_size : 0;
  in.total_bytes = TouchedBytes(*job);
  in.workers = sched_->threads();
  in.max_threads = comm.constraints.max_threads;
  in.inline_max_bytes = opts_.inline_max_bytes;
  in.single_thread_max_bytes = opts_.single_thread_max_bytes;
  in.block_bytes_override = opts_.block_bytes;
  in.stream_min_bytes = opts_.stream_min_bytes;
  if (in.total_bytes > opts_.inline_max_bytes && in.count != 0) {
    in.queued_tasks = sched_->queued();
    std::vector<const void*> addrs;
    addrs.reserve(2 * job->io.size());
    for (const RankIo& io : job->io) {
      addrs.push_back(io.send.first_byte());
      addrs.push_back(io.recv.first_byte());
    }
    in.numa_nodes = CountNumaNodes(addrs);
  }
  Plan plan = ChoosePlan(in);
  Layout(*job, plan.block_bytes);
  job->algorithm = plan.algorithm;
  job->threads = std::max<uint32_t>(1, plan.threads);
  job->stream_stores = plan.stream_stores;
  // The matching thread runs a share only while no other work waits for the
  // workers: under contention the weighted scheduler decides who runs, and a
  // caller's share would bypass it.
  const bool run_inline = plan.algorithm == Algorithm::kNone ||
                          plan.algorithm == Algorithm::kInline || job->nblocks == 0;
  const bool caller_runs =
      !run_inline && job->total_bytes <= opts_.caller_runs_max_bytes && !sched_->HasWaiting();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.algorithms[static_cast<size_t>(plan.algorithm)]++;
    if (plan.algorithm == Algorithm::kBlockedParallel) stats_.threads_chosen += job->threads;
    if (in.numa_nodes > 1) ++stats_.numa_remote;
    if (caller_runs) ++stats_.caller_shares;
    if (plan.stream_stores) ++stats_.streamed;
  }
  spdlog::debug(
      "collectives: comm {} {} count {} dtype {} ranks {}: {} threads {} block {} B "
      "({} blocks, {} B moved, backlog {}, numa nodes {}, streaming stores {}, caller share {})",
      comm.id, OpName(job->op), job->count, job->dtype, job->nranks, AlgorithmName(plan.algorithm),
      job->threads, plan.block_bytes, job->nblocks, job->total_bytes, in.queued_tasks,
      in.numa_nodes, plan.stream_stores, caller_runs);

  if (run_inline) {
    bool incomplete = false;
    for (uint64_t b = 0; b < job->nblocks; ++b) {
      if (comm.aborted.load(std::memory_order_relaxed)) {
        incomplete = true;
        break;
      }
      RunBlock(*job, b);
    }
    Finish(job, incomplete, /*pump=*/false);
    return true;
  }
  job->active_runners.store(job->threads);
  const uint32_t queued = caller_runs ? job->threads - 1 : job->threads;
  const Scheduler::FlowKey flow{comm.tenant, comm.constraints.priority_class};
  for (uint32_t i = 0; i < queued; ++i) {
    Scheduler::Ticket t =
        sched_->Submit(flow, WeightOf(comm), BlockCost(*job), [this, job] { RunRunner(job); });
    if (caller_runs) job->queued_runners.push_back(t);
  }
  // The caller's Pump loop goes on to the next operation itself when the
  // job finished here.
  return caller_runs && RunRunner(job, /*on_caller=*/true);
}

bool EngineImpl::RunRunner(const std::shared_ptr<Job>& job, bool on_caller) {
  // A runner that finds the communicator aborted pushes the block counter
  // far past the end: the other runners stop too, and the last one out sees
  // that blocks were skipped.
  const Comm& comm = *job->comm;
  uint64_t ran = 0;
  auto t0 = Clock::now();
  // Run blocks until none are left, yielding to the scheduler after a block
  // only when other work waits for a worker (that is where weights apply).
  for (;;) {
    uint64_t b = job->next_block.fetch_add(1);
    if (b >= job->nblocks) break;
    if (comm.aborted.load(std::memory_order_relaxed)) {
      job->next_block.store(job->nblocks + (1ull << 62));
      break;
    }
    RunBlock(*job, b);
    ++ran;
    if (job->next_block.load() >= job->nblocks) break;
    if (!on_caller && sched_->HasWaiting()) {
      RecordBlocks(comm.tenant, ran, BlockCost(*job), Clock::now() - t0);
      const Scheduler::FlowKey flow{comm.tenant, comm.constraints.priority_class};
      sched_->Submit(flow, WeightOf(comm), BlockCost(*job), [this, job] { RunRunner(job); });
      return false;
    }
  }
  const Clock::duration busy = Clock::now() - t0;
  RecordBlocks(comm.tenant, ran, BlockCost(*job), busy);
  if (on_caller) {
    AwaitOtherRunners(*job,
                      ran != 0 ? busy / static_cast<Clock::rep>(ran) : Clock::duration::zero());
  }
  if (job->active_runners.fetch_sub(1) != 1) return false;
  if (on_caller) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.caller_finishes;
  }
  Finish(job, job->next_block.load() >= job->nblocks + (1ull << 62), /*pump=*/!on_caller);
  return true;
}

void EngineImpl::AwaitOtherRunners(Job& job, Clock::duration per_block) {
  // Whoever finishes the job hands each rank its completion. From a worker
  // that is a post to the rank's connection thread, which has to be woken
  // for it (tens of microseconds on an idle CPU, on the critical path of
  // every operation); from the caller, the connection thread itself, the
  // completions run right after it returns. So the caller's runner, out of
  // blocks, keeps its own count until the other runners are done:
  //   - runners still queued would find no block: cancel them;
  //   - running ones are in their last block: wait for them, up to about
  //     two blocks' time as this runner measured it (a runner that is
  //     descheduled takes longer), then leave the job to the last one.
  // The caller's runner only exists for operations of up to
  // caller_runs_max_bytes, so a block is short.
  constexpr auto kSlack = std::chrono::microseconds(20);
  constexpr auto kNoMeasure = std::chrono::microseconds(100);
  for (const Scheduler::Ticket& t : job.queued_runners) {
    if (sched_->Cancel(t)) job.active_runners.fetch_sub(1);
  }
  if (job.active_runners.load() == 1) return;
  const Clock::duration wait =
      per_block != Clock::duration::zero() ? 2 * per_block + kSlack : Clock::duration(kNoMeasure);
  SpinWhile([&job] { return job.active_runners.load() > 1; }, Clock::now() + wait);
}

void EngineImpl::RecordBlocks(TenantId tenant, uint64_t blocks, uint64_t cost,
                              Clock::duration busy) {
  if (blocks == 0) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  TenantStats& ts = stats_.tenants[tenant];
  ts.blocks += blocks;
  ts.block_bytes += blocks * cost;
  ts.busy_ns +=
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(busy).count());
}

void EngineImpl::Finish(const std::shared_ptr<Job>& job, bool incomplete, bool pump) {
  Comm& comm = *job->comm;
  Status st = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(comm.mu);
    if (incomplete) st = comm.abort_reason.ok() ? Status::Aborted() : comm.abort_reason;
    if (job->collective) {
      comm.coll_running = false;
      ++comm.next_seq;
    }
    if (--comm.running_jobs == 0) comm.idle.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (st.ok()) {
      const uint64_t b = job->count * job->esize;
      stats_.ops[static_cast<size_t>(job->op)]++;
      stats_.bytes[static_cast<size_t>(job->op)] += b * job->dones.size();
      TenantStats& ts = stats_.tenants[comm.tenant];
      ts.ops_completed += job->dones.size();
      ts.bytes += b * job->dones.size();
    }
  }
  Completions out;
  for (Done& d : job->dones) out.ops.emplace_back(std::move(d), st);
  Deliver(comm.tenant, out);
  if (pump && job->collective) Pump(job->comm);
}

void EngineImpl::AbortLocked(Comm& c, Status reason, AbortCause cause, Completions& out) {
  if (c.state == CommState::kAborted) return;
  c.state = CommState::kAborted;
  c.abort_reason = reason;
  c.abort_cause = cause;
  c.aborted.store(true);
  for (auto& [seq, pc] : c.colls) {
    for (auto& p : pc.posts) {
      if (p && p->done) out.ops.emplace_back(std::move(p->done), reason);
    }
  }
  c.colls.clear();
  for (auto* q : {&c.sends, &c.recvs}) {
    for (auto& [key, posts] : *q) {
      for (auto& p : posts) out.ops.emplace_back(std::move(p.done), reason);
    }
    q->clear();
  }
  c.pending_p2p = 0;
  for (auto& [r, fn] : c.init_waiters) out.inits.emplace_back(std::move(fn), reason);
  c.init_waiters.clear();
  spdlog::debug("collectives: communicator {} of tenant {} aborted ({}, {})", c.id, c.tenant.name(),
                reason.ToString(), AbortCauseName(cause));
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.aborts;
  if (reason.code() == StatusCode::kTimedOut) ++stats_.timeouts;
}

void EngineImpl::Destroy(const std::shared_ptr<Member>& m, AbortCause cause) {
  if (!m || !m->comm_) return;
  const std::shared_ptr<Comm>& comm = m->comm_;
  Completions out;
  bool all_left = false;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (!comm->left[m->rank_]) {
      comm->left[m->rank_] = 1;
      ++comm->nleft;
      all_left = comm->nleft == comm->nranks;
    }
    AbortLocked(*comm, Status::Aborted(), cause, out);
  }
  Deliver(comm->tenant, out);
  if (!Scheduler::OnWorker()) {
    // Running blocks stop at their next block boundary; after this no
    // engine thread touches this member's memory.
    std::unique_lock<std::mutex> lock(comm->mu);
    comm->idle.wait(lock, [&] { return comm->running_jobs == 0; });
  }
  if (all_left) ReleaseUid(comm);
}

void EngineImpl::Abort(const std::shared_ptr<Member>& m, AbortCause cause) {
  if (!m || !m->comm_) return;
  Completions out;
  {
    std::lock_guard<std::mutex> lock(m->comm_->mu);
    AbortLocked(*m->comm_, Status::Aborted(), cause, out);
  }
  Deliver(m->comm_->tenant, out);
}

AbortCause EngineImpl::AbortCauseOf(const std::shared_ptr<Member>& m) const {
  if (!m || !m->comm_) return AbortCause::kNone;
  std::lock_guard<std::mutex> lock(m->comm_->mu);
  return m->comm_->abort_cause;
}

void EngineImpl::Shutdown() {
  std::vector<std::shared_ptr<Comm>> comms;
  {
    std::lock_guard<std::mutex> lock(reg_mu_);
    shutdown_ = true;
    for (auto& [uid, e] : uids_) {
      if (e.comm) comms.push_back(e.comm);
    }
  }
  for (auto& c : comms) {
    Completions out;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      AbortLocked(*c, Status::Shutdown(), AbortCause::kProvider, out);
    }
    Deliver(c->tenant, out);
  }
  if (!Scheduler::OnWorker()) {
    for (auto& c : comms) {
      std::unique_lock<std::mutex> lock(c->mu);
      c->idle.wait(lock, [&] { return c->running_jobs == 0; });
    }
  }
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    timer_stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_.joinable() && timer_.get_id() != std::this_thread::get_id()) timer_.join();
}

// Requires c->mu. Keeps at most one timer entry per communicator pending:
// deadlines only grow, and CheckTimeouts re-arms for the earliest one left.
void EngineImpl::ArmTimerLocked(const std::shared_ptr<Comm>& c, Clock::time_point when) {
  if (c->timer_armed && c->timer_when <= when) return;
  c->timer_armed = true;
  c->timer_when = when;
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    timers_.push(TimerEntry{when, c});
  }
  timer_cv_.notify_one();
}

void EngineImpl::TimerLoop() {
  std::unique_lock<std::mutex> lock(timer_mu_);
  while (!timer_stop_) {
    if (timers_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    Clock::time_point when = timers_.top().when;
    if (Clock::now() < when) {
      timer_cv_.wait_until(lock, when);
      continue;
    }
    std::weak_ptr<Comm> wc = timers_.top().comm;
    timers_.pop();
    lock.unlock();
    if (auto c = wc.lock()) CheckTimeouts(c, Clock::now());
    lock.lock();
  }
}

void EngineImpl::CheckTimeouts(const std::shared_ptr<Comm>& c, Clock::time_point now) {
  Completions out;
  bool init_failed = false;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->timer_armed = false;
    std::optional<Clock::time_point> earliest;
    auto consider = [&](Clock::time_point t) {
      if (!earliest || t < *earliest) earliest = t;
    };
    if (c->state == CommState::kJoining) {
      consider(c->init_deadline);
    } else if (c->state == CommState::kActive) {
      for (auto& [seq, pc] : c->colls) {
        if (pc.nposted < c->nranks) consider(pc.deadline);
      }
      for (auto* q : {&c->sends, &c->recvs}) {
        for (auto& [key, posts] : *q) {
          if (!posts.empty()) consider(posts.front().deadline);
        }
      }
    }
    if (earliest && *earliest <= now) {
      init_failed = c->state == CommState::kJoining;
      spdlog::debug("collectives: communicator {} timed out", c->id);
      AbortLocked(*c, Status::TimedOut(), AbortCause::kTimedOut, out);
    } else if (earliest) {
      ArmTimerLocked(c, *earliest);
    }
  }
  // Nobody holds a Member of a communicator that never finished joining.
  // Released before the callbacks run, so a retry after the failure sees
  // the uid gone rather than racing with its removal.
  if (init_failed) ReleaseUid(c);
  Deliver(c->tenant, out);
}

EngineStats EngineImpl::Stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
  }
  s.worker_polls = sched_->polls();
  s.worker_polled_tasks = sched_->polled_tasks();
  return s;
}

std::vector<CommInfo> EngineImpl::Communicators() const {
  std::vector<std::shared_ptr<Comm>> comms;
  {
    std::lock_guard<std::mutex> lock(reg_mu_);
    for (auto& [uid, e] : uids_) {
      if (e.comm) comms.push_back(e.comm);
    }
  }
  std::vector<CommInfo> infos;
  for (auto& c : comms) {
    std::lock_guard<std::mutex> lock(c->mu);
    CommInfo i;
    i.id = c->id;
    i.tenant = c->tenant;
    i.nranks = c->nranks;
    i.joined = c->njoined - c->nleft;
    i.next_seq = c->next_seq;
    i.pending = static_cast<uint32_t>(c->colls.size() + c->pending_p2p);
    i.state = c->state;
    i.abort_reason = c->abort_reason;
    i.abort_cause = c->abort_cause;
    i.constraints = c->constraints;
    infos.push_back(i);
  }
  std::sort(infos.begin(), infos.end(),
            [](const CommInfo& a, const CommInfo& b) { return a.id < b.id; });
  return infos;
}

}  // namespace internal

Member::Member(std::shared_ptr<internal::Comm> comm, uint32_t rank)
    : comm_(std::move(comm)), rank_(rank) {}
Member::~Member() = default;
uint32_t Member::nranks() const {
  return comm_->nranks;
}
TenantId Member::tenant() const {
  return comm_->tenant;
}
uint64_t Member::comm_id() const {
  return comm_->id;
}

Engine::Engine(EngineOptions opts) : impl_(std::make_unique<internal::EngineImpl>(opts)) {}
Engine::~Engine() = default;
Status Engine::NewUid(TenantId tenant, Uid* out) {
  return impl_->NewUid(tenant, out);
}
size_t Engine::ReleaseUnusedUids(TenantId tenant) {
  return impl_->ReleaseUnusedUids(tenant);
}
void Engine::Init(TenantId tenant, const Uid& uid, uint32_t nranks, uint32_t rank, Constraints c,
                  std::function<void(Status, std::shared_ptr<Member>)> done) {
  impl_->Init(tenant, uid, nranks, rank, c, std::move(done));
}
void Engine::Post(const std::shared_ptr<Member>& m, OpDesc op, Done done) {
  impl_->Post(m, std::move(op), std::move(done));
}
void Engine::Shutdown() {
  impl_->Shutdown();
}
size_t Engine::Withdraw(const std::shared_ptr<Member>& m) {
  return impl_->Withdraw(m);
}
Status Engine::SaveMember(const std::shared_ptr<Member>& m, MemberState* out) const {
  return impl_->SaveMember(m, out);
}
void Engine::Rejoin(TenantId tenant, const MemberState& state,
                    std::function<void(Status, std::shared_ptr<Member>)> done) {
  impl_->Rejoin(tenant, state, std::move(done));
}
void Engine::SetTenantWeight(const TenantId& tenant, uint32_t weight) {
  impl_->SetTenantWeight(tenant, weight);
}

void Engine::SetTenantShare(const TenantId& tenant, uint32_t percent,
                            std::chrono::steady_clock::time_point until) {
  impl_->SetTenantShare(tenant, percent, until);
}

WaitingTime Engine::WorkerWaiting() const {
  return impl_->WorkerWaiting();
}
void Engine::Destroy(const std::shared_ptr<Member>& m, AbortCause cause) {
  impl_->Destroy(m, cause);
}
void Engine::Abort(const std::shared_ptr<Member>& m, AbortCause cause) {
  impl_->Abort(m, cause);
}
AbortCause Engine::AbortCauseOf(const std::shared_ptr<Member>& m) const {
  return impl_->AbortCauseOf(m);
}
EngineStats Engine::Stats() const {
  return impl_->Stats();
}
std::vector<CommInfo> Engine::Communicators() const {
  return impl_->Communicators();
}
uint32_t Engine::TenantWeight(const TenantId& tenant) const {
  return impl_->TenantWeight(tenant);
}
uint32_t Engine::workers() const {
  return impl_->workers();
}

}  // namespace hz::coll
