// The persist worker: one thread that seals snapshots (CRC32C per chunk),
// keeps memory-tier checkpoints, and writes disk-tier checkpoints through the
// Tier with several chunk writes in flight, choosing whose chunk goes next
// with the fair scheduler and staggering the starts of different tenants.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "engine_impl.h"

namespace hz::checkpoint {

namespace {

uint64_t Padded(uint64_t len) {
  return (len + kIoAlign - 1) / kIoAlign * kIoAlign;
}

}  // namespace

void Engine::Impl::WorkerLoop() {
  std::vector<std::shared_ptr<Job>> fresh;
  std::vector<Tier::Completion> done;
  for (;;) {
    fresh.clear();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
      fresh.assign(incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    Intake(&fresh);

    uint64_t now = SteadyNowUs();
    uint64_t wake = std::numeric_limits<uint64_t>::max();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->not_before_us <= now) {
        active_[(*it)->tenant].push_back(*it);
        it = waiting_.erase(it);
      } else {
        wake = std::min(wake, (*it)->not_before_us);
        ++it;
      }
    }
    uint64_t retry = 0;
    const bool throttled = SubmitMore(now, &retry);
    if (throttled) wake = std::min(wake, retry);
    MarkStorageWaiting(throttled || disk_->InFlight() >= disk_->QueueDepth());

    if (disk_->InFlight() > 0) {
      // A full queue waits for a completion; otherwise come back soon for new
      // jobs, stagger deadlines and refilled tokens.
      uint64_t wait_us = disk_->InFlight() >= disk_->QueueDepth() ? 50000 : 2000;
      if (wake != std::numeric_limits<uint64_t>::max()) {
        uint64_t n = SteadyNowUs();
        wait_us = std::min<uint64_t>(wait_us, wake > n ? wake - n : 1);
      }
      done.clear();
      disk_->Poll(std::max<uint64_t>(wait_us, 1), &done);
      OnCompletions(done);
      continue;
    }
    bool submittable = false;
    for (const auto& [tid, q] : active_) submittable |= !q.empty();
    std::unique_lock<std::mutex> l(mu_);
    if (stop_) break;
    if (!incoming_.empty()) continue;
    if (submittable && wake == std::numeric_limits<uint64_t>::max()) continue;
    if (wake == std::numeric_limits<uint64_t>::max()) {
      // Nothing in flight, queued or planned: only a new job (or the stop)
      // gives this thread work, and both come under mu_ with a notify. No
      // timeout, so an idle service has no thread waking to find nothing.
      worker_cv_.wait(l);
      continue;
    }
    const uint64_t n = SteadyNowUs();
    if (wake > n) worker_cv_.wait_for(l, std::chrono::microseconds(wake - n));
  }
  AbandonAll();
}

void Engine::Impl::Intake(std::vector<std::shared_ptr<Job>>* fresh) {
  const uint64_t stagger_us = uint64_t{config_.stagger_ms} * 1000;
  for (const auto& job : *fresh) {
    if (job->ckpt->want_memory) {
      SealInMemory(job);
      continue;
    }
    uint64_t now = SteadyNowUs();
    uint64_t delay = 0;
    if (stagger_us > 0) {
      // Keep different tenants' persist starts stagger_us apart, including
      // starts already planned for staggered jobs.
      for (const auto& [tid, started] : last_start_us_) {
        if (tid != job->tenant && started + stagger_us > now) {
          delay = std::max(delay, started + stagger_us - now);
        }
      }
      for (const auto& w : waiting_) {
        if (w->tenant != job->tenant && w->not_before_us + stagger_us > now) {
          delay = std::max(delay, w->not_before_us + stagger_us - now);
        }
      }
      // Never push a persist past the stream's recovery-point objective.
      if (job->rpo_s > 0) delay = std::min<uint64_t>(delay, uint64_t{job->rpo_s} * 1000000);
    }
    job->not_before_us = now + delay;
    if (delay > 0) {
      std::lock_guard<std::mutex> l(mu_);
      DecideLocked(Decision::Kind::kStagger, job->tenant, job->stream, job->manifest.step, delay);
    }
    waiting_.push_back(job);
  }
}

