#include "hz/cluster/comm_directory.h"

#include <hiredis/hiredis.h>

#include <charconv>

namespace hz::cluster {

namespace {

// KEYS: placement hash. ARGV: nranks, rank, host, lifetime_ms.
// Returns {0, field, value, ...} (the whole hash), {1, n} for another
// nranks, {2, host} for a rank another host holds.
constexpr const char kClaimScript[] = R"(
local n = redis.call('HGET', KEYS[1], 'n')
if n and n ~= ARGV[1] then return {1, n} end
local cur = redis.call('HGET', KEYS[1], ARGV[2])
if cur and cur ~= ARGV[3] then return {2, cur} end
redis.call('HSET', KEYS[1], 'n', ARGV[1], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local out = {0}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
)";

// KEYS: reform key. ARGV: generation, lifetime_ms. Raises the generation
// (never lowers it) and returns the one in effect.
constexpr const char kReformScript[] = R"(
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return tostring(cur)
)";

bool ToU64(const redisReply* r, uint64_t* out) {
  if (r == nullptr || r->type != REDIS_REPLY_STRING) return false;
  auto [p, ec] = std::from_chars(r->str, r->str + r->len, *out);
  return ec == std::errc() && p == r->str + r->len;
}

bool ToU32(const redisReply* r, uint32_t* out) {
  if (r == nullptr || r->type != REDIS_REPLY_STRING) return false;
  auto [p, ec] = std::from_chars(r->str, r->str + r->len, *out);
  return ec == std::errc() && p == r->str + r->len;
}

Status Malformed() {
  return Status::Corruption("the cluster store answered a rank claim with an unexpected reply");
}

}  // namespace

CommDirectory::CommDirectory(RedisAddress address, std::string key_prefix,
                             std::chrono::milliseconds timeout)
    : redis_(std::move(address), timeout), prefix_(std::move(key_prefix)) {}

Status CommDirectory::PublishUid(const std::string& uid_hex, const std::string& tenant,
                                 std::chrono::milliseconds lifetime) {
  const std::string key = prefix_ + "uid/" + uid_hex;
  const std::string ms = std::to_string(lifetime.count());
  StatusOr<RedisConnection::Reply> r = redis_.Command({"SET", key, tenant, "NX", "PX", ms});
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_NIL) {
    StatusOr<std::optional<std::string>> owner = UidTenant(uid_hex);
    if (!owner.ok()) return owner.status();
    if (*owner && **owner != tenant) return Status::Exists("the uid belongs to another tenant");
  }
  return Status::Ok();
}

StatusOr<std::optional<std::string>> CommDirectory::UidTenant(const std::string& uid_hex) {
  StatusOr<RedisConnection::Reply> r = redis_.Command({"GET", prefix_ + "uid/" + uid_hex});
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if ((*r)->type != REDIS_REPLY_STRING) return Malformed();
  return std::optional<std::string>(std::string((*r)->str, (*r)->len));
}

StatusOr<Placement> CommDirectory::Claim(const std::string& uid_hex, uint32_t nranks, uint32_t rank,
                                         const std::string& host,
                                         std::chrono::milliseconds lifetime) {
  const std::string n = std::to_string(nranks), r = std::to_string(rank),
                    ms = std::to_string(lifetime.count());
  StatusOr<RedisConnection::Reply> reply =
      redis_.Command({"EVAL", kClaimScript, "1", prefix_ + "comm/" + uid_hex, n, r, host, ms});
  if (!reply.ok()) return reply.status();
  const redisReply* a = reply->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements < 1 ||
      a->element[0]->type != REDIS_REPLY_INTEGER) {
    return Malformed();
  }
  if (a->element[0]->integer == 1) {
    return Status::Mismatch("the communicator's other ranks joined with another nranks");
  }
  if (a->element[0]->integer == 2) {
    return Status::Exists("the rank was taken on another host");
  }
  Placement p;
  if (a->elements % 2 != 1) return Malformed();
  for (size_t i = 1; i < a->elements; i += 2) {
    const redisReply* field = a->element[i];
    const redisReply* value = a->element[i + 1];
    if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING) {
      return Malformed();
    }
    uint32_t num = 0;
    if (std::string_view(field->str, field->len) == "n") {
      if (!ToU32(value, &p.nranks)) return Malformed();
    } else if (ToU32(field, &num) && num < nranks) {
      p.hosts[num] = std::string(value->str, value->len);
    } else {
      return Malformed();
    }
  }
  if (p.nranks != nranks) return Malformed();
  return p;
}

StatusOr<uint64_t> CommDirectory::AnnounceReform(const std::string& uid_hex, uint64_t generation,
                                                 std::chrono::milliseconds lifetime) {
  StatusOr<RedisConnection::Reply> r =
      redis_.Command({"EVAL", kReformScript, "1", prefix_ + "reform/" + uid_hex,
                      std::to_string(generation), std::to_string(lifetime.count())});
  if (!r.ok()) return r.status();
  uint64_t now = 0;
  if (!ToU64(r->get(), &now)) {
    return Status::Corruption("the cluster store answered a reform with an unexpected reply");
  }
  return now;
}

StatusOr<uint64_t> CommDirectory::ReformGeneration(const std::string& uid_hex) {
  StatusOr<RedisConnection::Reply> r = redis_.Command({"GET", prefix_ + "reform/" + uid_hex});
  if (!r.ok()) return r.status();
  if ((*r)->type == REDIS_REPLY_NIL) return uint64_t{0};
  uint64_t generation = 0;
  if (!ToU64(r->get(), &generation)) {
    return Status::Corruption("the cluster store holds a malformed reform generation");
  }
  return generation;
}

}  // namespace hz::cluster
