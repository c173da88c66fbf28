// LeaseStore on Redis (RedisConnection). Each operation is one Lua script, so that checking a
// record's holder and changing the record are one atomic step in Redis, and
// one round trip.
//
// Keys, under the configured prefix P:
//   P<group>/<name>  the record: a hash {holder, value}, with a PX expiry (the lease)
//   P<group>         a set of the names, so List needs no SCAN of the keyspace;
//                    names whose record has expired are dropped as List meets them
//
// The scripts touch records through names read from the set, which Redis
// allows on a single server (and a replicated one) but not in Redis Cluster.
//
// Not thread-safe: one connection, used by one thread.
#ifndef HZ_CLUSTER_REDIS_LEASE_STORE_H_
#define HZ_CLUSTER_REDIS_LEASE_STORE_H_

#include <chrono>
#include <memory>
#include <string>

#include "hz/cluster/lease_store.h"
#include "hz/cluster/redis_connection.h"

namespace hz::cluster {

class RedisLeaseStore : public LeaseStore {
 public:
  // timeout bounds connecting and each command: a store that does not answer
  // in time counts as unreachable.
  RedisLeaseStore(RedisAddress address, std::string key_prefix, std::chrono::milliseconds timeout);
  ~RedisLeaseStore() override;
  RedisLeaseStore(const RedisLeaseStore&) = delete;
  RedisLeaseStore& operator=(const RedisLeaseStore&) = delete;

  StatusOr<HoldResult> Hold(const std::string& group, const std::string& name,
                            const std::string& holder, const std::string& value,
                            uint32_t lease_ms) override;
  Status Release(const std::string& group, const std::string& name,
                 const std::string& holder) override;
  StatusOr<std::vector<LeasedRecord>> List(const std::string& group) override;
  std::string Describe() const override { return redis_.Describe(); }

 private:
  // Runs one script; the reply, or why there is none.
  StatusOr<RedisConnection::Reply> Eval(const char* script, std::initializer_list<std::string> keys,
                                        std::initializer_list<std::string> args);

  RedisConnection redis_;
  const std::string prefix_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_REDIS_LEASE_STORE_H_
