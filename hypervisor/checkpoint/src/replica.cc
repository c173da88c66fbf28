// The peer-host tier (peer.h): handing a checkpoint committed here to the
// peer link, and storing a replica another host sends.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "engine_impl.h"

namespace hz::checkpoint {

namespace {

// Chunks a replica may have: what this engine's own pool could produce, so
// that a request cannot make the receiver allocate without bound.
constexpr uint64_t kMaxReplicaChunkBytes = 64u << 20;

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

void Engine::Impl::StartReplica(TenantNo tenant, StreamId stream, const std::shared_ptr<Ckpt>& c,
                                const Policy& policy) {
  if (config_.peer == nullptr) {
    // A policy read back from disk on a host that has left its cluster.
    OnReplicated(tenant, stream, c, Status::NotSupported("this host is not in a cluster"));
    return;
  }
  ReplicaSource src;
  src.tenant = numbers_.Name(tenant);
  {
    std::lock_guard<std::mutex> l(mu_);
    src.manifest = c->manifest;
  }
  src.policy = policy;
  DiskTier* disk = disk_.get();
  const Manifest m = src.manifest;
  src.read_chunk = [disk, m](uint64_t i, uint8_t* dst, size_t len) {
    return disk->ReadChunk(m, i, dst, len);
  };
  config_.peer->Replicate(std::move(src), [this, tenant, stream, c](Status st) {
    OnReplicated(tenant, stream, c, std::move(st));
  });
}

void Engine::Impl::OnReplicated(TenantNo tenant, StreamId stream, const std::shared_ptr<Ckpt>& c,
                                Status st) {
  if (st.ok()) {
    Manifest m;
    {
      std::lock_guard<std::mutex> l(mu_);
      m = c->manifest;
    }
    // Before DURABLE goes out, so that what the tenant was told survives a
    // restart. Without the marker the copy is made again after one.
    if (Status mark = disk_->MarkReplicated(m); !mark.ok()) {
      spdlog::warn("event=ckpt_replica_unmarked tenant={} stream={} step={} error=\"{}\"",
                   numbers_.Name(tenant).name(), stream, m.step, mark.ToString());
    }
  }
  std::vector<PendingEvent> events;
  uint64_t step;
  {
    std::lock_guard<std::mutex> l(mu_);
    step = c->manifest.step;
    DecideLocked(st.ok() ? Decision::Kind::kReplicaDurable : Decision::Kind::kReplicaFailed, tenant,
                 stream, step, static_cast<uint64_t>(st.code()));
    // A checkpoint deleted or evicted meanwhile is not the tenant's any more.
    if (c->in_index) {
      events.push_back({numbers_.Name(tenant), st.ok() ? EventKind::kDurable : EventKind::kFailed,
                        stream, step, TierKind::kPeerHost, st.code(), 0});
    }
  }
  if (!st.ok()) {
    spdlog::warn("event=ckpt_replica_failed tenant={} stream={} step={} error=\"{}\"",
                 numbers_.Name(tenant).name(), stream, step, st.ToString());
  }
  Publish(events);
  // Waiters wake only now, so whoever saw the outcome also sees its event.
  std::lock_guard<std::mutex> l(mu_);
  c->replica = st.ok() ? ReplicaState::kDone : ReplicaState::kFailed;
  c->replica_code = st.code();
  durable_cv_.notify_all();
}

Status Engine::Impl::ReserveReplicaLocked(TenantNo tenant, const Manifest& m, uint64_t* reserved) {
  StreamState* s = StreamLocked(tenant, m.stream);
  if (s == nullptr) return Status::NotFound();
  if (s->saving) return Status::Busy("a save of the stream is in progress");
  if (Status st = CheckStepLocked(*s, m.step); !st.ok()) return st;
  TenantState& t = TenantLocked(tenant);
  const uint64_t need = m.padded_bytes();
  const uint64_t quota = DiskQuotaLocked(t);
  if (need > quota || t.stats.disk_bytes > quota - need) return Status::Limit();
  t.stats.disk_bytes += need;
  *reserved = need;
  s->saving = true;  // no save of this step while the replica is written
  s->saving_step = m.step;
  return Status::Ok();
}

Status Engine::Impl::WriteReplica(const Manifest& m, const ChunkReader& read_chunk) {
  std::unique_ptr<uint8_t, AlignedFree> buf(
      static_cast<uint8_t*>(std::aligned_alloc(kIoAlign, m.chunk_bytes)));
  if (!buf) return Status::TryAgain("no memory for a replica's chunk");
  uint64_t write_id = 0;
  if (Status st = disk_->BeginWrite(m, &write_id); !st.ok()) return st;
  Status st = Status::Ok();
  for (uint64_t i = 0; st.ok() && i < m.num_chunks(); ++i) {
    const uint64_t len = m.chunk_len(i);
    st = read_chunk(i, buf.get(), len);
    // Every chunk is verified before it counts, whatever carried it.
    if (st.ok() && Crc32c(buf.get(), len) != m.chunk_crcs[i]) {
      st = Status::Corruption("chunk " + std::to_string(i) + " failed its CRC32C");
    }
    const uint64_t padded = (len + kIoAlign - 1) / kIoAlign * kIoAlign;
    if (st.ok()) std::memset(buf.get() + len, 0, padded - len);
    if (st.ok()) st = disk_->WriteChunkNow(write_id, i, buf.get(), padded);
  }
  if (!st.ok()) {
    disk_->Abort(write_id);
    return st;
  }
  // The disk tier's own commit: data, manifest and directories flushed.
  return disk_->Commit(write_id, m);
}

void Engine::Impl::AdoptReplicaLocked(TenantNo tenant, Manifest m, uint64_t reserved,
                                      std::vector<std::shared_ptr<Ckpt>>* evicted) {
  TenantState& t = TenantLocked(tenant);
  StreamState& s = t.streams[m.stream];
  const StreamId stream = m.stream;
  const uint64_t step = m.step;
  s.ckpts[step] = CommittedOnDisk(std::move(m), reserved);
  t.stats.durable++;
  DecideLocked(Decision::Kind::kReplicaStored, tenant, stream, step, reserved);
  RetainLocked(tenant, stream, &s, evicted);
}

uint32_t ReplicaDigest(const Manifest& m) {
  const uint32_t crcs = m.chunk_crcs.empty()
                            ? 0
                            : Crc32c(reinterpret_cast<const uint8_t*>(m.chunk_crcs.data()),
                                     m.chunk_crcs.size() * sizeof(uint32_t));
  const uint64_t payload = m.payload_bytes();
  uint8_t both[sizeof payload + sizeof crcs];
  std::memcpy(both, &payload, sizeof payload);
  std::memcpy(both + sizeof payload, &crcs, sizeof crcs);
  return Crc32c(both, sizeof both);
}

Status Engine::Impl::DeleteAndForget(const TenantId& name, TenantNo tenant, StreamId stream,
                                     uint64_t step) {
  std::optional<Manifest> replicated;
  Status st = Delete(tenant, stream, step, &replicated);
  if (st.ok() && replicated && config_.peer != nullptr) config_.peer->Forget(name, *replicated);
  return st;
}

// A checkpoint here is the copy of a source host's checkpoint when it was
// stored as that host's copy and holds the same bytes: the tenant's own
// checkpoints here are never taken for one, even with equal bytes.
bool Engine::Impl::IsCopyLocked(const Ckpt& c, const std::string& source, uint32_t digest) const {
  return c.in_index && c.sealed && c.manifest.replica_of == source &&
         ReplicaDigest(c.manifest) == digest;
}

Status Engine::Impl::DeleteReplica(TenantNo tenant, StreamId stream, uint64_t step, uint32_t digest,
                                   const std::string& source) {
  if (step == 0 || step == kLatestStep) return Status::InvalidArgument();
  {
    std::lock_guard<std::mutex> l(mu_);
    StreamState* s = StreamLocked(tenant, stream);
    if (s == nullptr) return Status::NotFound();
    auto it = s->ckpts.find(step);
    if (it == s->ckpts.end()) return Status::NotFound();
    if (!IsCopyLocked(*it->second, source, digest)) {
      return Status::Mismatch("another checkpoint than the deleted one's copy");
    }
  }
  return Delete(tenant, stream, step);
}

Status Engine::Impl::StoreReplica(TenantNo tenant, const ReplicaIn& in) {
  Manifest m = in.manifest;
  m.tenant = tenant;  // this host's number for the tenant, never the sender's
  m.replica_of = in.source_host;
  if (m.stream == 0 || m.step == 0 || m.step == kLatestStep || m.chunk_bytes == 0 ||
      m.chunk_bytes % kIoAlign != 0 || m.chunk_bytes > kMaxReplicaChunkBytes ||
      m.chunk_crcs.size() != m.num_chunks() || !in.read_chunk || m.replica_of.empty() ||
      m.replica_of.size() > kMaxHostNameBytes) {
    return Status::InvalidArgument("malformed replica manifest");
  }
  bool exists;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return Status::Shutdown();
    const StreamState* s = StreamLocked(tenant, m.stream);
    exists = s != nullptr;
    if (s != nullptr) {
      auto held = s->ckpts.find(m.step);
      if (held != s->ckpts.end() && IsCopyLocked(*held->second, m.replica_of, ReplicaDigest(m))) {
        return Status::Ok();  // this copy is here already
      }
    }
  }
  // A tenant's stream ids are tenant-wide: the replica joins the stream of
  // the same number here, created with the source's policy if it is new.
  if (!exists) {
    if (Status st = SetPolicy(tenant, m.stream, in.policy, /*check_peer=*/false); !st.ok()) {
      return st;
    }
  }
  uint64_t reserved = 0;
  Status st;
  {
    std::lock_guard<std::mutex> l(mu_);
    st = ReserveReplicaLocked(tenant, m, &reserved);
    if (!st.ok())
      DecideLocked(Decision::Kind::kReplicaRefused, tenant, m.stream, m.step,
                   static_cast<uint64_t>(st.code()));
  }
  if (!st.ok()) return st;
  st = WriteReplica(m, in.read_chunk);
  std::vector<std::shared_ptr<Ckpt>> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    StreamState* s = StreamLocked(tenant, m.stream);
    s->saving = false;
    if (st.ok()) {
      AdoptReplicaLocked(tenant, std::move(m), reserved, &evicted);
    } else {
      TenantLocked(tenant).stats.disk_bytes -= reserved;
      DecideLocked(Decision::Kind::kReplicaRefused, tenant, in.manifest.stream, in.manifest.step,
                   static_cast<uint64_t>(st.code()));
    }
    durable_cv_.notify_all();
  }
  RemoveFromDisk(evicted);
  return st;
}

