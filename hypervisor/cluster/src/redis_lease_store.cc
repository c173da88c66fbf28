#include "hz/cluster/redis_lease_store.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <charconv>
#include <vector>

namespace hz::cluster {

namespace {

// KEYS: record, name set. ARGV: value, lease_ms, name.
// Returns {0} acquired, {1} renewed, {2, holder's value, its PTTL}.
constexpr const char kHoldScript[] = R"(
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SADD', KEYS[2], ARGV[3])
  return {0}
elseif cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SADD', KEYS[2], ARGV[3])
  return {1}
end
return {2, cur, redis.call('PTTL', KEYS[1])}
)";

// KEYS: record, name set. ARGV: value, name. Deletes the record if it is ours.
constexpr const char kReleaseScript[] = R"(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
)";

// KEYS: name set. ARGV: record key prefix. Returns name, value, PTTL triples
// of the live records and forgets the names whose record has expired.
constexpr const char kListScript[] = R"(
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. name
  local v = redis.call('GET', key)
  if v then
    out[#out + 1] = name
    out[#out + 1] = v
    out[#out + 1] = redis.call('PTTL', key)
  else
    redis.call('SREM', KEYS[1], name)
  end
end
return out
)";

// hiredis writes to its socket with write(), which raises SIGPIPE once Redis
// has gone, and SIGPIPE ends the process. For the duration of one command,
// the calling thread blocks SIGPIPE; one raised meanwhile is taken off the
// thread's pending set before unblocking, so it never reaches the process.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

timeval ToTimeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

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

StatusOr<RedisAddress> RedisAddress::Parse(const std::string& text) {
  RedisAddress a;
  if (text.rfind("unix:", 0) == 0) {
    a.unix_path = text.substr(5);
    if (a.unix_path.empty() || a.unix_path[0] != '/' || a.unix_path.size() > 107) {
      return Status::InvalidArgument("expected unix:/absolute/path (at most 107 bytes)");
    }
    return a;
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("expected host:port or unix:/path");
  }
  a.host = text.substr(0, colon);
  if (a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  unsigned port = 0;
  auto [p, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || p != end || port == 0 || port > 65535 || a.host.empty()) {
    return Status::InvalidArgument("expected host:port with a port in 1..65535");
  }
  a.port = static_cast<uint16_t>(port);
  return a;
}

std::string RedisAddress::ToString() const {
  if (!unix_path.empty()) return "unix:" + unix_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void RedisLeaseStore::ContextFree::operator()(redisContext* c) const {
  redisFree(c);
}
void RedisLeaseStore::ReplyFree::operator()(redisReply* r) const {
  freeReplyObject(r);
}

RedisLeaseStore::RedisLeaseStore(RedisAddress address, std::string key_prefix,
                                 std::chrono::milliseconds timeout)
    : address_(std::move(address)), prefix_(std::move(key_prefix)), timeout_(timeout) {}

RedisLeaseStore::~RedisLeaseStore() = default;

Status RedisLeaseStore::Connect() {
  if (ctx_) return Status::Ok();
  const timeval tv = ToTimeval(timeout_);
  redisContext* c = address_.unix_path.empty()
                        ? redisConnectWithTimeout(address_.host.c_str(), address_.port, tv)
                        : redisConnectUnixWithTimeout(address_.unix_path.c_str(), tv);
  if (c == nullptr) return Status::IoError("cannot allocate a Redis connection");
  std::unique_ptr<redisContext, ContextFree> owned(c);
  if (c->err != 0) {
    return Status::IoError("cannot reach the cluster store at " + Describe() + ": " + c->errstr);
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    return Status::IoError("cannot set a timeout on the cluster store connection");
  }
  ctx_ = std::move(owned);
  return Status::Ok();
}

StatusOr<RedisLeaseStore::Reply> RedisLeaseStore::Eval(const char* script,
                                                       std::initializer_list<std::string> keys,
                                                       std::initializer_list<std::string> args) {
  if (Status s = Connect(); !s.ok()) return s;
  const std::string nkeys = std::to_string(keys.size());
  std::vector<const char*> argv = {"EVAL", script, nkeys.c_str()};
  std::vector<size_t> lens = {4, std::char_traits<char>::length(script), nkeys.size()};
  for (const auto* list : {&keys, &args}) {
    for (const std::string& s : *list) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    }
  }
  Reply reply;
  {
    SigpipeBlocked no_sigpipe;
    reply.reset(static_cast<redisReply*>(
        redisCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  }
  if (!reply) {
    std::string why = ctx_->err != 0 ? ctx_->errstr : "no reply";
    ctx_.reset();  // the connection's state is unknown now
    return Status::IoError("the cluster store at " + Describe() + " did not answer: " + why);
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return Status::IoError("the cluster store refused a request: " + Str(reply.get()));
  }
  return reply;
}

StatusOr<HoldResult> RedisLeaseStore::Hold(const std::string& group, const std::string& name,
                                           const std::string& value, uint32_t lease_ms) {
  StatusOr<Reply> r = Eval(kHoldScript, {prefix_ + group + "/" + name, prefix_ + group},
                           {value, std::to_string(lease_ms), name});
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
                                const std::string& value) {
  StatusOr<Reply> r =
      Eval(kReleaseScript, {prefix_ + group + "/" + name, prefix_ + group}, {value, name});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return Malformed("a lease release");
  return Status::Ok();
}

StatusOr<std::vector<LeasedRecord>> RedisLeaseStore::List(const std::string& group) {
  StatusOr<Reply> r = Eval(kListScript, {prefix_ + group}, {prefix_ + group + "/"});
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
