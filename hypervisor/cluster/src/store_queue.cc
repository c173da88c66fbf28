#include "hz/cluster/store_queue.h"

#include <hiredis/hiredis.h>

#include <cstdio>
#include <random>

namespace hz::cluster {

Status PushWithExpiry(RedisConnection& redis, const std::string& key, std::string_view value,
                      std::chrono::milliseconds ttl) {
  StatusOr<RedisConnection::Reply> r = redis.Command({"RPUSH", key, value});
  if (r.ok()) r = redis.Command({"PEXPIRE", key, std::to_string(ttl.count())});
  return r.status();
}

StatusOr<std::optional<std::string>> BlockingPop(RedisConnection& redis, const std::string& key,
                                                 std::chrono::milliseconds wait) {
  const int64_t seconds = std::max<int64_t>(1, (wait.count() + 999) / 1000);
  StatusOr<RedisConnection::Reply> r = redis.Command({"BLPOP", key, std::to_string(seconds)});
  if (!r.ok()) return r.status();
  // [key, value], or nil when nothing came in time.
  const redisReply* reply = r->get();
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
    return std::optional<std::string>();
  }
  const redisReply* v = reply->element[1];
  if (v == nullptr || v->type != REDIS_REPLY_STRING) return std::optional<std::string>();
  return std::optional<std::string>(std::string(v->str, v->len));
}

std::string RandomKeyId() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

uint64_t UnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace hz::cluster
