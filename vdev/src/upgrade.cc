#include "vdev/upgrade.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "nlohmann/json.hpp"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "vdev/handoff.h"

namespace vdev {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Starts binary with args and --handoff-fd; the child finds child_fd as
// descriptor kSuccessorChannelFd. Returns the pid, or -1 with *error.
//
// posix_spawn, not fork: glibc spawns with vfork semantics, so the parent's
// page tables are not copied. A fork of this process (staging memory, guest
// memory maps) held its memory map for about 100 ms on a small host, and
// every tenant's request with it.
constexpr int kSuccessorChannelFd = 3;

pid_t Spawn(const UpgradeOptions& options, int child_fd, std::string* error) {
  std::vector<std::string> args;
  args.push_back(options.binary);
  args.insert(args.end(), options.args.begin(), options.args.end());
  args.push_back(kHandoffFdOption);
  args.push_back(std::to_string(kSuccessorChannelFd));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  // The successor inherits the channel and the standard streams, nothing
  // else: a descriptor a library opened without close-on-exec (Gloo's
  // connections to other hosts, for one) would otherwise stay open in every
  // later process, and the peers would never see it close. dup2 also
  // clears close-on-exec when the channel already is descriptor 3.
  posix_spawn_file_actions_adddup2(&actions, child_fd, kSuccessorChannelFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, kSuccessorChannelFd + 1);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *error = std::string("spawning ") + options.binary + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void ThawAll(std::span<Server* const> servers) {
  for (Server* s : servers) s->Thaw();
}

// Reads the successor's hello: the snapshot versions it reads.
std::string CheckHello(int channel, Clock::time_point deadline) {
  HandoffMessage hello;
  if (std::string e = ReceiveHandoff(channel, HandoffKind::kHello, &hello, deadline, {4096, 0});
      !e.empty()) {
    return "no hello from the successor: " + e;
  }
  json j = json::parse(hello.payload, nullptr, false);
  if (!j.is_object() || !j.contains("oldest") || !j.contains("newest") ||
      !j["oldest"].is_number_unsigned() || !j["newest"].is_number_unsigned()) {
    return "the successor's hello is malformed";
  }
  const uint64_t oldest = j["oldest"].get<uint64_t>(), newest = j["newest"].get<uint64_t>();
  if (kSnapshotVersion < oldest || kSnapshotVersion > newest) {
    return fmt::format("the successor reads snapshot versions {} to {}, this process writes {}",
                       oldest, newest, kSnapshotVersion);
  }
  return {};
}

// Freezes every server and writes the snapshot; on error the caller thaws.
std::string FreezeAndExport(std::span<Server* const> servers, const ApplicationExport& application,
                            const UpgradeOptions& options, std::string* encoded, SnapshotFds* fds) {
  for (Server* s : servers) {
    if (Error e = s->Freeze(options.freeze_timeout); !e.empty()) return "freeze: " + e;
  }
  Snapshot snapshot;
  for (Server* s : servers) {
    ServerRecord record;
    if (Error e = s->Export(&record, fds); !e.empty()) return "export: " + e;
    snapshot.servers.push_back(std::move(record));
  }
  if (application) {
    if (Error e = application(*fds, &snapshot); !e.empty()) return "application: " + e;
  }
  *encoded = EncodeSnapshot(snapshot);
  return {};
}

// Reads the successor's verdict.
std::string ReadResult(int channel, Clock::time_point deadline, UpgradeResult* result) {
  HandoffMessage reply;
  if (std::string e = ReceiveHandoff(channel, HandoffKind::kResult, &reply, deadline, {1 << 20, 0});
      !e.empty()) {
    return "no answer from the successor: " + e;
  }
  json j = json::parse(reply.payload, nullptr, false);
  if (!j.is_object() || !j.contains("serving") || !j["serving"].is_boolean()) {
    return "the successor's answer is malformed";
  }
  if (!j["serving"].get<bool>()) {
    std::string why = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>()
                                                                    : "no reason given";
    return "the successor refused: " + why;
  }
  if (j.contains("lost") && j["lost"].is_array()) {
    for (const json& path : j["lost"]) {
      if (path.is_string()) result->lost.push_back(path.get<std::string>());
    }
  }
  return {};
}

}  // namespace

UpgradeResult HandOver(std::span<Server* const> servers, const ApplicationExport& application,
                       const UpgradeOptions& options) {
  UpgradeResult result;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    result.error = std::string("socketpair: ") + std::strerror(errno);
    return result;
  }
  UniqueFd channel(pair[0]), child_end(pair[1]);
  result.successor = Spawn(options, child_end.get(), &result.error);
  child_end.reset();
  if (result.successor < 0) return result;

  auto fail = [&](std::string why, bool thaw) {
    if (thaw) ThawAll(servers);
    KillAndReap(result.successor);
    result.error = std::move(why);
    result.successor = -1;
    return result;
  };
  if (std::string e = CheckHello(channel.get(), Clock::now() + options.start_timeout); !e.empty()) {
    return fail(e, false);
  }

