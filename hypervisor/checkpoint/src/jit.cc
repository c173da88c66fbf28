// Quiescence registrations and just-in-time saves on a notice (SPEC.md §7.5.7).
#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <thread>

#include "engine_impl.h"
#include "quiesce.h"

namespace hz::checkpoint {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::chrono::milliseconds Engine::Impl::StallBudget(const Policy& p) const {
  return std::chrono::milliseconds(std::min(p.stall_budget_ms, config_.max_stall_budget_ms));
}

void Engine::Impl::StopJitLocked(std::unique_lock<std::mutex>& lock, TenantNo tenant,
                                 StreamId stream) {
  for (;;) {
    StreamState* s = StreamLocked(tenant, stream);
    if (s == nullptr || s->jit_cancel == nullptr) return;
    s->jit_cancel->store(true, std::memory_order_relaxed);
    jit_cv_.wait(lock);
  }
}

void Engine::Impl::DropQuiesceLocked(TenantNo tenant, StreamState* s) {
  if (!s->quiesce) return;
  ReleaseChunksLocked(tenant, s->quiesce->reserved);
  s->quiesce.reset();
}

Status Engine::Impl::DeclareQuiesce(TenantNo tenant, StreamId stream, IoSpan word,
                                    std::span<const IoSpan> slices) {
  if (word.data == nullptr || word.len != sizeof(hz_quiesce_word) ||
      reinterpret_cast<uintptr_t>(word.data) % alignof(uint64_t) != 0) {
    return Status::InvalidArgument();
  }
  uint64_t total = 0;
  if (slices.empty() || slices.size() > kMaxSlices ||
      !SumSpans(slices, std::numeric_limits<uint64_t>::max() / 4, &total)) {
    return Status::InvalidArgument();
  }
  std::unique_lock<std::mutex> lock(mu_);
  // A copy of the registration being replaced stops first: the caller lets
  // go of the old memory when this returns.
  StopJitLocked(lock, tenant, stream);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr) return Status::NotFound();
  if (!s->policy.auto_save_on_notice) return Status::State();
  // Set staging memory aside now, so a notice never waits for it. The caller
  // is a VM's connection thread, shared with other VMs: this never waits,
  // and a reservation that does not fit now is refused (SPEC §7.5.7).
  DropQuiesceLocked(tenant, s);
  uint64_t nchunks = total / config_.chunk_bytes + (total % config_.chunk_bytes != 0 ? 1 : 0);
  // Reservations are held for as long as the registration lasts: together
  // they may take only part of the pool, whatever each tenant's share.
  if (QuiesceChunksLocked() + nchunks > QuiesceCapChunks()) return Status::Limit();
  std::vector<uint32_t> reserved;
  uint64_t waited = 0;
  Status st = AcquireLocked(lock, tenant, nchunks, Clock::now(), nullptr, &reserved, &waited);
  if (st.code() == StatusCode::kShutdown) return st;
  if (!st.ok()) return Status::Limit();
  auto d = std::make_unique<QuiesceDecl>();
  d->word = word;
  d->slices.assign(slices.begin(), slices.end());
  d->reserved = std::move(reserved);
  s->quiesce = std::move(d);
  return Status::Ok();
}

Status Engine::Impl::CancelQuiesce(TenantNo tenant, StreamId stream) {
  std::unique_lock<std::mutex> l(mu_);
  // Also without a registration (a policy change may have dropped it): once
  // this returns, no copy reads the memory it named.
  StopJitLocked(l, tenant, stream);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr || !s->quiesce) return Status::NotFound();
  DropQuiesceLocked(tenant, s);
  return Status::Ok();
}

