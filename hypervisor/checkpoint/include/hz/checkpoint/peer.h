// The peer-host tier (HZ_TIER_PEER_HOST, SPEC.md §7.5): a second copy of a
// checkpoint on another host of the cluster.
//
// The engine knows nothing of the cluster. A checkpoint whose policy names
// the peer-host tier is committed on the local disk as any other; once that
// commit is durable the engine hands it to a PeerLink (the service's, over
// the cluster store and the inter-host data path), which copies it to
// another host, where that host's engine stores it with StoreReplica. Only
// when the link reports the replica durable there does the engine publish
// DURABLE at tier PEER_HOST; a failure publishes FAILED with its status.
//
// The copy is made from the committed local files, not from staging memory,
// so a slow or distant peer never holds the staging pool: the snapshot's
// chunks are released at the local commit as for the local-disk tier.
#ifndef HZ_CHECKPOINT_PEER_H_
#define HZ_CHECKPOINT_PEER_H_

#include <cstdint>
#include <functional>

#include "hz/checkpoint/manifest.h"
#include "hz/checkpoint/types.h"

namespace hz::checkpoint {

// Reads chunk `index` of a checkpoint (manifest.chunk_len(index) bytes) into
// dst. The receiver verifies its CRC32C against the manifest.
using ChunkReader = std::function<Status(uint64_t index, uint8_t* dst, size_t len)>;

// One committed checkpoint to copy to another host.
struct ReplicaSource {
  TenantId tenant;
  Manifest manifest;  // as committed here (its tenant number is this host's own)
  Policy policy;      // the stream's, for a stream the peer does not hold yet
  ChunkReader read_chunk;
};

class PeerLink {
 public:
  virtual ~PeerLink() = default;

  // Whether a policy with the peer-host tier can be served for the tenant
  // now: kNotSupported when this host is not in a cluster, kTryAgain when no
  // other host is live.
  virtual Status Available(const TenantId& tenant) = 0;

  // Copies the checkpoint to another host. Calls done exactly once, on any
  // thread (inside this call too, when the link is stopping; the engine
  // holds no lock then): kOk once the replica is durable on the other host,
  // else why not (the peer's refusal, kTimedOut, kIoError, ...). May read
  // source.read_chunk until done is called.
  virtual void Replicate(ReplicaSource source, std::function<void(Status)> done) = 0;

  // The tenant deleted this checkpoint of a peer-host stream here: its
  // replicas go too (Engine::DeleteReplica on the other hosts), in the
  // background. A host that is down then keeps its copy.
  virtual void Forget(const TenantId& /*tenant*/, const Manifest& /*manifest*/) {}
};

// What names one checkpoint's bytes across hosts: the CRC32C of its chunk
// CRCs and size. A replica is deleted only when its digest matches, so a
// delete never takes another checkpoint that happens to have the same
// stream and step.
uint32_t ReplicaDigest(const Manifest& manifest);

// A replica arriving from another host (Engine::StoreReplica).
struct ReplicaIn {
  TenantId tenant;          // decided by the receiving host from the request, never by the bytes
  Manifest manifest;        // the source's; its tenant number is ignored
  Policy policy;            // applied when the tenant has no such stream here yet
  std::string source_host;  // kept in the copy's manifest (Manifest::replica_of)
  ChunkReader read_chunk;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_PEER_H_
