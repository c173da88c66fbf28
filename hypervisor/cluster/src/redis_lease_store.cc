#include "hz/cluster/redis_lease_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <string_view>
#include <vector>

namespace hz::cluster {

namespace {

// A record is a hash {holder, value} whose key expires with the lease.

// KEYS: record, name set. ARGV: holder, value, lease_ms, name.
// Returns {0} acquired, {1} renewed, {2, holder's value, its PTTL}.
constexpr const char kHoldScript[] = R"(
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'hash' and t ~= 'none' then
  return {2, '', redis.call('PTTL', KEYS[1])}
end
local cur = redis.call('HGET', KEYS[1], 'holder')
if cur and cur ~= ARGV[1] then
  return {2, redis.call('HGET', KEYS[1], 'value') or '', redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'value', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[4])
if cur then return {1} end
return {0}
)";

// KEYS: record, name set. ARGV: holder, name. Deletes the record if it is ours.
constexpr const char kReleaseScript[] = R"(
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
)";

// KEYS: name set. ARGV: record key prefix. Returns name, value, PTTL triples
// of the live records and forgets the names whose record has expired. A key
// that is not a record (someone else wrote it) is listed with an empty value,
// for the caller to count as malformed; it must not fail the whole listing.
constexpr const char kListScript[] = R"(
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. name
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    redis.call('SREM', KEYS[1], name)
  else
    out[#out + 1] = name
    out[#out + 1] = (t == 'hash' and redis.call('HGET', key, 'value')) or ''
    out[#out + 1] = redis.call('PTTL', key)
  end
end
return out
)";

bool IsString(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

std::string Str(const redisReply* r) {
  return std::string(r->str, r->len);
}

Status Malformed(const char* what) {
  return Status::Corruption(std::string("the cluster store answered ") + what +
                            " with an unexpected reply");
}

}  // namespace

RedisLeaseStore::RedisLeaseStore(RedisAddress address, std::string key_prefix,
                                 std::chrono::milliseconds timeout)
    : redis_(std::move(address), timeout), prefix_(std::move(key_prefix)) {}

RedisLeaseStore::~RedisLeaseStore() = default;

StatusOr<RedisConnection::Reply> RedisLeaseStore::Eval(const char* script,
                                                       std::initializer_list<std::string> keys,
                                                       std::initializer_list<std::string> args) {
  const std::string nkeys = std::to_string(keys.size());
  std::vector<std::string_view> argv = {"EVAL", script, nkeys};
  for (const auto* list : {&keys, &args}) {
    for (const std::string& a : *list) argv.push_back(a);
  }
  return redis_.Command(argv);
}

StatusOr<HoldResult> RedisLeaseStore::Hold(const std::string& group, const std::string& name,
                                           const std::string& holder, const std::string& value,
                                           uint32_t lease_ms) {
  StatusOr<RedisConnection::Reply> r =
      Eval(kHoldScript, {prefix_ + group + "/" + name, prefix_ + group},
           {holder, value, std::to_string(lease_ms), name});
  if (!r.ok()) return r.status();
  const redisReply* a = r->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements < 1 ||
      a->element[0]->type != REDIS_REPLY_INTEGER) {
    return Malformed("a lease renewal");
  }
  HoldResult out;
  switch (a->element[0]->integer) {
    case 0:
      out.outcome = HoldResult::Outcome::kAcquired;
      return out;
    case 1:
      out.outcome = HoldResult::Outcome::kRenewed;
      return out;
    case 2:
      if (a->elements != 3 || !IsString(a->element[1]) ||
          a->element[2]->type != REDIS_REPLY_INTEGER) {
        break;
      }
      out.outcome = HoldResult::Outcome::kHeldByOther;
      out.holder_value = Str(a->element[1]);
      out.holder_remaining_ms = a->element[2]->integer;
      return out;
  }
  return Malformed("a lease renewal");
}

Status RedisLeaseStore::Release(const std::string& group, const std::string& name,
                                const std::string& holder) {
  StatusOr<RedisConnection::Reply> r =
      Eval(kReleaseScript, {prefix_ + group + "/" + name, prefix_ + group}, {holder, name});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return Malformed("a lease release");
  return Status::Ok();
}

StatusOr<std::vector<LeasedRecord>> RedisLeaseStore::List(const std::string& group) {
  StatusOr<RedisConnection::Reply> r =
      Eval(kListScript, {prefix_ + group}, {prefix_ + group + "/"});
  if (!r.ok()) return r.status();
  const redisReply* a = r->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements % 3 != 0) return Malformed("a listing");
  std::vector<LeasedRecord> out;
  for (size_t i = 0; i < a->elements; i += 3) {
    if (!IsString(a->element[i]) || !IsString(a->element[i + 1]) ||
        a->element[i + 2]->type != REDIS_REPLY_INTEGER) {
      return Malformed("a listing");
    }
    out.push_back({Str(a->element[i]), Str(a->element[i + 1]), a->element[i + 2]->integer});
  }
  std::sort(out.begin(), out.end(),
            [](const LeasedRecord& x, const LeasedRecord& y) { return x.name < y.name; });
  return out;
}

}  // namespace hz::cluster
