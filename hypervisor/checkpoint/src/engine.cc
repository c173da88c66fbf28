// Engine: configuration, recovery and the request paths (save, restore, list,
// delete, policies, just-in-time saves). The persist worker is in worker.cc.
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine_impl.h"
#include "quiesce.h"

namespace hz::checkpoint {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxMetaBytes = 1ull << 30;

// Sums span lengths; false on overflow or a null span with bytes.
bool SumSpans(std::span<const IoSpan> spans, uint64_t cap, uint64_t* total) {
  uint64_t sum = 0;
  for (const IoSpan& s : spans) {
    if (s.len != 0 && s.data == nullptr) return false;
    if (s.len > cap - sum) return false;
    sum += s.len;
  }
  *total = sum;
  return true;
}

// An anonymous, page-aligned buffer for reading a checkpoint back from disk.
class ReadBuffer {
 public:
  explicit ReadBuffer(size_t len) : len_(len) {
    if (len == 0) return;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) data_ = static_cast<uint8_t*>(p);
  }
  ~ReadBuffer() {
    if (data_ != nullptr) munmap(data_, len_);
  }
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  uint8_t* data() const { return data_; }
  bool ok() const { return len_ == 0 || data_ != nullptr; }

 private:
  size_t len_;
  uint8_t* data_ = nullptr;
};

}  // namespace

uint64_t SteadyNowUs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count());
}

