// Engine: configuration, recovery, policies and the helpers shared by the
// request paths (requests.cc), just-in-time saves (jit.cc) and the persist
// worker (worker.cc).
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine_impl.h"
#include "hz/common/thread_priority.h"

namespace hz::checkpoint {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::shared_ptr<Ckpt> CommittedOnDisk(Manifest m, uint64_t disk_reserved) {
  auto c = std::make_shared<Ckpt>();
  c->state = CkptState::kDurable;
  c->tier = TierKind::kLocalDisk;
  c->sealed = true;
  c->settled = true;
  c->disk_reserved = disk_reserved;
  c->manifest = std::move(m);
  return c;
}

uint64_t SteadyNowUs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count());
}

uint64_t WallTime10s() {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  return static_cast<uint64_t>(s) / 10 * 10;
}

// ---------------------------------------------------------------------------
// Engine facade

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

void Engine::ReserveStaging(const EngineConfig& config) {
  if (config.chunk_bytes == 0 || config.chunk_bytes % kIoAlign != 0) return;
  const size_t chunks = config.staging_bytes / config.chunk_bytes;
  if (chunks == 0 || chunks > 65536) return;
  StagingPool::Reserve(config.chunk_bytes, chunks);
}

Status Engine::Open(const EngineConfig& config, std::unique_ptr<Engine>* out) {
  if (config.chunk_bytes == 0 || config.chunk_bytes % kIoAlign != 0 ||
      config.chunk_bytes > (1u << 30)) {
    return Status::InvalidArgument(
        "chunk_bytes must be a non-zero multiple of 4096, at most 1 GiB");
  }
  size_t chunks = config.staging_bytes / config.chunk_bytes;
  if (chunks == 0 || chunks > 65536) {
    return Status::InvalidArgument("staging_bytes must hold 1..65536 chunks");
  }
  if (config.memory_tier_bytes > config.staging_bytes) {
    return Status::InvalidArgument("memory_tier_bytes exceeds staging_bytes");
  }
  if (config.copy_threads == 0 || config.copy_threads > 64) {
    return Status::InvalidArgument("copy_threads must be 1..64");
  }
  if (config.request_threads == 0 || config.request_threads > 64) {
    return Status::InvalidArgument("request_threads must be 1..64");
  }
  if (config.tenant_request_threads == 0 ||
      config.tenant_request_threads > config.request_threads) {
    return Status::InvalidArgument("tenant_request_threads must be 1..request_threads");
  }
  if (config.jit_max_attempts == 0) {
    return Status::InvalidArgument("jit_max_attempts must be at least 1");
  }
  auto pool = std::make_unique<StagingPool>(config.chunk_bytes, chunks,
                                            /*populate=*/!config.populate_staging_later);
  if (!pool->ok()) return Status::Limit("cannot allocate the staging pool");
  DiskTier::Options opt;
  opt.root = config.root;
  opt.queue_depth = config.queue_depth;
  opt.direct_io = config.direct_io;
  std::unique_ptr<DiskTier> disk;
  Status s = DiskTier::Open(opt, &disk);
  if (!s.ok()) return s;
  if (config.register_buffers && !config.populate_staging_later) {
    disk->RegisterBuffers(pool->Iovecs());
  }
  auto impl = std::make_unique<Impl>(config, std::move(pool), std::move(disk));
  if (!(s = impl->LoadTenantNumbers()).ok()) return s;
  if (!(s = impl->Recover()).ok()) return s;
  impl->Start();
  out->reset(new Engine(std::move(impl)));
  return Status::Ok();
}

