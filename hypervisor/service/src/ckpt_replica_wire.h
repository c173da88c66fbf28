// What the two hosts of a replica exchange (ckpt_replica.h): the request in
// the cluster store, and the tags and answers on the Gloo group. A request
// is input from the store like any other: DecodeRequest checks every field.
#ifndef HZ_SERVICE_CKPT_REPLICA_WIRE_H_
#define HZ_SERVICE_CKPT_REPLICA_WIRE_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "hz/checkpoint/manifest.h"
#include "hz/checkpoint/types.h"
#include "hz/cluster/inter_host.h"
#include "hz/common/status.h"

namespace hz::service {

struct ReplicaRequest {
  std::string id;      // names the Gloo group: <prefix>replica/<id>/
  std::string source;  // the sending host's name (logs)
  std::string tenant;
  checkpoint::Manifest manifest;
  checkpoint::Policy policy;
  uint64_t deadline_unix_ms = 0;  // a request still queued after it is dropped
};

// A tenant deleted (stream, step) on `source`: the copy of it goes too
// (Engine::DeleteReplica checks the digest).
struct ReplicaForget {
  std::string source;
  std::string tenant;
  uint32_t stream = 0;
  uint64_t step = 0;
  uint32_t digest = 0;  // checkpoint::ReplicaDigest
};

std::string EncodeForget(const ReplicaForget& f);
// kInvalidArgument for anything that is not a forget of this version.
Status DecodeForget(const std::string& text, ReplicaForget* out);

// The largest request the receiver reads (a manifest of a large checkpoint).
inline constexpr size_t kMaxReplicaRequestBytes = 16u << 20;

std::string EncodeRequest(const ReplicaRequest& r);
// kInvalidArgument for anything that is not a request of this version; the
// manifest is checked as DecodeManifest checks a file.
Status DecodeRequest(const std::string& text, ReplicaRequest* out);

// Tags of the group's point-to-point messages.
inline constexpr uint64_t kAcceptTag = 0;
inline uint64_t ChunkTag(uint64_t i) {
  return 1 + i;
}
inline uint64_t FinalTag(const checkpoint::Manifest& m) {
  return 1 + m.num_chunks();
}

// An answer: a StatusCode as 4 bytes.
Status SendStatus(cluster::InterHostGroup& g, uint32_t peer, uint64_t tag, const Status& st,
                  std::chrono::milliseconds timeout);
// The peer's answer, or the transfer's own failure.
Status RecvStatus(cluster::InterHostGroup& g, uint32_t peer, uint64_t tag,
                  std::chrono::milliseconds timeout);

}  // namespace hz::service

#endif  // HZ_SERVICE_CKPT_REPLICA_WIRE_H_
