// Communicators across hosts, as the cluster store records them: which tenant
// owns a uid (so that a tenant's scope holds on every host), and which host
// holds each rank (so that every host of a communicator learns the others).
//
// Keys, under the configured prefix P (each expires: nothing outlives the
// communicators it describes by more than its lifetime):
//   P uid/<uid hex>    the owning tenant's name
//   P comm/<uid hex>   hash: "n" -> nranks, "<rank>" -> host name
//   P reform/<uid hex> the generation its inter-host group re-forms at: a
//                      host that hands the communicator to its next process
//                      (a live upgrade) announces it before its connections
//                      close, and the other hosts, seeing them close, form
//                      the group again at that generation instead of
//                      aborting the communicator
#ifndef HZ_CLUSTER_COMM_DIRECTORY_H_
#define HZ_CLUSTER_COMM_DIRECTORY_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "hz/cluster/redis_connection.h"

namespace hz::cluster {

// Where a communicator's ranks are, as far as they have joined.
struct Placement {
  uint32_t nranks = 0;
  std::map<uint32_t, std::string> hosts;  // rank -> host name
  bool complete() const { return nranks > 0 && hosts.size() == nranks; }
};

class CommDirectory {
 public:
  CommDirectory(RedisAddress address, std::string key_prefix, std::chrono::milliseconds timeout);

  // Records that tenant owns uid, for lifetime; a uid already recorded keeps
  // its owner (kExists when that is another tenant).
  Status PublishUid(const std::string& uid_hex, const std::string& tenant,
                    std::chrono::milliseconds lifetime);
  // The tenant that owns uid; nothing when no host published it (yet).
  StatusOr<std::optional<std::string>> UidTenant(const std::string& uid_hex);

  // Claims `rank` of an nranks communicator for `host`, and returns the
  // placement so far. kExists when another host holds the rank, kMismatch
  // when the communicator was claimed with another nranks.
  StatusOr<Placement> Claim(const std::string& uid_hex, uint32_t nranks, uint32_t rank,
                            const std::string& host, std::chrono::milliseconds lifetime);

  // Announces that the communicator's group re-forms at `generation` (kept
  // for lifetime); an announcement never lowers it. Returns the generation
  // now announced.
  StatusOr<uint64_t> AnnounceReform(const std::string& uid_hex, uint64_t generation,
                                    std::chrono::milliseconds lifetime);
  // The generation announced last; 0 when none (or it expired).
  StatusOr<uint64_t> ReformGeneration(const std::string& uid_hex);

  std::string Describe() const { return redis_.Describe(); }

 private:
  RedisConnection redis_;
  const std::string prefix_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_COMM_DIRECTORY_H_