// Policies and limits give a tenant its number; every other call looks the
// number up, and a tenant without one is kNoTenant, which holds nothing.
Status Engine::SetLimits(const TenantId& t, const TenantLimits& l) {
  StatusOr<TenantNo> n = impl_->AssignNumber(t);
  if (!n.ok()) return n.status();
  return impl_->SetLimits(*n, l);
}
Status Engine::SetPolicy(const TenantId& t, StreamId s, const Policy& p) {
  StatusOr<TenantNo> n = impl_->AssignNumber(t);
  if (!n.ok()) return n.status();
  return impl_->SetPolicy(*n, s, p);
}
Status Engine::StoreReplica(const ReplicaIn& in) {
  StatusOr<TenantNo> n = impl_->AssignNumber(in.tenant);
  if (!n.ok()) return n.status();
  return impl_->StoreReplica(*n, in);
}
Status Engine::Save(const SaveRequest& r, SaveResult* out) {
  return impl_->Save(impl_->NumberOf(r.tenant), r, out);
}
Status Engine::Restore(const RestoreRequest& r, RestoreResult* out) {
  return impl_->Restore(impl_->NumberOf(r.tenant), r, out);
}
Status Engine::List(const TenantId& t, StreamId s, uint64_t after, uint32_t max,
                    std::vector<ListEntry>* e, bool* more) {
  return impl_->List(impl_->NumberOf(t), s, after, max, e, more);
}
Status Engine::Delete(const TenantId& t, StreamId s, uint64_t step) {
  return impl_->DeleteAndForget(t, impl_->NumberOf(t), s, step);
}
Status Engine::DeleteReplica(const TenantId& t, StreamId s, uint64_t step, uint32_t digest,
                             const std::string& source) {
  return impl_->DeleteReplica(impl_->NumberOf(t), s, step, digest, source);
}
void Engine::ResumeReplicas() {
  impl_->ResumeReplicas();
}
Status Engine::DeclareQuiesce(const TenantId& t, StreamId s, IoSpan w, std::span<const IoSpan> sl) {
  return impl_->DeclareQuiesce(impl_->NumberOf(t), s, w, sl);
}
Status Engine::CancelQuiesce(const TenantId& t, StreamId s) {
  return impl_->CancelQuiesce(impl_->NumberOf(t), s);
}
std::vector<NoticeOutcome> Engine::OnNotice(const TenantId& t, Clock::time_point deadline,
                                            const std::set<StreamId>* only) {
  return impl_->OnNotice(impl_->NumberOf(t), deadline, only);
}
Status Engine::WaitDurable(const TenantId& t, StreamId s, uint64_t step,
                           std::chrono::milliseconds to) {
  return impl_->WaitDurable(impl_->NumberOf(t), s, step, to);
}
bool Engine::HasTenant(const TenantId& t) const {
  return impl_->NumberOf(t) != kNoTenant;
}
Status Engine::ForgetTenant(const TenantId& t) {
  const TenantNo n = impl_->NumberOf(t);
  return n == kNoTenant ? Status::Ok() : impl_->ForgetTenant(t, n);
}
std::vector<StreamId> Engine::Streams(const TenantId& t) const {
  const TenantNo n = impl_->NumberOf(t);
  return n == kNoTenant ? std::vector<StreamId>{} : impl_->StreamsOnDisk(n);
}
Status Engine::Flush(std::chrono::milliseconds timeout) {
  return impl_->Flush(timeout);
}
void Engine::RunAsync(const TenantId& tenant, std::function<void()> fn) {
  impl_->RunAsync(tenant, std::move(fn));
}
Stats Engine::GetStats() const {
  return impl_->GetStats();
}
WaitingTime Engine::StorageWaiting() const {
  return impl_->StorageWaiting();
}
WaitingTime Engine::Impl::StorageWaiting() const {
  std::lock_guard<std::mutex> l(storage_mu_);
  return storage_waiting_.Measure(SteadyNowUs() * 1000);
}
std::vector<Decision> Engine::Decisions() const {
  return impl_->Decisions();
}

// ---------------------------------------------------------------------------
// Construction and recovery

Engine::Impl::Impl(const EngineConfig& config, std::unique_ptr<StagingPool> pool,
                   std::unique_ptr<DiskTier> disk)
    : config_(config),
      pool_(std::move(pool)),
      disk_(std::move(disk)),
      copier_(config.copy_threads, BulkPriority(config.thread_nice, config.idle_guard)),
      sched_(config.disk_bandwidth_bytes_per_s, config.chunk_bytes, 2 * config.chunk_bytes),
      storage_waiting_(uint64_t{config.waiting_window_ms} * 1000000, 10, SteadyNowUs() * 1000),
      requests_(config.tenant_request_threads) {}