void Engine::Impl::SealInMemory(const std::shared_ptr<Job>& job) {
  const Manifest& m = job->manifest;
  for (uint64_t i = 0; i < m.num_chunks(); ++i) {
    job->manifest.chunk_crcs[i] = Crc32c(pool_->chunk(job->ckpt->chunks[i]), m.chunk_len(i));
  }
  std::vector<PendingEvent> events;
  {
    std::lock_guard<std::mutex> l(mu_);
    Ckpt& c = *job->ckpt;
    c.job_active = false;
    c.manifest.chunk_crcs = job->manifest.chunk_crcs;
    c.sealed = true;
    // Durable since the save completed; the event follows the sealing.
    if (c.in_index) {
      events.push_back({numbers_.Name(job->tenant), EventKind::kDurable, job->stream, m.step,
                        TierKind::kHostMemory, StatusCode::kOk, 0});
    }
    MaybeReleaseLocked(job->tenant, &c);
  }
  Publish(events);
  Settle(job);
}

void Engine::Impl::Settle(const std::shared_ptr<Job>& job) {
  // Waiters wake only now, so whoever saw "durable" also sees its event and
  // the evicted files gone.
  std::lock_guard<std::mutex> l(mu_);
  job->ckpt->settled = true;
  --jobs_pending_;
  durable_cv_.notify_all();
}

void Engine::Impl::MarkStorageWaiting(bool disk_busy) {
  // Chunks wait for the disk when some are ready and it takes no more.
  const bool ready = std::any_of(active_.begin(), active_.end(),
                                 [](const auto& tenant) { return !tenant.second.empty(); });
  std::lock_guard<std::mutex> l(storage_mu_);
  storage_waiting_.SetWaiting(ready && disk_busy, SteadyNowUs() * 1000);
}

bool Engine::Impl::SubmitMore(uint64_t now_us, uint64_t* retry_us) {
  std::vector<FairScheduler::Candidate> cands;
  while (disk_->InFlight() < disk_->QueueDepth()) {
    cands.clear();
    for (auto& [tid, q] : active_) {
      while (!q.empty()) {
        std::shared_ptr<Job> j = q.front();
        bool cancelled;
        {
          std::lock_guard<std::mutex> l(mu_);
          cancelled = j->ckpt->cancelled;
        }
        bool empty_payload = j->manifest.num_chunks() == 0;
        if (!cancelled && !j->failed && !empty_payload) break;
        // Stop submitting; finish once its writes in flight have completed.
        q.pop_front();
        j->all_submitted = true;
        if (empty_payload && !cancelled && !j->failed && !j->started) {
          j->started = disk_->BeginWrite(j->manifest, &j->write_id).ok();
          j->failed = !j->started;
          j->first_write_us = now_us;
          in_flight_jobs_[j->id] = j;
        }
        if (j->done_chunks == j->submitted) FinishJob(j);
      }
      if (!q.empty()) {
        const Job& j = *q.front();
        cands.push_back({tid, Padded(j.manifest.chunk_len(j.next_chunk))});
      }
    }
    if (cands.empty()) return false;
    uint64_t retry = 0;
    std::optional<TenantNo> pick = sched_.Pick(now_us, cands, &retry);
    if (!pick) {
      *retry_us = retry;
      return true;
    }
    auto& q = active_[*pick];
    std::shared_ptr<Job> job = q.front();
    if (!job->started) {
      if (!disk_->BeginWrite(job->manifest, &job->write_id).ok()) {
        job->failed = true;
        continue;  // dropped at the top of the next round
      }
      job->started = true;
      job->first_write_us = now_us;
      in_flight_jobs_[job->id] = job;
      last_start_us_[job->tenant] = now_us;
    }
    uint64_t i = job->next_chunk++;
    uint32_t pool_index = job->ckpt->chunks[i];  // stable while job_active
    const uint8_t* data = pool_->chunk(pool_index);
    uint64_t len = job->manifest.chunk_len(i);
    job->manifest.chunk_crcs[i] = Crc32c(data, len);
    int buf_index = disk_->registered() ? static_cast<int>(pool_index) : -1;
    if (disk_->SubmitChunk(job->write_id, i, data, Padded(len), buf_index, job->id).ok()) {
      job->submitted++;
    } else {
      job->failed = true;
    }
    if (job->next_chunk == job->manifest.num_chunks() && !job->failed) {
      q.pop_front();
      job->all_submitted = true;
      if (job->done_chunks == job->submitted) FinishJob(job);
    }
  }
  return false;
}