  const auto frozen_at = Clock::now();
  std::string encoded;
  SnapshotFds fds;
  if (std::string e = FreezeAndExport(servers, application, options, &encoded, &fds); !e.empty()) {
    return fail(e, true);
  }
  const std::vector<int> raw = fds.raw();
  const auto deadline = Clock::now() + options.serve_timeout;
  if (std::string e = SendHandoff(channel.get(), HandoffKind::kState, encoded, raw, deadline);
      !e.empty()) {
    return fail("sending the snapshot: " + e, true);
  }
  if (std::string e = ReadResult(channel.get(), deadline, &result); !e.empty()) {
    return fail(e, true);
  }
  result.paused = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - frozen_at);
  for (Server* s : servers) s->Abandon();
  spdlog::info("vdev: handed over to process {} after a pause of {} us", result.successor,
               result.paused.count());
  return result;
}

struct Takeover::Pending {
  std::mutex mu;
  UniqueFd channel;
  size_t waiting = 0;
  std::vector<std::string> lost;

  // A server's session is rebuilt (why empty) or lost; the last one answers
  // the predecessor, which then exits.
  void Done(const std::string& path, const Error& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!why.empty()) {
      spdlog::error("vdev: could not take {} over ({}); its front-end loses the device", path, why);
      lost.push_back(path);
    }
    if (--waiting == 0) SendServing();
  }
  void SendServing() {
    if (!channel.valid()) return;
    const std::string serving = json{{"serving", true}, {"lost", lost}}.dump();
    if (std::string e = SendHandoff(channel.get(), HandoffKind::kResult, serving, {},
                                    Clock::now() + std::chrono::seconds(5));
        !e.empty()) {
      spdlog::error("vdev: could not confirm the take-over: {}", e);
    }
    channel.reset();
  }
};

Takeover::Takeover(int channel_fd) : channel_(channel_fd) {}

Takeover::~Takeover() = default;

std::string Takeover::Receive(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string hello =
      json{{"oldest", kOldestSnapshotVersion}, {"newest", kSnapshotVersion}}.dump();
  if (std::string e = SendHandoff(channel_.get(), HandoffKind::kHello, hello, {}, deadline);
      !e.empty()) {
    return "hello: " + e;
  }
  HandoffMessage state;
  if (std::string e = ReceiveHandoff(channel_.get(), HandoffKind::kState, &state, deadline);
      !e.empty()) {
    return "receiving the snapshot: " + e;
  }
  if (std::string e = DecodeSnapshot(state.payload, state.fds.size(), &snapshot_); !e.empty()) {
    const std::string refusal = json{{"serving", false}, {"error", e}}.dump();
    SendHandoff(channel_.get(), HandoffKind::kResult, refusal, {}, Clock::now() + timeout);
    return e;
  }
  fds_ = std::make_shared<std::vector<UniqueFd>>(std::move(state.fds));
  return {};
}

UniqueFd Takeover::TakeApplicationFd(size_t i) {
  if (fds_ == nullptr || i >= snapshot_.application_fds.size()) return UniqueFd();
  return std::move((*fds_)[snapshot_.application_fds[i]]);
}

bool Takeover::Serve(std::span<Server* const> servers, std::string* error) {
  pending_ = std::make_shared<Pending>();
  pending_->channel = std::move(channel_);
  auto record_for = [&](const std::string& path) -> const ServerRecord* {
    for (const ServerRecord& r : snapshot_.servers) {
      if (r.path == path) return &r;
    }
    return nullptr;
  };
  std::lock_guard<std::mutex> lock(pending_->mu);
  // Records no server here claims: their descriptors close with fds_.
  for (const ServerRecord& r : snapshot_.servers) {
    bool claimed = false;
    for (Server* s : servers) claimed = claimed || s->path() == r.path;
    if (!claimed) {
      spdlog::error(
          "vdev: the predecessor served {}, which this process does not; its front-end "
          "loses the device",
          r.path);
      pending_->lost.push_back(r.path);
    }
  }
  // From the first session resumed on, the predecessor must not thaw: a
  // server that fails now loses its front-end rather than the whole process
  // giving up.
  bool all_started = true;
  for (Server* s : servers) {
    std::string e;
    const ServerRecord* record = record_for(s->path());
    if (record == nullptr) {
      if (!s->Start(&e)) {
        spdlog::error("vdev: {}", e);
        *error = e;
        all_started = false;
      }
      continue;
    }
    pending_->waiting++;
    auto done = [pending = pending_, path = s->path()](const Error& why) {
      pending->Done(path, why);
    };
    if (!s->StartFrom(*record, fds_, done, &e)) {
      pending_->waiting--;
      spdlog::error("vdev: could not take {} over ({}); its front-end loses the device", s->path(),
                    e);
      pending_->lost.push_back(s->path());
      *error = e;
      all_started = false;
    }
  }
  // Every session rebuilt already (or none to rebuild): answer now.
  if (pending_->waiting == 0) pending_->SendServing();
  return all_started;
}

}  // namespace vdev
