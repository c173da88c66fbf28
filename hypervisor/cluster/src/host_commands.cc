#include "hz/cluster/host_commands.h"

#include "hz/cluster/store_queue.h"
#include "spdlog/spdlog.h"

namespace hz::cluster {

using json = nlohmann::json;

namespace {

// How long one pop of the queue waits: also how soon Stop is noticed.
constexpr std::chrono::seconds kPopWait{1};

// An id names a store key: short, and nothing but hex digits.
bool ValidId(const json& id) {
  if (!id.is_string()) return false;
  const std::string& s = id.get_ref<const std::string&>();
  return !s.empty() && s.size() <= 64 && s.find_first_not_of("0123456789abcdef") == s.npos;
}

}  // namespace

HostCommands::HostCommands(HostCommandsOptions options, Executor execute)
    : options_(std::move(options)), execute_(std::move(execute)) {}

HostCommands::~HostCommands() {
  Stop();
}

void HostCommands::Start() {
  receiver_ = std::thread([this] { ReceiveLoop(); });
}

void HostCommands::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (receiver_.joinable()) receiver_.join();
}

std::string HostCommands::QueueKey(const std::string& host) const {
  return options_.key_prefix + "commands/" + host;
}

std::string HostCommands::AnswerKey(const std::string& id) const {
  return options_.key_prefix + "commands/answer/" + id;
}

StatusOr<json> HostCommands::Call(const std::string& host, const json& request) {
  // Its own connection: any thread may call, and the pop below blocks it.
  RedisConnection redis(options_.store, options_.store_timeout + options_.timeout);
  const std::string id = RandomKeyId();
  const json envelope = {{"id", id},
                         {"from", options_.host_name},
                         {"deadline_unix_ms", UnixMs() + options_.timeout.count() / 2},
                         {"request", request}};
  if (Status st = PushWithExpiry(redis, QueueKey(host), envelope.dump(), 2 * options_.timeout);
      !st.ok()) {
    return st;
  }
  StatusOr<std::optional<std::string>> answer = BlockingPop(redis, AnswerKey(id), options_.timeout);
  if (!answer.ok()) return answer.status();
  if (!*answer) {
    return Status::TimedOut(
        "host " + host + " did not answer within " + std::to_string(options_.timeout.count()) +
        " ms (gone, busy, or still running the command: its outcome is unknown)");
  }
  const json out = (**answer).size() <= kMaxHostCommandBytes
                       ? json::parse(**answer, nullptr, /*allow_exceptions=*/false)
                       : json(json::value_t::discarded);
  if (!out.is_object()) {
    return Status::Corruption("host " + host + " answered something that is not an answer");
  }
  return out;
}

void HostCommands::ReceiveLoop() {
  RedisConnection redis(options_.store, options_.store_timeout + 2 * kPopWait);
  const std::string queue = QueueKey(options_.host_name);
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    StatusOr<std::optional<std::string>> r = BlockingPop(redis, queue, kPopWait);
    if (!r.ok()) {
      // The store is away (membership says so): look again in a while.
      std::unique_lock<std::mutex> l(mu_);
      wake_.wait_for(l, kPopWait, [this] { return stop_; });
      continue;
    }
    if (*r) Serve(**r, redis);
  }
}

void HostCommands::Serve(const std::string& text, RedisConnection& redis) {
  json env = text.size() <= kMaxHostCommandBytes
                 ? json::parse(text, nullptr, /*allow_exceptions=*/false)
                 : json(json::value_t::discarded);
  if (!env.is_object() || !ValidId(env.value("id", json())) || !env.contains("from") ||
      !env["from"].is_string() || !env.contains("deadline_unix_ms") ||
      !env["deadline_unix_ms"].is_number_unsigned() || !env.contains("request") ||
      !env["request"].is_object()) {
    spdlog::warn("event=host_command_malformed bytes={}", text.size());
    return;
  }
  const std::string id = env["id"].get<std::string>();
  const std::string from = env["from"].get<std::string>();
  if (env["deadline_unix_ms"].get<uint64_t>() < UnixMs()) {
    spdlog::warn("event=host_command_stale id={} from={}", id, from);
    return;  // its caller is giving up
  }
  json answer = execute_(env["request"], from);
  Status st = PushWithExpiry(redis, AnswerKey(id), answer.dump(), options_.timeout);
  if (!st.ok()) {
    spdlog::warn("event=host_command_unanswered id={} from={} error=\"{}\"", id, from,
                 st.ToString());
  }
}

}  // namespace hz::cluster