// ---------------------------------------------------------------------------
// Engine facade

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::Open(const EngineConfig& config, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  if (config.chunk_bytes == 0 || config.chunk_bytes % kIoAlign != 0 ||
      config.chunk_bytes > (1u << 30)) {
    *error = "chunk_bytes must be a non-zero multiple of 4096, at most 1 GiB";
    return nullptr;
  }
  size_t chunks = config.staging_bytes / config.chunk_bytes;
  if (chunks == 0 || chunks > 65536) {
    *error = "staging_bytes must hold 1..65536 chunks";
    return nullptr;
  }
  if (config.memory_tier_bytes > config.staging_bytes) {
    *error = "memory_tier_bytes exceeds staging_bytes";
    return nullptr;
  }
  if (config.copy_threads == 0 || config.copy_threads > 64) {
    *error = "copy_threads must be 1..64";
    return nullptr;
  }
  auto pool = std::make_unique<StagingPool>(config.chunk_bytes, chunks);
  if (!pool->ok()) {
    *error = "cannot allocate the staging pool";
    return nullptr;
  }
  DiskTier::Options opt;
  opt.root = config.root;
  opt.queue_depth = config.queue_depth;
  opt.direct_io = config.direct_io;
  auto disk = DiskTier::Open(opt, error);
  if (!disk) return nullptr;
  if (config.register_buffers) disk->RegisterBuffers(pool->Iovecs());
  auto impl = std::make_unique<Impl>(config, std::move(pool), std::move(disk));
  if (!impl->Recover(error)) return nullptr;
  impl->Start();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status Engine::SetLimits(TenantId t, const TenantLimits& l) {
  return impl_->SetLimits(t, l);
}
Status Engine::SetPolicy(TenantId t, StreamId s, const Policy& p) {
  return impl_->SetPolicy(t, s, p);
}
Status Engine::Save(const SaveRequest& r, SaveResult* out) {
  return impl_->Save(r, out);
}
Status Engine::Restore(const RestoreRequest& r, RestoreResult* out) {
  return impl_->Restore(r, out);
}
Status Engine::List(TenantId t, StreamId s, uint64_t after, uint32_t max, std::vector<ListEntry>* e,
                    bool* more) {
  return impl_->List(t, s, after, max, e, more);
}
Status Engine::Delete(TenantId t, StreamId s, uint64_t step) {
  return impl_->Delete(t, s, step);
}
Status Engine::DeclareQuiesce(TenantId t, StreamId s, IoSpan w, std::span<const IoSpan> sl) {
  return impl_->DeclareQuiesce(t, s, w, sl);
}
std::vector<NoticeOutcome> Engine::OnNotice(TenantId t, Clock::time_point deadline) {
  return impl_->OnNotice(t, deadline);
}
Status Engine::WaitDurable(TenantId t, StreamId s, uint64_t step, std::chrono::milliseconds to) {
  return impl_->WaitDurable(t, s, step, to);
}
Status Engine::Flush(std::chrono::milliseconds timeout) {
  return impl_->Flush(timeout);
}
Stats Engine::GetStats() const {
  return impl_->GetStats();
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
      copier_(config.copy_threads),
      sched_(config.disk_bandwidth_bytes_per_s, config.chunk_bytes, 2 * config.chunk_bytes) {}

Engine::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
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

void Engine::Impl::Start() {
  worker_ = std::thread([this] { WorkerLoop(); });
  committer_ = std::thread([this] { CommitLoop(); });
}

bool Engine::Impl::Recover(std::string* error) {
  std::vector<DiskTier::StreamPolicy> policies;
  disk_->LoadPolicies(&policies);
  std::vector<Manifest> committed;
  std::vector<std::string> cleaned;
  if (disk_->Recover(&committed, &cleaned) != Status::kOk) {
    *error = "cannot scan checkpoint root " + config_.root;
    return false;
  }
  std::vector<std::shared_ptr<Ckpt>> evicted;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& sp : policies) TenantLocked(sp.tenant).streams[sp.stream].policy = sp.policy;
  for (const std::string& path : cleaned) {
    spdlog::info("checkpoint: removed uncommitted {}", path);
    DecideLocked(Decision::Kind::kRecoveredCleanup, 0, 0, 0, 0);
  }
  for (Manifest& m : committed) {
    TenantState& t = TenantLocked(m.tenant);
    StreamState& s = t.streams[m.stream];
    auto c = std::make_shared<Ckpt>();
    c->state = CkptState::kDurable;
    c->tier = TierKind::kLocalDisk;
    c->sealed = true;
    c->settled = true;
    c->disk_reserved = m.padded_bytes();
    t.stats.disk_bytes += c->disk_reserved;
    uint64_t step = m.step;
    c->manifest = std::move(m);
    if (!s.has_step || step > s.last_step) s.last_step = step;
    s.has_step = true;
    s.ckpts[step] = std::move(c);
  }
  // A crash between a commit and its retention pass leaves one too many.
  for (auto& [tid, t] : tenants_) {
    for (auto& [sid, s] : t.streams) RetainLocked(tid, sid, &s, &evicted);
  }
  for (const auto& c : evicted) {
    disk_->Remove(c->manifest.tenant, c->manifest.stream, c->manifest.step);
  }
  return true;
}

// ---------------------------------------------------------------------------
// Helpers under mu_

TenantState& Engine::Impl::TenantLocked(TenantId tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return it->second;
  TenantState& t = tenants_[tenant];
  t.limits = config_.default_limits;
  t.stats.tenant = tenant;
  sched_.SetWeight(tenant, t.limits.weight);
  return t;
}

StreamState* Engine::Impl::StreamLocked(TenantId tenant, StreamId stream) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return nullptr;
  auto s = it->second.streams.find(stream);
  return s == it->second.streams.end() ? nullptr : &s->second;
}

void Engine::Impl::DecideLocked(Decision::Kind kind, TenantId tenant, StreamId stream,
                                uint64_t step, uint64_t value) {
  if (config_.max_decisions == 0) return;
  if (decisions_.size() >= config_.max_decisions) decisions_.pop_front();
  decisions_.push_back(Decision{SteadyNowUs(), kind, tenant, stream, step, value});
}

void Engine::Impl::MaybeReleaseLocked(TenantId tenant, Ckpt* c) {
  if (c->chunks.empty() || c->job_active || c->pins > 0) return;
  bool keep = c->in_index && c->want_memory && c->state == CkptState::kDurable;
  if (keep) return;
  TenantState& t = TenantLocked(tenant);
  t.held_chunks -= c->chunks.size();
  if (c->want_memory) {
    t.memory_chunks -= c->chunks.size();
    memory_tier_chunks_ -= c->chunks.size();
    c->want_memory = false;
  }
  pool_->Release(c->chunks);
  c->chunks.clear();
  staging_cv_.notify_all();
}

