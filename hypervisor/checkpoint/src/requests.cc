// Save, restore, list and delete (SPEC.md §7.5.2-7.5.5).
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine_impl.h"

namespace hz::checkpoint {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxMetaBytes = 1ull << 30;

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

// True when two non-empty destination spans share a byte.
bool Overlap(std::span<const IoSpan> spans) {
  std::vector<std::pair<uintptr_t, size_t>> v;
  for (const IoSpan& s : spans) {
    if (s.len != 0) v.push_back({reinterpret_cast<uintptr_t>(s.data), s.len});
  }
  std::sort(v.begin(), v.end());
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i - 1].first + v[i - 1].second > v[i].first) return true;
  }
  return false;
}

}  // namespace

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

// ---------------------------------------------------------------------------
// Save

Status Engine::Impl::Save(TenantNo tenant, const SaveRequest& req, SaveResult* result) {
  const auto start = Clock::now();
  if (req.slices.empty() || req.slices.size() > kMaxSlices || req.step == 0 ||
      req.step == kLatestStep) {
    return Status::InvalidArgument();
  }
  if (req.meta.size() > kMaxMetaBytes || (!req.meta.empty() && req.meta.data() == nullptr)) {
    return Status::InvalidArgument();
  }
  uint64_t slice_bytes = 0;
  if (!SumSpans(req.slices, std::numeric_limits<uint64_t>::max() / 4, &slice_bytes)) {
    return Status::InvalidArgument();
  }
  Manifest m;
  m.tenant = tenant;
  m.stream = req.stream;
  m.step = req.step;
  m.chunk_bytes = config_.chunk_bytes;
  m.meta_len = req.meta.size();
  m.slice_sizes.reserve(req.slices.size());
  for (const IoSpan& s : req.slices) m.slice_sizes.push_back(s.len);

  if (req.cancelled && req.cancelled()) return Status::Aborted();
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return Status::Shutdown();
  // Stream nodes are never erased, so the pointer outlives the waits below.
  StreamState* s = StreamLocked(tenant, req.stream);
  if (s == nullptr) return Status::NotFound();
  if (s->saving) return Status::Busy();
  Status st = CheckStepLocked(*s, req.step);
  if (!st.ok()) return st;
  bool want_memory = false;
  uint64_t disk_reserved = 0;
  st = PlaceLocked(tenant, req.stream, *s, m, &want_memory, &disk_reserved);
  if (!st.ok()) return st;
  s->saving = true;
  s->saving_step = req.step;
  auto deadline = start + StallBudget(s->policy);
  std::vector<uint32_t> chunks;
  uint64_t waited_us = 0;
  st = AcquireLocked(lock, tenant, m.num_chunks(), deadline, &req.cancelled, &chunks, &waited_us);
  if (!st.ok()) {
    s->saving = false;
    TenantLocked(tenant).stats.disk_bytes -= disk_reserved;
    if (st.code() == StatusCode::kTryAgain) {
      TenantLocked(tenant).stats.saves_again++;
      DecideLocked(Decision::Kind::kRejectAgain, tenant, req.stream, req.step, m.payload_bytes());
    }
    return st;
  }
  if (waited_us > 0) {
    DecideLocked(Decision::Kind::kBackpressure, tenant, req.stream, req.step, waited_us);
  }
  lock.unlock();

  // The stall proper: copy into the staging pool (in parallel for large states).
  std::vector<CopyOp> ops = SnapshotOps(req.slices, req.meta, chunks);
  uint64_t total = 0;
  for (const CopyOp& op : ops) total += op.len;
  bool copied = true;
  if (total >= config_.parallel_copy_min_bytes || req.cancelled) {
    copied = copier_.Run(ops, req.cancelled);
  } else {
    for (const CopyOp& op : ops) std::memcpy(op.dst, op.src, op.len);
  }
  ZeroTail(m, chunks);

  std::vector<std::shared_ptr<Ckpt>> evicted;
  lock.lock();
  s->saving = false;
  if (!copied) {
    // Cancelled mid-copy: no checkpoint; give back the chunks and the quota.
    ReleaseChunksLocked(tenant, chunks);
    TenantLocked(tenant).stats.disk_bytes -= disk_reserved;
    return Status::Aborted();
  }
  auto c = AdmitLocked(tenant, req.stream, s, std::move(m), std::move(chunks), want_memory,
                       disk_reserved, &evicted);
  result->state = c->state;
  lock.unlock();
  RemoveFromDisk(evicted);
  result->step = req.step;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  result->stall_us = static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX));
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Restore