void Engine::Impl::OnCompletions(const std::vector<Tier::Completion>& done) {
  for (const Tier::Completion& c : done) {
    auto it = in_flight_jobs_.find(c.token);
    if (it == in_flight_jobs_.end()) continue;
    std::shared_ptr<Job> job = it->second;
    job->done_chunks++;
    if (!c.status.ok()) job->failed = true;
    if (job->all_submitted && job->done_chunks == job->submitted) FinishJob(job);
  }
}

void Engine::Impl::FinishJob(const std::shared_ptr<Job>& job) {
  bool cancelled;
  {
    std::lock_guard<std::mutex> l(mu_);
    cancelled = job->ckpt->cancelled;
  }
  in_flight_jobs_.erase(job->id);
  job->writes_done_us = SteadyNowUs();
  if (job->failed || cancelled || !job->started) {
    if (job->started) disk_->Abort(job->write_id);
    CompleteJob(job, Status::IoError(), cancelled);
    return;
  }
  // The commit's flushes run on the commit thread; the worker moves on.
  {
    std::lock_guard<std::mutex> l(commit_mu_);
    commits_.push_back(job);
  }
  commit_cv_.notify_one();
}

void Engine::Impl::CommitLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(commit_mu_);
      commit_cv_.wait(l, [&] { return commit_stop_ || !commits_.empty(); });
      if (commits_.empty()) return;  // stopping with nothing left
      job = commits_.front();
      commits_.pop_front();
    }
    uint64_t begin_us = SteadyNowUs();
    Status st = disk_->Commit(job->write_id, job->manifest);
    job->commit_us = SteadyNowUs() - begin_us;
    bool cancelled;
    {
      std::lock_guard<std::mutex> l(mu_);
      cancelled = job->ckpt->cancelled;
    }
    CompleteJob(job, st, cancelled);
  }
}