void Engine::Impl::RetainLocked(TenantId tenant, StreamId stream, StreamState* s,
                                std::vector<std::shared_ptr<Ckpt>>* remove_from_disk) {
  uint32_t keep = std::max<uint32_t>(1, s->policy.retention);
  uint32_t durable = 0;
  for (auto it = s->ckpts.rbegin(); it != s->ckpts.rend();) {
    Ckpt& c = *it->second;
    if (c.state != CkptState::kDurable || ++durable <= keep) {
      ++it;
      continue;
    }
    DecideLocked(Decision::Kind::kEvict, tenant, stream, it->first, 0);
    c.in_index = false;
    if (c.tier == TierKind::kLocalDisk) {
      TenantLocked(tenant).stats.disk_bytes -= c.disk_reserved;
      c.disk_reserved = 0;
      remove_from_disk->push_back(it->second);
    }
    MaybeReleaseLocked(tenant, &c);
    it = std::make_reverse_iterator(s->ckpts.erase(std::next(it).base()));
  }
}

Status Engine::Impl::AcquireLocked(std::unique_lock<std::mutex>& lock, TenantId tenant, size_t n,
                                   Clock::time_point deadline, std::vector<uint32_t>* chunks,
                                   uint64_t* waited_us) {
  TenantState& t = TenantLocked(tenant);
  uint64_t quota_chunks = t.limits.staging_bytes / config_.chunk_bytes;
  if (n > pool_->total() || n > quota_chunks) return Status::kLimit;
  auto fits = [&] {
    return stop_ || (pool_->free_count() >= n && t.held_chunks + n <= quota_chunks);
  };
  auto start = Clock::now();
  // Backpressure: wait for the worker to free chunks, never grow the pool.
  if (!fits()) staging_cv_.wait_until(lock, deadline, fits);
  *waited_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  if (stop_) return Status::kShutdown;
  if (!fits() || !pool_->TryAcquire(n, chunks)) return Status::kAgain;
  t.held_chunks += n;
  return Status::kOk;
}

Status Engine::Impl::PlaceLocked(TenantId tenant, StreamId stream, const StreamState& s,
                                 const Manifest& m, bool* want_memory, uint64_t* disk_reserved) {
  TenantState& t = TenantLocked(tenant);
  *want_memory = false;
  *disk_reserved = 0;
  uint64_t n = m.num_chunks();
  if (s.policy.tier == TierKind::kHostMemory) {
    uint64_t budget = config_.memory_tier_bytes / config_.chunk_bytes;
    if (memory_tier_chunks_ + n <= budget) {
      *want_memory = true;
      DecideLocked(Decision::Kind::kPlaceMemory, tenant, stream, m.step, m.payload_bytes());
      return Status::kOk;
    }
    DecideLocked(Decision::Kind::kSpillToDisk, tenant, stream, m.step, m.payload_bytes());
  } else {
    DecideLocked(Decision::Kind::kPlaceDisk, tenant, stream, m.step, m.payload_bytes());
  }
  // Until the retention pass after the commit, the old checkpoints still count.
  uint64_t need = m.padded_bytes();
  if (need > t.limits.disk_bytes || t.stats.disk_bytes > t.limits.disk_bytes - need) {
    return Status::kLimit;
  }
  // Reserved now, so concurrent saves cannot overshoot the quota together.
  t.stats.disk_bytes += need;
  *disk_reserved = need;
  return Status::kOk;
}

std::shared_ptr<Ckpt> Engine::Impl::AdmitLocked(TenantId tenant, StreamId stream, StreamState* s,
                                                Manifest manifest, std::vector<uint32_t> chunks,
                                                bool want_memory, uint64_t disk_reserved) {
  TenantState& t = TenantLocked(tenant);
  auto c = std::make_shared<Ckpt>();
  c->chunks = std::move(chunks);
  c->want_memory = want_memory;
  c->tier = want_memory ? TierKind::kHostMemory : TierKind::kLocalDisk;
  c->job_active = true;
  c->disk_reserved = disk_reserved;
  c->manifest = manifest;
  if (want_memory) {
    t.memory_chunks += c->chunks.size();
    memory_tier_chunks_ += c->chunks.size();
  }
  t.stats.saves++;
  s->ckpts[manifest.step] = c;
  auto job = std::make_shared<Job>();
  job->id = next_job_id_++;
  job->tenant = tenant;
  job->stream = stream;
  job->ckpt = c;
  job->manifest = std::move(manifest);
  job->manifest.chunk_crcs.assign(job->manifest.num_chunks(), 0);
  job->rpo_s = s->policy.rpo_s;
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
  for (const PendingEvent& e : events) config_.sink->Publish(e.tenant, e.kind, e.stream, e.step);
}