Engine::Impl::~Impl() {
  if (staging_setup_.joinable()) staging_setup_.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  // Queued work still runs (its saves answer kShutdown) so every caller
  // hears back; then the request threads end.
  staging_cv_.notify_all();
  requests_.Stop();
  for (auto& t : requesters_) t.join();
  worker_cv_.notify_all();
  staging_cv_.notify_all();
  durable_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> l(commit_mu_);
    commit_stop_ = true;
  }
  commit_cv_.notify_all();
  if (committer_.joinable()) committer_.join();
}

void Engine::PrepareStaging() {
  impl_->PrepareStaging();
}

void Engine::Impl::PrepareStaging() {
  if (!config_.populate_staging_later || staging_setup_.joinable()) return;
  // At the lowest priority: the tenants the process just started to serve
  // again come first.
  staging_setup_ = ThreadAtNice(19, "hz-ckpt-staging", [this] {
    pool_->Populate();
    if (config_.register_buffers) disk_->RegisterBuffers(pool_->Iovecs());
  });
}

void Engine::Impl::Start() {
  const BulkPriority nice(config_.thread_nice, config_.idle_guard);
  worker_ = ThreadAtNice(nice, "hz-ckpt-io", [this] { WorkerLoop(); });
  committer_ = ThreadAtNice(nice, "hz-ckpt-commit", [this] { CommitLoop(); });
  for (unsigned i = 0; i < config_.request_threads; ++i) {
    requesters_.push_back(
        ThreadAtNice(nice, "hz-ckpt-req-" + std::to_string(i), [this] { requests_.Serve(); }));
  }
}

void Engine::Impl::RunAsync(const TenantId& tenant, std::function<void()> fn) {
  requests_.Push(tenant, std::move(fn));
}

Status Engine::Impl::LoadTenantNumbers() {
  return numbers_.Load(config_.root, disk_->HighestTenant());
}

Status Engine::Impl::Recover() {
  std::vector<DiskTier::StreamPolicy> policies;
  disk_->LoadPolicies(&policies);
  std::vector<Manifest> committed;
  std::vector<std::string> cleaned;
  if (!disk_->Recover(&committed, &cleaned).ok()) {
    return Status::IoError("cannot scan checkpoint root " + config_.root);
  }
  std::vector<std::shared_ptr<Ckpt>> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& sp : policies) TenantLocked(sp.tenant).streams[sp.stream].policy = sp.policy;
    for (const std::string& path : cleaned) {
      spdlog::info("checkpoint: removed uncommitted {}", path);
      DecideLocked(Decision::Kind::kRecoveredCleanup, 0, 0, 0, 0);
    }
    for (Manifest& m : committed) {
      TenantState& t = TenantLocked(m.tenant);
      StreamState& s = t.streams[m.stream];
      const uint64_t step = m.step;
      const uint64_t bytes = m.padded_bytes();
      t.stats.disk_bytes += bytes;
      const bool replicated = disk_->IsReplicated(m);
      s.ckpts[step] = CommittedOnDisk(std::move(m), bytes);
      if (replicated) s.ckpts[step]->replica = ReplicaState::kDone;  // lists as PEER_HOST
    }
    // A crash between a commit and its retention pass leaves one too many.
    for (auto& [tid, t] : tenants_) {
      for (auto& [sid, s] : t.streams) RetainLocked(tid, sid, &s, &evicted);
    }
  }
  RemoveFromDisk(evicted);
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Helpers under mu_

TenantState& Engine::Impl::TenantLocked(TenantNo tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return it->second;
  TenantState& t = tenants_[tenant];
  t.limits = config_.default_limits;
  t.stats.tenant = numbers_.Name(tenant);
  sched_.SetWeight(tenant, t.limits.weight);
  return t;
}

StreamState* Engine::Impl::StreamLocked(TenantNo tenant, StreamId stream) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return nullptr;
  auto s = it->second.streams.find(stream);
  return s == it->second.streams.end() ? nullptr : &s->second;
}