Status Engine::Impl::Restore(TenantNo tenant, const RestoreRequest& req, RestoreResult* result) {
  if (req.slices.size() > kMaxSlices || Overlap(req.slices)) return Status::InvalidArgument();
  std::unique_lock<std::mutex> lock(mu_);
  StreamState* s = StreamLocked(tenant, req.stream);
  if (s == nullptr || s->ckpts.empty()) return Status::NotFound();
  std::shared_ptr<Ckpt> c;
  if (req.step == kLatestStep) {
    c = s->ckpts.rbegin()->second;
  } else {
    auto it = s->ckpts.find(req.step);
    if (it == s->ckpts.end()) return Status::NotFound();
    c = it->second;
  }
  const Manifest m = c->manifest;
  // The destination must have the saved layout exactly (or be empty: a probe).
  const bool probe = req.slices.empty();
  if (!probe && req.slices.size() != m.slice_sizes.size()) return Status::InvalidArgument();
  for (size_t i = 0; !probe && i < req.slices.size(); ++i) {
    if (req.slices[i].len != m.slice_sizes[i]) return Status::InvalidArgument();
    if (req.slices[i].len != 0 && req.slices[i].data == nullptr) return Status::InvalidArgument();
  }
  const uint64_t cb = m.chunk_bytes;
  const uint64_t nchunks = m.num_chunks();
  std::vector<const uint8_t*> chunk_ptr(nchunks);
  bool from_memory = !c->chunks.empty();
  bool verify = !from_memory || c->sealed;  // unsealed memory: the bytes never left RAM
  TierKind tier = from_memory ? TierKind::kHostMemory : c->tier;
  // Pinned: Delete answers kBusy, and neither retention nor the worker frees
  // the chunks until unpinned.
  c->pins++;
  for (uint64_t i = 0; from_memory && i < nchunks; ++i) chunk_ptr[i] = pool_->chunk(c->chunks[i]);
  lock.unlock();

  auto cancelled = [&req] { return req.cancelled && req.cancelled(); };
  Status st = cancelled() ? Status::Aborted() : Status::Ok();
  std::unique_ptr<ReadBuffer> buf;
  if (!from_memory) {
    buf = std::make_unique<ReadBuffer>(m.padded_bytes());
    if (!buf->ok()) st = Status::TryAgain();
    if (st.ok()) st = disk_->Read(m, buf->data(), m.padded_bytes(), req.cancelled);
    for (uint64_t i = 0; st.ok() && i < nchunks; ++i) chunk_ptr[i] = buf->data() + i * cb;
  }
  // Verify every chunk (slices and metadata) before the first byte goes out.
  for (uint64_t i = 0; st.ok() && verify && i < nchunks; ++i) {
    if (i % 16 == 15 && cancelled()) st = Status::Aborted();
    if (st.ok() && Crc32c(chunk_ptr[i], m.chunk_len(i)) != m.chunk_crcs[i]) {
      st = Status::Corruption();
    }
  }
  if (st.ok() && cancelled()) st = Status::Aborted();
  if (st.ok()) {
    std::vector<CopyOp> ops;
    uint64_t pos = 0;
    auto add = [&](uint8_t* dst, uint64_t len) {
      while (len > 0) {
        uint64_t ci = pos / cb, off = pos % cb;
        uint64_t n = std::min(len, cb - off);
        if (dst != nullptr) ops.push_back({dst, chunk_ptr[ci] + off, static_cast<size_t>(n)});
        if (dst != nullptr) dst += n;
        len -= n;
        pos += n;
      }
    };
    if (probe) {
      pos = m.slice_bytes();
    } else {
      for (const IoSpan& sp : req.slices) add(sp.data, sp.len);
    }
    result->meta.assign(m.meta_len, 0);
    add(result->meta.data(), m.meta_len);
    if (!copier_.Run(ops, req.cancelled)) st = Status::Aborted();
  }
  if (st.ok()) {
    result->step = m.step;
    result->bytes = m.slice_bytes();
    result->tier = tier;
  }

  lock.lock();
  c->pins--;
  MaybeReleaseLocked(tenant, c.get());
  TenantState& t = TenantLocked(tenant);
  if (st.ok()) t.stats.restores++;
  if (st.code() == StatusCode::kCorruption) t.stats.corrupt_restores++;
  return st;
}

