// A list of the cluster store used as a queue between hosts: one host pushes
// a value that expires if nobody takes it, another pops it, waiting a
// bounded time. Redis lists give this directly (RPUSH, PEXPIRE, BLPOP); the
// peer-host checkpoint tier and the commands hosts run for each other
// (host_commands.h) both queue their requests this way.
#ifndef HZ_CLUSTER_STORE_QUEUE_H_
#define HZ_CLUSTER_STORE_QUEUE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hz/cluster/redis_connection.h"
#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::cluster {

// Appends `value` to the list `key`; the whole list expires `ttl` after the
// last push, so requests for a host that never comes back do not stay.
Status PushWithExpiry(RedisConnection& redis, const std::string& key, std::string_view value,
                      std::chrono::milliseconds ttl);

// The first value of the list `key`, waiting up to `wait` (rounded up to
// whole seconds, at least one) for one to arrive; nullopt when none came.
// The connection's own timeout must exceed `wait`.
StatusOr<std::optional<std::string>> BlockingPop(RedisConnection& redis, const std::string& key,
                                                 std::chrono::milliseconds wait);

// A fresh random id (32 hex digits) for keys one request owns.
std::string RandomKeyId();

// Milliseconds since the Unix epoch: deadlines that cross hosts.
uint64_t UnixMs();

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_STORE_QUEUE_H_