void Engine::Impl::DecideLocked(Decision::Kind kind, TenantNo tenant, StreamId stream,
                                uint64_t step, uint64_t value) {
  if (config_.max_decisions == 0) return;
  if (decisions_.size() >= config_.max_decisions) decisions_.pop_front();
  decisions_.push_back(Decision{SteadyNowUs(), kind, numbers_.Name(tenant), stream, step, value});
}

void Engine::Impl::ReleaseChunksLocked(TenantNo tenant, const std::vector<uint32_t>& chunks) {
  if (chunks.empty()) return;
  TenantLocked(tenant).held_chunks -= chunks.size();
  pool_->Release(chunks);
  staging_cv_.notify_all();
}

uint64_t Engine::Impl::ShareLocked(const TenantState& t, uint64_t total) const {
  uint64_t weights = 0;
  for (const auto& [id, other] : tenants_) {
    if (!other.forgotten) weights += std::max<uint32_t>(other.limits.weight, 1);
  }
  const uint64_t w = std::max<uint32_t>(t.limits.weight, 1);
  if (weights < w) weights = w;
  return total / weights * w + total % weights * w / weights;
}

uint64_t Engine::Impl::StagingQuotaLocked(const TenantState& t) const {
  if (t.limits.staging_bytes != 0) {
    return std::min<uint64_t>(t.limits.staging_bytes / config_.chunk_bytes, pool_->total());
  }
  return std::max<uint64_t>(ShareLocked(t, pool_->total()), 1);
}

uint64_t Engine::Impl::DiskQuotaLocked(const TenantState& t) const {
  if (config_.disk_bytes == 0) return t.limits.disk_bytes;
  return std::min(t.limits.disk_bytes, ShareLocked(t, config_.disk_bytes));
}

uint64_t Engine::Impl::QuiesceChunksLocked() const {
  uint64_t n = 0;
  for (const auto& [id, t] : tenants_) {
    for (const auto& [sid, s] : t.streams) n += s.quiesce ? s.quiesce->reserved.size() : 0;
  }
  return n;
}

uint64_t Engine::Impl::QuiesceCapChunks() const {
  if (config_.quiesce_bytes == 0) return pool_->total() / 2;
  return std::min<uint64_t>(config_.quiesce_bytes / config_.chunk_bytes, pool_->total());
}

void Engine::Impl::MaybeReleaseLocked(TenantNo tenant, Ckpt* c) {
  if (c->chunks.empty() || c->job_active || c->pins > 0) return;
  // Memory-tier checkpoints (and failed persists kept in memory) hold their
  // chunks while they are listed.
  if (c->in_index && c->want_memory) return;
  TenantState& t = TenantLocked(tenant);
  if (c->want_memory) {
    t.memory_chunks -= c->chunks.size();
    memory_tier_chunks_ -= c->chunks.size();
    c->want_memory = false;
  }
  ReleaseChunksLocked(tenant, c->chunks);
  c->chunks.clear();
}

void Engine::Impl::RetainLocked(TenantNo tenant, StreamId stream, StreamState* s,
                                std::vector<std::shared_ptr<Ckpt>>* remove_from_disk) {
  uint32_t keep = std::max<uint32_t>(1, s->policy.retention);
  uint32_t durable = 0;
  uint64_t newest_durable = 0;
  bool have_durable = false;
  for (auto it = s->ckpts.rbegin(); it != s->ckpts.rend(); ++it) {
    if (it->second->state == CkptState::kDurable) {
      newest_durable = it->first;
      have_durable = true;
      break;
    }
  }
  for (auto it = s->ckpts.rbegin(); it != s->ckpts.rend();) {
    Ckpt& c = *it->second;
    bool evict = false;
    if (c.state == CkptState::kDurable) {
      evict = ++durable > keep;
    } else {
      // A failed persist kept in memory is superseded by a newer durable one.
      evict = c.failed && have_durable && it->first < newest_durable;
    }
    if (!evict || c.pins > 0) {
      ++it;
      continue;
    }
    DecideLocked(Decision::Kind::kEvict, tenant, stream, it->first, 0);
    c.in_index = false;
    if (c.tier == TierKind::kLocalDisk && c.state == CkptState::kDurable) {
      TenantLocked(tenant).stats.disk_bytes -= c.disk_reserved;
      c.disk_reserved = 0;
      remove_from_disk->push_back(it->second);
    }
    MaybeReleaseLocked(tenant, &c);
    it = std::make_reverse_iterator(s->ckpts.erase(std::next(it).base()));
  }
}