// ---------------------------------------------------------------------------
// Policies and limits

Status Engine::Impl::SetLimits(TenantId tenant, const TenantLimits& limits) {
  if (limits.max_streams == 0 || limits.weight == 0) return Status::kInvalid;
  std::lock_guard<std::mutex> l(mu_);
  TenantState& t = TenantLocked(tenant);
  t.limits = limits;
  sched_.SetWeight(tenant, limits.weight);
  staging_cv_.notify_all();
  return Status::kOk;
}

Status Engine::Impl::SetPolicy(TenantId tenant, StreamId stream, const Policy& policy) {
  if (stream == 0 || policy.retention == 0 || policy.retention > 1000000) return Status::kInvalid;
  if (policy.tier != TierKind::kHostMemory && policy.tier != TierKind::kLocalDisk) {
    return Status::kInvalid;  // the peer-host tier is not offered yet
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    TenantState& t = TenantLocked(tenant);
    if (t.streams.find(stream) == t.streams.end() && t.streams.size() >= t.limits.max_streams) {
      return Status::kLimit;
    }
  }
  // Persisted first so a restarted engine knows the stream and its retention.
  Status st = disk_->SavePolicy(tenant, stream, policy);
  if (st != Status::kOk) return st;
  std::vector<std::shared_ptr<Ckpt>> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    TenantState& t = TenantLocked(tenant);
    if (t.streams.find(stream) == t.streams.end() && t.streams.size() >= t.limits.max_streams) {
      return Status::kLimit;
    }
    StreamState& s = t.streams[stream];
    s.policy = policy;
    RetainLocked(tenant, stream, &s, &evicted);
  }
  for (const auto& c : evicted) disk_->Remove(tenant, stream, c->manifest.step);
  return Status::kOk;
}

// ---------------------------------------------------------------------------
// Save

Status Engine::Impl::Save(const SaveRequest& req, SaveResult* result) {
  const auto start = Clock::now();
  if (req.slices.empty() || req.slices.size() > kMaxSlices || req.step == kLatestStep) {
    return Status::kInvalid;
  }
  if (req.meta.size() > kMaxMetaBytes || (!req.meta.empty() && req.meta.data() == nullptr)) {
    return Status::kInvalid;
  }
  uint64_t slice_bytes = 0;
  if (!SumSpans(req.slices, std::numeric_limits<uint64_t>::max() / 4, &slice_bytes)) {
    return Status::kInvalid;
  }
  Manifest m;
  m.tenant = req.tenant;
  m.stream = req.stream;
  m.step = req.step;
  m.chunk_bytes = config_.chunk_bytes;
  m.meta_len = req.meta.size();
  m.slice_sizes.reserve(req.slices.size());
  for (const IoSpan& s : req.slices) m.slice_sizes.push_back(s.len);
  const uint64_t nchunks = m.num_chunks();

  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return Status::kShutdown;
  StreamState* s = StreamLocked(req.tenant, req.stream);
  if (s == nullptr) return Status::kNotFound;
  if (s->has_step && req.step <= s->last_step) return Status::kInvalid;
  bool want_memory = false;
  uint64_t disk_reserved = 0;
  Status st = PlaceLocked(req.tenant, req.stream, *s, m, &want_memory, &disk_reserved);
  if (st != Status::kOk) return st;
  // Claim the step now so a concurrent save of the same stream cannot reuse it.
  const bool had_step = s->has_step;
  const uint64_t prev_step = s->last_step;
  s->has_step = true;
  s->last_step = req.step;
  auto deadline = start + std::chrono::milliseconds(s->policy.stall_budget_ms);
  std::vector<uint32_t> chunks;
  uint64_t waited_us = 0;
  st = AcquireLocked(lock, req.tenant, nchunks, deadline, &chunks, &waited_us);
  s = StreamLocked(req.tenant, req.stream);  // the map may have changed while waiting
  if (st != Status::kOk) {
    TenantLocked(req.tenant).stats.disk_bytes -= disk_reserved;
    if (s != nullptr && s->last_step == req.step) {
      s->has_step = had_step;
      s->last_step = prev_step;
    }
    if (st == Status::kAgain) {
      TenantLocked(req.tenant).stats.saves_again++;
      DecideLocked(Decision::Kind::kRejectAgain, req.tenant, req.stream, req.step,
                   m.payload_bytes());
    }
    return st;
  }
  if (waited_us > 0) {
    DecideLocked(Decision::Kind::kBackpressure, req.tenant, req.stream, req.step, waited_us);
  }
  lock.unlock();

  // The stall proper: copy into the staging pool (in parallel for large states).
  std::vector<CopyOp> ops = SnapshotOps(req.slices, req.meta, chunks);
  uint64_t total = 0;
  for (const CopyOp& op : ops) total += op.len;
  if (total >= config_.parallel_copy_min_bytes) {
    copier_.Run(ops);
  } else {
    for (const CopyOp& op : ops) std::memcpy(op.dst, op.src, op.len);
  }
  ZeroTail(m, chunks);

  lock.lock();
  s = StreamLocked(req.tenant, req.stream);
  if (s == nullptr) {  // cannot happen today: streams are never removed
    TenantLocked(req.tenant).stats.disk_bytes -= disk_reserved;
    TenantLocked(req.tenant).held_chunks -= chunks.size();
    pool_->Release(chunks);
    return Status::kNotFound;
  }
  AdmitLocked(req.tenant, req.stream, s, std::move(m), std::move(chunks), want_memory,
              disk_reserved);
  lock.unlock();
  result->step = req.step;
  result->state = CkptState::kStaged;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  result->stall_us = static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX));
  return Status::kOk;
}