// ---------------------------------------------------------------------------
// List and delete

Status Engine::Impl::List(TenantNo tenant, StreamId stream, uint64_t start_after,
                          uint32_t max_entries, std::vector<ListEntry>* entries, bool* more) {
  std::lock_guard<std::mutex> l(mu_);
  StreamState* s = StreamLocked(tenant, stream);
  if (s == nullptr) return Status::NotFound();
  entries->clear();
  *more = false;
  for (auto it = s->ckpts.upper_bound(start_after); it != s->ckpts.end(); ++it) {
    if (entries->size() == max_entries) {
      *more = true;
      break;
    }
    const Ckpt& c = *it->second;
    // With the peer-host tier, DURABLE waits for the replica; a failed one
    // leaves the checkpoint durable where it is held, on the local disk.
    CkptState state = c.replica == ReplicaState::kPending ? CkptState::kStaged : c.state;
    TierKind tier = c.replica == ReplicaState::kDone ? TierKind::kPeerHost : c.tier;
    entries->push_back(
        ListEntry{it->first, c.manifest.slice_bytes(), c.manifest.time_s, state, tier});
  }
  return Status::Ok();
}

Status Engine::Impl::Delete(TenantNo tenant, StreamId stream, uint64_t step,
                            std::optional<Manifest>* replicated) {
  if (step == 0) return Status::InvalidArgument();
  std::shared_ptr<Ckpt> on_disk;
  {
    std::lock_guard<std::mutex> l(mu_);
    StreamState* s = StreamLocked(tenant, stream);
    if (s == nullptr) return Status::NotFound();
    if (s->saving && (step == kLatestStep || step == s->saving_step)) return Status::Busy();
    auto it = step == kLatestStep ? (s->ckpts.empty() ? s->ckpts.end() : std::prev(s->ckpts.end()))
                                  : s->ckpts.find(step);
    if (it == s->ckpts.end()) return Status::NotFound();
    std::shared_ptr<Ckpt> c = it->second;
    if (c->pins > 0) return Status::Busy();
    step = it->first;
    if (replicated && s->policy.tier == TierKind::kPeerHost) *replicated = c->manifest;
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
  return Status::Ok();
}

Status Engine::Impl::ForgetTenant(const TenantId& tenant, TenantNo number) {
  for (StreamId stream : disk_->Streams(number)) {
    for (;;) {
      Status s = Delete(number, stream, kLatestStep);
      if (s.IsNotFound()) break;
      if (!s.ok()) return Status(s.code(), "stream " + std::to_string(stream) + ": " + s.message());
    }
  }
  if (Status s = numbers_.Forget(tenant); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> l(mu_);
    TenantLocked(number).forgotten = true;  // no longer takes a share from others
  }
  // Policies and empty stream directories; the number is not used again.
  return disk_->RemoveTenant(number);
}

}  // namespace hz::checkpoint