void Engine::Impl::CompleteJob(const std::shared_ptr<Job>& job, Status st, bool cancelled) {
  uint64_t finished_us = SteadyNowUs();
  std::vector<PendingEvent> events;
  std::vector<std::shared_ptr<Ckpt>> remove;
  bool replicate = false;
  Policy policy;
  {
    std::lock_guard<std::mutex> l(mu_);
    Ckpt& c = *job->ckpt;
    TenantState& t = TenantLocked(job->tenant);
    StreamState* s = StreamLocked(job->tenant, job->stream);
    c.job_active = false;
    if (st.ok()) {
      t.stats.bytes_persisted += job->manifest.padded_bytes();
      t.stats.persist_busy_us += finished_us - job->first_write_us;
      t.stats.persist_queue_us +=
          job->first_write_us - std::min(job->first_write_us, job->admitted_us);
      t.stats.persist_write_us += job->writes_done_us - job->first_write_us;
      t.stats.persist_commit_us += job->commit_us;
      if (job->rpo_s > 0 && finished_us - job->admitted_us > uint64_t{job->rpo_s} * 1000000) {
        t.stats.rpo_misses++;
      }
      if (!c.in_index) {
        // Deleted while committing: undo the commit.
        t.stats.disk_bytes -= c.disk_reserved;
        c.disk_reserved = 0;
        remove.push_back(job->ckpt);
      } else {
        c.manifest.chunk_crcs = job->manifest.chunk_crcs;
        c.sealed = true;
        c.state = CkptState::kDurable;
        c.tier = TierKind::kLocalDisk;
        t.stats.durable++;
        if (s != nullptr && s->policy.tier == TierKind::kPeerHost) {
          // DURABLE waits for the copy on another host (replica.cc).
          c.replica = ReplicaState::kPending;
          replicate = true;
          policy = s->policy;
        } else {
          events.push_back({numbers_.Name(job->tenant), EventKind::kDurable, job->stream,
                            job->manifest.step, TierKind::kLocalDisk, StatusCode::kOk, 0});
        }
        if (s != nullptr) RetainLocked(job->tenant, job->stream, s, &remove);
      }
    } else {
      t.stats.disk_bytes -= c.disk_reserved;
      c.disk_reserved = 0;
      if (!cancelled) {
        c.failed = true;
        t.stats.persist_failures++;
        TierKind policy_tier = s != nullptr ? s->policy.tier : TierKind::kLocalDisk;
        events.push_back({numbers_.Name(job->tenant), EventKind::kFailed, job->stream,
                          job->manifest.step, policy_tier, st.code(), 0});
        // The snapshot stays restorable as STAGED while the memory-tier budget
        // has room for it (SPEC.md §7.5.2); a newer durable checkpoint
        // supersedes it.
        uint64_t budget = config_.memory_tier_bytes / config_.chunk_bytes;
        if (c.in_index && memory_tier_chunks_ + c.chunks.size() <= budget) {
          c.want_memory = true;
          c.tier = TierKind::kHostMemory;
          c.manifest.chunk_crcs = job->manifest.chunk_crcs;
          c.sealed = job->next_chunk == job->manifest.num_chunks();
          t.memory_chunks += c.chunks.size();
          memory_tier_chunks_ += c.chunks.size();
          DecideLocked(Decision::Kind::kKeepAfterFailure, job->tenant, job->stream,
                       job->manifest.step, c.chunks.size() * config_.chunk_bytes);
        } else if (s != nullptr) {
          auto it = s->ckpts.find(job->manifest.step);
          if (it != s->ckpts.end() && it->second == job->ckpt) s->ckpts.erase(it);
          c.in_index = false;
        }
      }
    }
    MaybeReleaseLocked(job->tenant, &c);
  }
  // Retention must not delay DURABLE: the evicted step directories are only
  // renamed out of the way here (start-up removes such names, and re-applies
  // retention if a crash undoes the rename); their files go after the waiters
  // have been woken.
  std::vector<std::string> trash;
  for (const auto& r : remove) {
    std::string path;
    if (disk_->Retire(r->manifest.tenant, r->manifest.stream, r->manifest.step, &path)) {
      trash.push_back(std::move(path));
    } else {
      disk_->Remove(r->manifest.tenant, r->manifest.stream, r->manifest.step);
    }
  }
  Publish(events);
  Settle(job);
  for (const std::string& path : trash) disk_->RemoveRetired(path);
  if (replicate) StartReplica(job->tenant, job->stream, job->ckpt, policy);
}

void Engine::Impl::AbandonAll() {
  // Let the writes in flight land before their buffers go away, then drop
  // every uncommitted write; start-up would remove them anyway.
  std::vector<Tier::Completion> done;
  while (disk_->InFlight() > 0) {
    done.clear();
    disk_->Poll(100000, &done);
  }
  for (auto& [id, job] : in_flight_jobs_) {
    if (job->started) disk_->Abort(job->write_id);
  }
  in_flight_jobs_.clear();
  active_.clear();
  waiting_.clear();
}

}  // namespace hz::checkpoint
