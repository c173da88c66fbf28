// LeaseStore on Redis, through hiredis (Debian's libhiredis, the client Gloo's
// RedisStore also uses). Each operation is one Lua script, so that checking a
// record's holder and changing the record are one atomic step in Redis, and
// one round trip.
//
// Keys, under the configured prefix P:
//   P<group>/<name>  the record: its value, with a PX expiry (the lease)
//   P<group>         a set of the names, so List needs no SCAN of the keyspace;
//                    names whose record has expired are dropped as List meets them
//
// The scripts touch records through names read from the set, which Redis
// allows on a single server (and a replicated one) but not in Redis Cluster.
//
// Not thread-safe: one connection, used by one thread. A failed call drops the
// connection; the next call connects again.
#ifndef HZ_CLUSTER_REDIS_LEASE_STORE_H_
#define HZ_CLUSTER_REDIS_LEASE_STORE_H_

#include <chrono>
#include <memory>
#include <string>

#include "hz/cluster/lease_store.h"

struct redisContext;
struct redisReply;

namespace hz::cluster {

// Where Redis listens: "host:port" or "unix:/path/to/socket".
struct RedisAddress {
  std::string host;  // empty for a Unix socket
  uint16_t port = 0;
  std::string unix_path;

  static StatusOr<RedisAddress> Parse(const std::string& text);
  std::string ToString() const;
};

class RedisLeaseStore : public LeaseStore {
 public:
  // timeout bounds connecting and each command: a store that does not answer
  // in time counts as unreachable.
  RedisLeaseStore(RedisAddress address, std::string key_prefix, std::chrono::milliseconds timeout);
  ~RedisLeaseStore() override;
  RedisLeaseStore(const RedisLeaseStore&) = delete;
  RedisLeaseStore& operator=(const RedisLeaseStore&) = delete;

  StatusOr<HoldResult> Hold(const std::string& group, const std::string& name,
                            const std::string& value, uint32_t lease_ms) override;
  Status Release(const std::string& group, const std::string& name,
                 const std::string& value) override;
  StatusOr<std::vector<LeasedRecord>> List(const std::string& group) override;
  std::string Describe() const override { return address_.ToString(); }

 private:
  struct ContextFree {
    void operator()(redisContext* c) const;
  };
  struct ReplyFree {
    void operator()(redisReply* r) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyFree>;

  Status Connect();
  // Runs one script; the reply, or why there is none.
  StatusOr<Reply> Eval(const char* script, std::initializer_list<std::string> keys,
                       std::initializer_list<std::string> args);

  const RedisAddress address_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<redisContext, ContextFree> ctx_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_REDIS_LEASE_STORE_H_