void Engine::Impl::RemoveFromDisk(const std::vector<std::shared_ptr<Ckpt>>& ckpts) {
  for (const auto& c : ckpts) {
    disk_->Remove(c->manifest.tenant, c->manifest.stream, c->manifest.step);
  }
}

Status Engine::Impl::CheckStepLocked(const StreamState& s, uint64_t step) const {
  if (step == 0 || step == kLatestStep) return Status::InvalidArgument();
  if (s.ckpts.count(step) != 0) return Status::Exists();
  if (!s.ckpts.empty() && step < s.ckpts.rbegin()->first) return Status::InvalidArgument();
  return Status::Ok();
}

Status Engine::Impl::AcquireLocked(std::unique_lock<std::mutex>& lock, TenantNo tenant, size_t n,
                                   Clock::time_point deadline, const std::function<bool()>* cancel,
                                   std::vector<uint32_t>* chunks, uint64_t* waited_us) {
  TenantState& t = TenantLocked(tenant);
  const uint64_t quota_chunks = StagingQuotaLocked(t);
  *waited_us = 0;
  if (n > pool_->total() || n > quota_chunks) return Status::Limit();
  auto fits = [&] {
    return stop_ || (pool_->free_count() >= n && t.held_chunks + n <= quota_chunks);
  };
  auto start = Clock::now();
  // Backpressure: wait for the worker to free chunks, never grow the pool.
  // A cancellable wait looks at the caller's flag every few milliseconds.
  auto cancelled = [cancel] { return cancel != nullptr && *cancel && (*cancel)(); };
  while (!fits() && !cancelled() && Clock::now() < deadline) {
    auto until = cancel == nullptr || !*cancel
                     ? deadline
                     : std::min(deadline, Clock::now() + std::chrono::milliseconds(5));
    staging_cv_.wait_until(lock, until, fits);
  }
  if (cancelled()) return Status::Aborted();
  *waited_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  if (stop_) return Status::Shutdown();
  if (!fits() || !pool_->TryAcquire(n, chunks)) return Status::TryAgain();
  t.held_chunks += n;
  return Status::Ok();
}

Status Engine::Impl::PlaceLocked(TenantNo tenant, StreamId stream, const StreamState& s,
                                 const Manifest& m, bool* want_memory, uint64_t* disk_reserved) {
  TenantState& t = TenantLocked(tenant);
  *want_memory = false;
  *disk_reserved = 0;
  uint64_t n = m.num_chunks();
  if (s.policy.tier == TierKind::kHostMemory) {
    // The tier is shared by weight, so no tenant can keep it full for others.
    uint64_t budget = config_.memory_tier_bytes / config_.chunk_bytes;
    if (memory_tier_chunks_ + n <= budget && t.memory_chunks + n <= ShareLocked(t, budget)) {
      *want_memory = true;
      DecideLocked(Decision::Kind::kPlaceMemory, tenant, stream, m.step, m.payload_bytes());
      return Status::Ok();
    }
    DecideLocked(Decision::Kind::kSpillToDisk, tenant, stream, m.step, m.payload_bytes());
  } else {
    DecideLocked(Decision::Kind::kPlaceDisk, tenant, stream, m.step, m.payload_bytes());
  }
  // Until the retention pass after the commit, the old checkpoints still count.
  uint64_t need = m.padded_bytes();
  const uint64_t quota = DiskQuotaLocked(t);
  if (need > quota || t.stats.disk_bytes > quota - need) {
    return Status::Limit();
  }
  // Reserved now, so concurrent saves cannot overshoot the quota together.
  t.stats.disk_bytes += need;
  *disk_reserved = need;
  return Status::Ok();
}