std::vector<NoticeOutcome> Engine::Impl::OnNotice(TenantNo tenant, Clock::time_point deadline,
                                                  const std::set<StreamId>* only) {
  std::vector<StreamId> streams;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tenants_.find(tenant);
    if (it == tenants_.end()) return {};
    for (auto& [sid, s] : it->second.streams) {
      if (only != nullptr && only->count(sid) == 0) continue;
      if (s.policy.auto_save_on_notice && s.quiesce) streams.push_back(sid);
    }
  }
  std::vector<NoticeOutcome> out;
  std::vector<PendingEvent> events;
  for (StreamId sid : streams) {
    NoticeOutcome o;
    o.stream = sid;
    std::unique_lock<std::mutex> lock(mu_);
    StreamState* s = StreamLocked(tenant, sid);
    // A regular save of the stream is copying: let it finish first.
    while (s != nullptr && s->saving && s->quiesce && Clock::now() < deadline) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
    }
    if (s == nullptr || !s->quiesce || !s->policy.auto_save_on_notice) continue;
    TierKind policy_tier = s->policy.tier;
    if (s->saving) {
      o.status = Status::TimedOut();
      events.push_back(
          {numbers_.Name(tenant), EventKind::kJitFailed, sid, 0, policy_tier, o.status.code(), 0});
      out.push_back(o);
      continue;
    }
    // The registration (spans and reserved chunks) is used without the lock;
    // the stream is marked as saving so it cannot change meanwhile.
    s->saving = true;
    s->saving_step = kLatestStep;
    std::atomic<bool> cancel{false};
    s->jit_cancel = &cancel;
    QuiesceDecl decl{s->quiesce->word, s->quiesce->slices, std::move(s->quiesce->reserved)};
    s->quiesce->reserved.clear();
    Manifest m;
    m.tenant = tenant;
    m.stream = sid;
    m.chunk_bytes = config_.chunk_bytes;
    for (const IoSpan& sp : decl.slices) m.slice_sizes.push_back(sp.len);
    std::vector<uint32_t> chunks = std::move(decl.reserved);
    if (chunks.size() != m.num_chunks()) {
      ReleaseChunksLocked(tenant, chunks);
      chunks.clear();
      uint64_t waited = 0;
      // Cancellable: ending the registration must not wait for staging.
      const std::function<bool()> cancelled = [&cancel] { return cancel.load(); };
      o.status =
          AcquireLocked(lock, tenant, m.num_chunks(), deadline, &cancelled, &chunks, &waited);
      if (o.status.code() == StatusCode::kLimit) o.status = Status::TryAgain();
    }
    lock.unlock();

    if (o.status.ok()) {
      std::vector<CopyOp> ops = SnapshotOps(decl.slices, {}, chunks);
      SeqlockLimits limits;
      limits.max_attempts = config_.jit_max_attempts;
      limits.cancelled = [&cancel] { return cancel.load(std::memory_order_relaxed); };
      SeqlockCopyResult r = SeqlockCopy(
          decl.word.data, [&] { copier_.Run(ops, limits.cancelled); }, deadline, limits);
      o.attempts = r.attempts;
      o.step = r.step;
      m.step = r.step;
      if (cancel.load()) {
        o.status = Status::Aborted("the registration ended during the copy");
      } else if (!r.consistent) {
        o.status = r.attempts >= limits.max_attempts
                       ? Status::TryAgain("every copy was torn by an update")
                       : Status::TimedOut();
      }
      if (o.status.ok()) ZeroTail(m, chunks);
    }

    lock.lock();
    s->saving = false;
    s->jit_cancel = nullptr;
    jit_cv_.notify_all();
    bool admitted = false;
    if (o.status.ok()) {
      o.status = CheckStepLocked(*s, m.step);
      if (o.status.code() == StatusCode::kExists) {
        // That step is saved already: nothing new, and that is a success.
        o.status = Status::Ok();
        o.existed = true;
        events.push_back({numbers_.Name(tenant), EventKind::kJitSaved, sid, m.step, policy_tier,
                          StatusCode::kOk, kJitFlagExisted});
      } else if (o.status.ok()) {
        bool want_memory = false;
        uint64_t disk_reserved = 0;
        o.status = PlaceLocked(tenant, sid, *s, m, &want_memory, &disk_reserved);
        if (o.status.ok()) {
          DecideLocked(Decision::Kind::kJit, tenant, sid, m.step, o.attempts);
          std::vector<std::shared_ptr<Ckpt>> evicted;
          AdmitLocked(tenant, sid, s, m, chunks, want_memory, disk_reserved, &evicted);
          admitted = true;
          events.push_back({numbers_.Name(tenant), EventKind::kJitSaved, sid, m.step, policy_tier,
                            StatusCode::kOk, 0});
          lock.unlock();
          RemoveFromDisk(evicted);
          lock.lock();
        }
      }
    }
    if (!o.status.ok()) {
      events.push_back({numbers_.Name(tenant), EventKind::kJitFailed, sid, o.step, policy_tier,
                        o.status.code(), 0});
    }
    // Keep (or renew) the reservation for the next notice.
    if (!admitted && s->quiesce && s->quiesce->reserved.empty() &&
        chunks.size() == m.num_chunks()) {
      s->quiesce->reserved = std::move(chunks);
    } else if (!admitted) {
      ReleaseChunksLocked(tenant, chunks);
    }
    if (admitted && s->quiesce && s->quiesce->reserved.empty()) {
      const uint64_t quota = StagingQuotaLocked(TenantLocked(tenant));
      std::vector<uint32_t> again;
      if (TenantLocked(tenant).held_chunks + m.num_chunks() <= quota &&
          QuiesceChunksLocked() + m.num_chunks() <= QuiesceCapChunks() &&
          pool_->TryAcquire(m.num_chunks(), &again)) {
        TenantLocked(tenant).held_chunks += again.size();
        s->quiesce->reserved = std::move(again);
      }
    }
    lock.unlock();
    out.push_back(o);
  }
  Publish(events);
  return out;
}

}  // namespace hz::checkpoint
