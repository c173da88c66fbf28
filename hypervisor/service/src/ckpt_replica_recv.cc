// The peer-host tier's receiving side (ckpt_replica.h): requests popped from
// this host's queue in the cluster store, chunks taken over the Gloo group
// and stored through the checkpoint engine, which verifies and commits them.
#include <memory>

#include "ckpt_replica.h"
#include "ckpt_replica_wire.h"
#include "hz/cluster/inter_host.h"
#include "hz/cluster/store_queue.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace {

// How long one pop waits for a request: also how soon Stop is noticed.
constexpr std::chrono::seconds kPopWait{1};

}  // namespace

void PeerReplicas::ReceiveLoop() {
  // The connection's timeout leaves the blocking pop its second.
  cluster::RedisConnection redis(options_.store, options_.store_timeout + 2 * kPopWait);
  const std::string queue = QueueKey(options_.host_name);
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    StatusOr<std::optional<std::string>> r = cluster::BlockingPop(redis, queue, kPopWait);
    if (!r.ok()) {
      // The store is away: membership says so; look again in a while.
      std::unique_lock<std::mutex> l(mu_);
      wake_.wait_for(l, kPopWait, [this] { return stop_; });
      continue;
    }
    if (*r) Receive(**r);
  }
}

void PeerReplicas::Receive(const std::string& text) {
  ReplicaForget forget;
  if (DecodeForget(text, &forget).ok()) {
    Status st = engine_->DeleteReplica(TenantId(forget.tenant), forget.stream, forget.step,
                                       forget.digest, forget.source);
    if (st.ok()) {
      spdlog::info("event=ckpt_replica_forgotten tenant={} stream={} step={} from={}",
                   forget.tenant, forget.stream, forget.step, forget.source);
    }
    return;  // kNotFound: this host held no copy
  }
  ReplicaRequest req;
  if (Status st = DecodeRequest(text, &req); !st.ok()) {
    failed_.fetch_add(1);
    spdlog::warn("event=ckpt_replica_malformed error=\"{}\"", st.ToString());
    return;
  }
  if (req.deadline_unix_ms < cluster::UnixMs()) {
    spdlog::warn("event=ckpt_replica_stale id={} from={}", req.id, req.source);
    return;  // its sender has given up
  }
  const checkpoint::Manifest& m = req.manifest;
  cluster::GlooGroupOptions g{
      options_.store,  options_.key_prefix + "replica/" + req.id + "/", options_.data_address, 1, 2,
      options_.timeout};
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> group = cluster::ConnectGlooGroup(g);
  if (!group.ok()) {
    failed_.fetch_add(1);
    spdlog::warn("event=ckpt_replica_failed id={} from={} error=\"{}\"", req.id, req.source,
                 group.status().ToString());
    return;
  }
  cluster::InterHostGroup& src = **group;
  bool accepted = false;
  uint64_t next = 0;  // the first chunk the engine did not take
  Status link = Status::Ok();
  checkpoint::ReplicaIn in{TenantId(req.tenant), m, req.policy, req.source, nullptr};
  // The source sends once told the replica is accepted: at the first chunk
  // the engine asks for, after its checks and its quota reservation.
  in.read_chunk = [&](uint64_t i, uint8_t* dst, size_t len) {
    if (!accepted) {
      link = SendStatus(src, 0, kAcceptTag, Status::Ok(), options_.timeout);
      if (!link.ok()) return link;
      accepted = true;
    }
    next = i + 1;
    link = src.Recv(0, ChunkTag(i), dst, len, options_.timeout);
    return link;
  };
  Status st = engine_->StoreReplica(in);
  if (link.ok() && !accepted) {
    link = SendStatus(src, 0, kAcceptTag, st, options_.timeout);
    accepted = st.ok();  // a checkpoint without chunks
  }
  if (link.ok() && accepted) {
    // Chunks after one that failed are taken and dropped, so that both
    // sides reach the final answer.
    std::unique_ptr<uint8_t[]> sink(next < m.num_chunks() ? new uint8_t[m.chunk_bytes] : nullptr);
    for (uint64_t i = next; link.ok() && i < m.num_chunks(); ++i) {
      link = src.Recv(0, ChunkTag(i), sink.get(), static_cast<size_t>(m.chunk_len(i)),
                      options_.timeout);
    }
    if (link.ok()) link = SendStatus(src, 0, FinalTag(m), st, options_.timeout);
  }
  if (!st.ok() || !link.ok()) failed_.fetch_add(1);
  if (st.ok() && link.ok()) received_.fetch_add(1);
  spdlog::info("event=ckpt_replica_received tenant={} stream={} step={} from={} status=\"{}\"",
               req.tenant, m.stream, m.step, req.source, (link.ok() ? st : link).ToString());
}

}  // namespace hz::service