std::shared_ptr<Ckpt> Engine::Impl::AdmitLocked(TenantNo tenant, StreamId stream, StreamState* s,
                                                Manifest manifest, std::vector<uint32_t> chunks,
                                                bool want_memory, uint64_t disk_reserved,
                                                std::vector<std::shared_ptr<Ckpt>>* evicted) {
  TenantState& t = TenantLocked(tenant);
  auto c = std::make_shared<Ckpt>();
  c->chunks = std::move(chunks);
  c->want_memory = want_memory;
  c->tier = want_memory ? TierKind::kHostMemory : TierKind::kLocalDisk;
  c->job_active = true;
  c->disk_reserved = disk_reserved;
  manifest.time_s = WallTime10s();  // when the save completed (CKPT_LIST)
  c->manifest = manifest;
  t.stats.saves++;
  s->ckpts[manifest.step] = c;
  if (want_memory) {
    // The host-memory tier is durable on completion (SPEC.md §7.5.2); the
    // worker seals the chunks' checksums and publishes DURABLE.
    t.memory_chunks += c->chunks.size();
    memory_tier_chunks_ += c->chunks.size();
    c->state = CkptState::kDurable;
    t.stats.durable++;
    RetainLocked(tenant, stream, s, evicted);
  }
  auto job = std::make_shared<Job>();
  job->id = next_job_id_++;
  job->tenant = tenant;
  job->stream = stream;
  job->ckpt = c;
  job->manifest = std::move(manifest);
  job->manifest.chunk_crcs.assign(job->manifest.num_chunks(), 0);
  job->rpo_s = s->policy.rpo_s;
  job->admitted_us = SteadyNowUs();
  incoming_.push_back(std::move(job));
  ++jobs_pending_;
  worker_cv_.notify_all();
  return c;
}

std::vector<CopyOp> Engine::Impl::SnapshotOps(std::span<const IoSpan> slices,
                                              std::span<const uint8_t> meta,
                                              const std::vector<uint32_t>& chunks) const {
  std::vector<CopyOp> ops;
  const uint64_t cb = config_.chunk_bytes;
  uint64_t pos = 0;  // payload offset
  auto add = [&](const uint8_t* src, uint64_t len) {
    while (len > 0) {
      uint64_t ci = pos / cb, off = pos % cb;
      uint64_t n = std::min(len, cb - off);
      ops.push_back({pool_->chunk(chunks[ci]) + off, src, static_cast<size_t>(n)});
      src += n;
      len -= n;
      pos += n;
    }
  };
  for (const IoSpan& s : slices) add(s.data, s.len);
  add(meta.data(), meta.size());
  return ops;
}

void Engine::Impl::ZeroTail(const Manifest& m, const std::vector<uint32_t>& chunks) const {
  // The last chunk is written padded to 4096 bytes: pad with zeros, not with
  // whatever an earlier snapshot left in the pool.
  uint64_t n = m.num_chunks();
  if (n == 0) return;
  uint64_t len = m.chunk_len(n - 1);
  uint64_t padded = (len + kIoAlign - 1) / kIoAlign * kIoAlign;
  std::memset(pool_->chunk(chunks[n - 1]) + len, 0, padded - len);
}

void Engine::Impl::Publish(const std::vector<PendingEvent>& events) {
  if (config_.sink == nullptr) return;
  for (const PendingEvent& e : events) config_.sink->PublishEvent(e);
}

// ---------------------------------------------------------------------------
// Policies and limits

Status Engine::Impl::SetLimits(TenantNo tenant, const TenantLimits& limits) {
  if (limits.max_streams == 0 || limits.weight == 0) return Status::InvalidArgument();
  std::lock_guard<std::mutex> l(mu_);
  TenantState& t = TenantLocked(tenant);
  t.limits = limits;
  sched_.SetWeight(tenant, limits.weight);
  staging_cv_.notify_all();
  return Status::Ok();
}