// ---------------------------------------------------------------------------
// Restore

Status Engine::Impl::Restore(const RestoreRequest& req, RestoreResult* result) {
  std::unique_lock<std::mutex> lock(mu_);
  StreamState* s = StreamLocked(req.tenant, req.stream);
  if (s == nullptr) return Status::kNotFound;
  std::shared_ptr<Ckpt> c;
  if (req.step == kLatestStep) {
    for (auto it = s->ckpts.rbegin(); it != s->ckpts.rend(); ++it) {
      if (!it->second->chunks.empty() || it->second->state == CkptState::kDurable) {
        c = it->second;
        break;
      }
    }
  } else {
    auto it = s->ckpts.find(req.step);
    if (it != s->ckpts.end()) c = it->second;
  }
  if (!c) return Status::kNotFound;
  const Manifest m = c->manifest;
  // The destination must have the saved layout exactly.
  if (req.slices.size() != m.slice_sizes.size()) return Status::kInvalid;
  for (size_t i = 0; i < req.slices.size(); ++i) {
    if (req.slices[i].len != m.slice_sizes[i]) return Status::kInvalid;
    if (req.slices[i].len != 0 && req.slices[i].data == nullptr) return Status::kInvalid;
  }
  const uint64_t cb = m.chunk_bytes;
  const uint64_t nchunks = m.num_chunks();
  std::vector<const uint8_t*> chunk_ptr(nchunks);
  std::unique_ptr<ReadBuffer> buf;
  bool from_memory = !c->chunks.empty();
  bool verify = true;
  TierKind tier = c->tier;
  if (from_memory) {
    // Pinned: the worker and retention leave the chunks alone until unpinned.
    c->pins++;
    verify = c->sealed;
    for (uint64_t i = 0; i < nchunks; ++i) chunk_ptr[i] = pool_->chunk(c->chunks[i]);
    tier = TierKind::kHostMemory;
  }
  lock.unlock();

  Status st = Status::kOk;
  if (!from_memory) {
    buf = std::make_unique<ReadBuffer>(m.padded_bytes());
    if (!buf->ok()) st = Status::kAgain;
    if (st == Status::kOk) st = disk_->Read(m, buf->data(), m.padded_bytes());
    for (uint64_t i = 0; st == Status::kOk && i < nchunks; ++i) chunk_ptr[i] = buf->data() + i * cb;
  }
  // Verify every chunk before the first byte goes to the destination.
  for (uint64_t i = 0; st == Status::kOk && verify && i < nchunks; ++i) {
    if (Crc32c(chunk_ptr[i], m.chunk_len(i)) != m.chunk_crcs[i]) st = Status::kCorrupt;
  }
  if (st == Status::kOk) {
    std::vector<CopyOp> ops;
    uint64_t pos = 0;
    auto add = [&](uint8_t* dst, uint64_t len) {
      while (len > 0) {
        uint64_t ci = pos / cb, off = pos % cb;
        uint64_t n = std::min(len, cb - off);
        ops.push_back({dst, chunk_ptr[ci] + off, static_cast<size_t>(n)});
        dst += n;
        len -= n;
        pos += n;
      }
    };
    for (const IoSpan& sp : req.slices) add(sp.data, sp.len);
    result->meta.assign(m.meta_len, 0);
    add(result->meta.data(), m.meta_len);
    copier_.Run(ops);
    result->step = m.step;
    result->bytes = m.slice_bytes();
    result->tier = tier;
  }

  lock.lock();
  if (from_memory) {
    c->pins--;
    MaybeReleaseLocked(req.tenant, c.get());
  }
  TenantState& t = TenantLocked(req.tenant);
  if (st == Status::kOk) t.stats.restores++;
  if (st == Status::kCorrupt) t.stats.corrupt_restores++;
  return st;
}