// A copy that was on its way when the service stopped (kPending then, kNone
// after the restart, without the marker of a durable one) is sent again.
// Copies held for other hosts (replica_of) are never sent on.
void Engine::Impl::ResumeReplicas() {
  struct Resume {
    TenantNo tenant;
    StreamId stream;
    uint64_t step;
    std::shared_ptr<Ckpt> ckpt;
    Policy policy;
  };
  std::vector<Resume> resume;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    for (auto& [tid, t] : tenants_) {
      if (t.forgotten) continue;
      for (auto& [sid, s] : t.streams) {
        if (s.policy.tier != TierKind::kPeerHost) continue;
        for (auto& [step, c] : s.ckpts) {
          if (!c->in_index || c->state != CkptState::kDurable ||
              c->replica != ReplicaState::kNone || !c->manifest.replica_of.empty()) {
            continue;
          }
          c->replica = ReplicaState::kPending;
          resume.push_back({tid, sid, step, c, s.policy});
        }
      }
    }
  }
  for (const Resume& r : resume) {
    spdlog::info("event=ckpt_replica_resumed tenant={} stream={} step={}",
                 numbers_.Name(r.tenant).name(), r.stream, r.step);
    StartReplica(r.tenant, r.stream, r.ckpt, r.policy);
  }
}

}  // namespace hz::checkpoint