Status Engine::Impl::SetPolicy(TenantNo tenant, StreamId stream, const Policy& policy,
                               bool check_peer) {
  if (stream == 0 || policy.retention == 0 || policy.retention > 1000000)
    return Status::InvalidArgument();
  if (policy.tier != TierKind::kHostMemory && policy.tier != TierKind::kLocalDisk &&
      policy.tier != TierKind::kPeerHost) {
    return Status::InvalidArgument();
  }
  if (policy.tier == TierKind::kPeerHost && check_peer) {
    if (config_.peer == nullptr) return Status::NotSupported("this host is not in a cluster");
    if (Status st = config_.peer->Available(numbers_.Name(tenant)); !st.ok()) return st;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    TenantState& t = TenantLocked(tenant);
    if (t.streams.find(stream) == t.streams.end() && t.streams.size() >= t.limits.max_streams) {
      return Status::Limit();
    }
  }
  // Persisted first so a restarted engine knows the stream and its retention.
  Status st = disk_->SavePolicy(tenant, stream, policy);
  if (!st.ok()) return st;
  std::vector<std::shared_ptr<Ckpt>> evicted;
  {
    std::unique_lock<std::mutex> l(mu_);
    // Without AUTO_SAVE_ON_NOTICE the registration ends: its copy first.
    if (!policy.auto_save_on_notice) StopJitLocked(l, tenant, stream);
    TenantState& t = TenantLocked(tenant);
    if (t.streams.find(stream) == t.streams.end() && t.streams.size() >= t.limits.max_streams) {
      return Status::Limit();
    }
    StreamState& s = t.streams[stream];
    s.policy = policy;
    if (!policy.auto_save_on_notice) DropQuiesceLocked(tenant, &s);
    RetainLocked(tenant, stream, &s, &evicted);
  }
  RemoveFromDisk(evicted);
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Waiting and observation

Status Engine::Impl::WaitDurable(TenantNo tenant, StreamId stream, uint64_t step,
                                 std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr) return Status::NotFound();
  auto it = s->ckpts.find(step);
  if (it == s->ckpts.end()) return Status::NotFound();
  std::shared_ptr<Ckpt> c = it->second;
  bool done = durable_cv_.wait_for(
      lock, timeout, [&] { return stop_ || (c->settled && c->replica != ReplicaState::kPending); });
  if (!done) return Status::TimedOut();
  if (c->failed) return Status::IoError();
  if (c->replica == ReplicaState::kFailed) return Status(c->replica_code, "replica failed");
  if (c->cancelled) return Status::NotFound();
  if (c->state == CkptState::kDurable) return Status::Ok();
  return stop_ ? Status::Shutdown() : Status::NotFound();
}

Status Engine::Impl::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool done = durable_cv_.wait_for(lock, timeout, [&] { return stop_ || jobs_pending_ == 0; });
  return done && jobs_pending_ == 0 ? Status::Ok() : Status::TimedOut();
}

Stats Engine::Impl::GetStats() const {
  std::lock_guard<std::mutex> l(mu_);
  Stats st;
  st.chunk_bytes = config_.chunk_bytes;
  st.pool_chunks = pool_->total();
  st.free_chunks = pool_->free_count();
  st.memory_tier_chunks = memory_tier_chunks_;
  st.direct_io = disk_->direct_io();
  st.registered_buffers = disk_->registered();
  st.persists_in_flight = jobs_pending_;
  for (const auto& [id, t] : tenants_) {
    TenantStats ts = t.stats;
    ts.tenant = numbers_.Name(id);
    ts.streams = static_cast<uint32_t>(t.streams.size());
    ts.staging_bytes = t.held_chunks * config_.chunk_bytes;
    ts.memory_tier_bytes = t.memory_chunks * config_.chunk_bytes;
    for (const auto& [sid, s] : t.streams) {
      if (s.saving && s.saving_step == kLatestStep) ++ts.jit_copies;
    }
    st.tenants.push_back(ts);
  }
  return st;
}

std::vector<Decision> Engine::Impl::Decisions() const {
  std::lock_guard<std::mutex> l(mu_);
  return {decisions_.begin(), decisions_.end()};
}

}  // namespace hz::checkpoint