// ---------------------------------------------------------------------------
// List and delete

Status Engine::Impl::List(TenantId tenant, StreamId stream, uint64_t start_after,
                          uint32_t max_entries, std::vector<ListEntry>* entries, bool* more) {
  if (max_entries == 0) return Status::kInvalid;
  std::lock_guard<std::mutex> l(mu_);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr) return Status::kNotFound;
  entries->clear();
  *more = false;
  auto it = start_after == 0 ? s->ckpts.begin() : s->ckpts.upper_bound(start_after);
  for (; it != s->ckpts.end(); ++it) {
    if (entries->size() == max_entries) {
      *more = true;
      break;
    }
    const Ckpt& c = *it->second;
    entries->push_back(
        ListEntry{it->first, c.manifest.slice_bytes(), c.manifest.time_s, c.state, c.tier});
  }
  return Status::kOk;
}

Status Engine::Impl::Delete(TenantId tenant, StreamId stream, uint64_t step) {
  std::shared_ptr<Ckpt> on_disk;
  {
    std::lock_guard<std::mutex> l(mu_);
    StreamState* s = StreamLocked(tenant, stream);
    if (s == nullptr) return Status::kNotFound;
    auto it = s->ckpts.find(step);
    if (it == s->ckpts.end()) return Status::kNotFound;
    std::shared_ptr<Ckpt> c = it->second;
    s->ckpts.erase(it);
    c->in_index = false;
    if (c->job_active) {
      c->cancelled = true;  // the worker aborts the write and returns the quota
      worker_cv_.notify_all();
    } else if (c->tier == TierKind::kLocalDisk && c->state == CkptState::kDurable) {
      TenantLocked(tenant).stats.disk_bytes -= c->disk_reserved;
      c->disk_reserved = 0;
      on_disk = c;
    }
    MaybeReleaseLocked(tenant, c.get());
    durable_cv_.notify_all();
  }
  if (on_disk) return disk_->Remove(tenant, stream, step);
  return Status::kOk;
}

// ---------------------------------------------------------------------------
// Just-in-time saves

Status Engine::Impl::DeclareQuiesce(TenantId tenant, StreamId stream, IoSpan word,
                                    std::span<const IoSpan> slices) {
  if (word.data == nullptr || word.len != sizeof(hz_quiesce_word) ||
      reinterpret_cast<uintptr_t>(word.data) % alignof(uint64_t) != 0) {
    return Status::kInvalid;
  }
  uint64_t total = 0;
  if (slices.empty() || slices.size() > kMaxSlices ||
      !SumSpans(slices, std::numeric_limits<uint64_t>::max() / 4, &total)) {
    return Status::kInvalid;
  }
  std::lock_guard<std::mutex> l(mu_);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr) return Status::kNotFound;
  auto d = std::make_unique<QuiesceDecl>();
  d->word = word;
  d->slices.assign(slices.begin(), slices.end());
  s->quiesce = std::move(d);
  return Status::kOk;
}

