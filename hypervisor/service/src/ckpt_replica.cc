// The peer-host tier's placement and sending side (ckpt_replica.h).
#include "ckpt_replica.h"

#include <cinttypes>
#include <cstdlib>
#include <functional>
#include <memory>

#include "ckpt_replica_wire.h"
#include "hz/cluster/inter_host.h"
#include "hz/cluster/store_queue.h"
#include "hz/common/thread_priority.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

// Whether the host's record says the tenant has devices there.
bool TenantOn(const cluster::HostInfo& h, const std::string& tenant) {
  auto tenants = h.attributes.find("tenants");
  return tenants != h.attributes.end() && tenants->is_object() && tenants->contains(tenant);
}

}  // namespace

std::optional<std::string> ChooseReplicaHost(const std::vector<cluster::HostInfo>& hosts,
                                             const std::string& tenant, uint32_t stream) {
  std::vector<std::string> with_tenant, others;
  for (const cluster::HostInfo& h : hosts) {
    if (h.self) continue;  // never both copies on one host
    (TenantOn(h, tenant) ? with_tenant : others).push_back(h.name);
  }
  const std::vector<std::string>& pool = with_tenant.empty() ? others : with_tenant;
  if (pool.empty()) return std::nullopt;
  const size_t h = std::hash<std::string>()(tenant + "/" + std::to_string(stream));
  return pool[h % pool.size()];  // the view is in name order, so every round agrees
}

PeerReplicaOptions PeerReplicaOptionsOf(const ServiceConfig& c) {
  PeerReplicaOptions o;
  o.store = *cluster::RedisAddress::Parse(c.cluster.store);  // ValidateConfig checked it
  o.key_prefix = c.cluster.key_prefix;
  o.host_name = c.cluster.HostName();
  o.data_address = c.cluster.data_address;
  o.store_timeout = c.cluster.StoreTimeout();
  return o;
}

PeerReplicas::PeerReplicas(PeerReplicaOptions options) : options_(std::move(options)) {}

PeerReplicas::~PeerReplicas() {
  Stop();
}

void PeerReplicas::Start(checkpoint::Engine* engine) {
  engine_ = engine;
  sender_ = NamedThread("hz-replica-send", [this] { SendLoop(); });
  receiver_ = NamedThread("hz-replica-recv", [this] { ReceiveLoop(); });
}

void PeerReplicas::Stop() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    left.swap(jobs_);
  }
  wake_.notify_all();
  for (Job& j : left) j.done(Status::Shutdown("the service is stopping"));
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
}

void PeerReplicas::SetHosts(std::vector<cluster::HostInfo> hosts) {
  std::lock_guard<std::mutex> l(mu_);
  hosts_ = std::move(hosts);
}

Status PeerReplicas::Available(const TenantId& tenant) {
  std::lock_guard<std::mutex> l(mu_);
  if (!ChooseReplicaHost(hosts_, tenant.name(), 0)) {
    return Status::TryAgain("no other host of the cluster is live");
  }
  return Status::Ok();
}

void PeerReplicas::Replicate(checkpoint::ReplicaSource source, std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stop_) {
      jobs_.push_back({std::move(source), std::move(done)});
      wake_.notify_all();
      return;
    }
  }
  done(Status::Shutdown("the service is stopping"));
}

void PeerReplicas::Forget(const TenantId& tenant, const checkpoint::Manifest& m) {
  const std::string text = EncodeForget(
      {options_.host_name, tenant.name(), m.stream, m.step, checkpoint::ReplicaDigest(m)});
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return;
  forgets_.push_back(text);
  wake_.notify_all();
}

