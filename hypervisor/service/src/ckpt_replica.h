// The peer-host checkpoint tier across the cluster (SPEC.md §7.5): the
// checkpoint engine's PeerLink (hz/checkpoint/peer.h) on the cluster's own
// engines. Nothing here is a network protocol of its own:
//  - the request goes through the cluster store (Redis): the source pushes
//    {id, source host, tenant, manifest, policy, deadline} onto the list
//    <prefix>replica/queue/<replica host>, which that host's receiver thread
//    pops (BLPOP);
//  - the bytes go over the inter-host data path: both hosts form a
//    two-member Gloo group (ConnectGlooGroup, rendezvous under
//    <prefix>replica/<id>/) and move tagged point-to-point messages:
//      tag 0             replica -> source  StatusCode: accepted (kOk) or why not
//      tag 1 + i         source -> replica  chunk i (manifest.chunk_len(i) bytes)
//      tag 1 + chunks    replica -> source  StatusCode: durable there (kOk) or why not
//    The replica host verifies each chunk's CRC32C against the manifest and
//    commits through its engine (Engine::StoreReplica: the disk tier's commit,
//    flushed) before it answers kOk.
//
// Placement (ChooseReplicaHost): never this host; among the other live
// members, one where the tenant has devices (its "tenants" membership
// attribute, from the scheduler), so that a restore there is local; else any
// live member. Among equals, the choice is a hash of (tenant, stream), so a
// tenant's streams spread over the hosts and one stream keeps its host while
// membership does not change.
//
// One sender thread copies one checkpoint at a time, in the order the engine
// commits them; one receiver thread stores one replica at a time. Both are
// bounded by `timeout` per step (forming the group, each chunk, each answer).
#ifndef HZ_SERVICE_CKPT_REPLICA_H_
#define HZ_SERVICE_CKPT_REPLICA_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hz/checkpoint/engine.h"
#include "hz/checkpoint/peer.h"
#include "hz/cluster/membership.h"
#include "hz/cluster/redis_connection.h"
#include "hz/service/config.h"

namespace hz::service {

struct PeerReplicaOptions {
  cluster::RedisAddress store;
  std::string key_prefix;
  std::string host_name;
  std::string data_address;
  std::chrono::milliseconds store_timeout{1000};
  std::chrono::milliseconds timeout{30000};
};

// The options of the service's [cluster] section.
PeerReplicaOptions PeerReplicaOptionsOf(const ServiceConfig& config);

// The host to hold a replica of (tenant, stream), or none when no other host
// is live. `hosts` is the membership view (this host marked self).
std::optional<std::string> ChooseReplicaHost(const std::vector<cluster::HostInfo>& hosts,
                                             const std::string& tenant, uint32_t stream);

class PeerReplicas : public checkpoint::PeerLink {
 public:
  explicit PeerReplicas(PeerReplicaOptions options);
  ~PeerReplicas() override;  // Stop()
  PeerReplicas(const PeerReplicas&) = delete;
  PeerReplicas& operator=(const PeerReplicas&) = delete;

  // Starts the sender and the receiver; replicas received are stored in
  // `engine`, which must outlive Stop().
  void Start(checkpoint::Engine* engine);
  // Ends both threads once their current transfer ends (each step is
  // bounded by the timeout); copies still queued are answered kShutdown.
  void Stop();
  // The live hosts, as membership last read them (membership thread).
  void SetHosts(std::vector<cluster::HostInfo> hosts);

  Status Available(const TenantId& tenant) override;
  void Replicate(checkpoint::ReplicaSource source, std::function<void(Status)> done) override;
  // Sends the forget to every other live host's queue (the sender thread).
  void Forget(const TenantId& tenant, const checkpoint::Manifest& manifest) override;

  uint64_t sent() const { return sent_.load(); }
  uint64_t received() const { return received_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  struct Job {
    checkpoint::ReplicaSource source;
    std::function<void(Status)> done;
  };

  void SendLoop();
  // Each forget queued, to every other live host.
  void SendForgets(cluster::RedisConnection& redis);
  Status Send(const checkpoint::ReplicaSource& source, cluster::RedisConnection& redis);
  // Moves the chunks over a group formed under `key` (this host rank 0).
  Status Transfer(const checkpoint::ReplicaSource& source, const std::string& key);
  void ReceiveLoop();
  void Receive(const std::string& request);
  std::string QueueKey(const std::string& host) const;

  const PeerReplicaOptions options_;
  checkpoint::Engine* engine_ = nullptr;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::deque<Job> jobs_;
  std::deque<std::string> forgets_;  // encoded
  std::vector<cluster::HostInfo> hosts_;
  std::thread sender_;
  std::thread receiver_;

  std::atomic<uint64_t> sent_{0};      // replicas the other hosts confirmed durable
  std::atomic<uint64_t> received_{0};  // replicas stored here
  std::atomic<uint64_t> failed_{0};    // copies that failed, either way
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CKPT_REPLICA_H_