std::vector<NoticeOutcome> Engine::Impl::OnNotice(TenantId tenant, Clock::time_point deadline) {
  struct Target {
    StreamId stream;
    QuiesceDecl decl;
  };
  std::vector<Target> targets;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tenants_.find(tenant);
    if (it == tenants_.end()) return {};
    for (auto& [sid, s] : it->second.streams) {
      if (s.policy.auto_save_on_notice && s.quiesce) targets.push_back({sid, *s.quiesce});
    }
  }
  std::vector<NoticeOutcome> out;
  std::vector<PendingEvent> events;
  for (const Target& tg : targets) {
    NoticeOutcome o;
    o.stream = tg.stream;
    Manifest m;
    m.tenant = tenant;
    m.stream = tg.stream;
    m.chunk_bytes = config_.chunk_bytes;
    for (const IoSpan& sp : tg.decl.slices) m.slice_sizes.push_back(sp.len);
    std::vector<uint32_t> chunks;
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t waited = 0;
    o.status = AcquireLocked(lock, tenant, m.num_chunks(), deadline, &chunks, &waited);
    lock.unlock();
    if (o.status == Status::kAgain) o.status = Status::kTimedOut;
    if (o.status == Status::kOk) {
      std::vector<CopyOp> ops = SnapshotOps(tg.decl.slices, {}, chunks);
      SeqlockCopyResult r = SeqlockCopy(
          tg.decl.word.data, [&] { copier_.Run(ops); }, deadline);
      o.attempts = r.attempts;
      o.step = r.step;
      m.step = r.step;
      if (!r.consistent) o.status = Status::kTimedOut;
      if (o.status == Status::kOk) ZeroTail(m, chunks);
    }
    lock.lock();
    StreamState* s = StreamLocked(tenant, tg.stream);
    bool admitted = false;
    if (o.status == Status::kOk && s != nullptr) {
      if (s->has_step && m.step <= s->last_step) {
        // That step (or a later one) is saved already: nothing to add.
        o.status = s->ckpts.count(m.step) != 0 ? Status::kOk : Status::kInvalid;
      } else {
        bool want_memory = false;
        uint64_t disk_reserved = 0;
        o.status = PlaceLocked(tenant, tg.stream, *s, m, &want_memory, &disk_reserved);
        if (o.status == Status::kOk) {
          s->has_step = true;
          s->last_step = m.step;
          DecideLocked(Decision::Kind::kJit, tenant, tg.stream, m.step, o.attempts);
          AdmitLocked(tenant, tg.stream, s, m, chunks, want_memory, disk_reserved);
          admitted = true;
          events.push_back({tenant, EventKind::kJitSnapshot, tg.stream, m.step});
        }
      }
    }
    if (!admitted && !chunks.empty()) {
      TenantLocked(tenant).held_chunks -= chunks.size();
      pool_->Release(chunks);
      staging_cv_.notify_all();
    }
    if (o.status == Status::kTimedOut) {
      events.push_back({tenant, EventKind::kJitMissed, tg.stream, 0});
    }
    lock.unlock();
    out.push_back(o);
  }
  Publish(events);
  return out;
}

// ---------------------------------------------------------------------------
// Waiting and observation

Status Engine::Impl::WaitDurable(TenantId tenant, StreamId stream, uint64_t step,
                                 std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr) return Status::kNotFound;
  auto it = s->ckpts.find(step);
  if (it == s->ckpts.end()) return Status::kNotFound;
  std::shared_ptr<Ckpt> c = it->second;
  bool done = durable_cv_.wait_for(
      lock, timeout, [&] { return stop_ || c->state == CkptState::kDurable || !c->in_index; });
  if (!done) return Status::kTimedOut;
  if (c->failed) return Status::kIo;
  if (c->cancelled) return Status::kNotFound;
  if (c->state == CkptState::kDurable) return Status::kOk;
  return stop_ ? Status::kShutdown : Status::kNotFound;
}

Status Engine::Impl::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool done = durable_cv_.wait_for(lock, timeout, [&] { return stop_ || jobs_pending_ == 0; });
  return done && jobs_pending_ == 0 ? Status::kOk : Status::kTimedOut;
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
    ts.tenant = id;
    ts.streams = static_cast<uint32_t>(t.streams.size());
    ts.staging_bytes = t.held_chunks * config_.chunk_bytes;
    ts.memory_tier_bytes = t.memory_chunks * config_.chunk_bytes;
    st.tenants.push_back(ts);
  }
  return st;
}

std::vector<Decision> Engine::Impl::Decisions() const {
  std::lock_guard<std::mutex> l(mu_);
  return {decisions_.begin(), decisions_.end()};
}

}  // namespace hz::checkpoint