void PeerReplicas::SendForgets(cluster::RedisConnection& redis) {
  std::deque<std::string> forgets;
  std::vector<std::string> others;
  {
    std::lock_guard<std::mutex> l(mu_);
    forgets.swap(forgets_);
    for (const cluster::HostInfo& h : hosts_) {
      if (!h.self) others.push_back(h.name);
    }
  }
  // Whichever host holds the copy (placement follows membership) deletes
  // it; the others find nothing to delete.
  for (const std::string& text : forgets) {
    spdlog::info("event=ckpt_replica_forget hosts={} forget={}", others.size(), text);
    for (const std::string& host : others) {
      Status st = cluster::PushWithExpiry(redis, QueueKey(host), text, 2 * options_.timeout);
      if (!st.ok())
        spdlog::warn("event=ckpt_replica_forget_unsent to={} error=\"{}\"", host, st.ToString());
    }
  }
}

std::string PeerReplicas::QueueKey(const std::string& host) const {
  return options_.key_prefix + "replica/queue/" + host;
}

void PeerReplicas::SendLoop() {
  cluster::RedisConnection redis(options_.store, options_.store_timeout);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      wake_.wait(l, [this] { return stop_ || !jobs_.empty() || !forgets_.empty(); });
      if (stop_) return;  // Stop answers what is queued
      if (jobs_.empty()) {
        l.unlock();
        SendForgets(redis);
        continue;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Status st = Send(job.source, redis);
    (st.ok() ? sent_ : failed_).fetch_add(1);
    job.done(std::move(st));
  }
}

Status PeerReplicas::Send(const checkpoint::ReplicaSource& src, cluster::RedisConnection& redis) {
  const checkpoint::Manifest& m = src.manifest;
  std::optional<std::string> host;
  {
    std::lock_guard<std::mutex> l(mu_);
    host = ChooseReplicaHost(hosts_, src.tenant.name(), m.stream);
  }
  if (!host) return Status::TryAgain("no other host of the cluster is live");
  const std::string id = cluster::RandomKeyId();
  ReplicaRequest req{
      id, options_.host_name, src.tenant.name(),
      m,  src.policy,         cluster::UnixMs() + static_cast<uint64_t>(options_.timeout.count())};
  const std::string text = EncodeRequest(req);
  if (Status st = cluster::PushWithExpiry(redis, QueueKey(*host), text, 2 * options_.timeout);
      !st.ok()) {
    return st;
  }
  spdlog::info("event=ckpt_replica_send tenant={} stream={} step={} to={} bytes={} id={}",
               src.tenant.name(), m.stream, m.step, *host, m.payload_bytes(), id);
  Status st = Transfer(src, options_.key_prefix + "replica/" + id + "/");
  if (!st.ok()) return Status(st.code(), "replica host " + *host + ": " + st.message());
  return st;
}

Status PeerReplicas::Transfer(const checkpoint::ReplicaSource& src, const std::string& key) {
  cluster::GlooGroupOptions g{options_.store, key, options_.data_address, 0, 2, options_.timeout};
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> group = cluster::ConnectGlooGroup(g);
  if (!group.ok()) return group.status();
  cluster::InterHostGroup& peer = **group;
  const checkpoint::Manifest& m = src.manifest;
  Status st = RecvStatus(peer, 1, kAcceptTag, options_.timeout);
  if (!st.ok()) return st;  // refused before any byte moved
  std::unique_ptr<uint8_t[]> buf(new uint8_t[m.chunk_bytes]);
  Status read = Status::Ok();
  for (uint64_t i = 0; i < m.num_chunks(); ++i) {
    const size_t len = static_cast<size_t>(m.chunk_len(i));
    // A chunk that cannot be read still goes (the peer's CRC check refuses
    // it), so that both sides reach the final answer in step.
    if (Status r = src.read_chunk(i, buf.get(), len); !r.ok() && read.ok()) read = r;
    st = peer.Send(1, ChunkTag(i), buf.get(), len, options_.timeout);
    if (!st.ok()) return st;
  }
  st = RecvStatus(peer, 1, FinalTag(m), options_.timeout);
  return read.ok() ? st : read;
}

}  // namespace hz::service
