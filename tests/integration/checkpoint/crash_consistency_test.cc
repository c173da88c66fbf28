// SIGKILL a persisting engine at random points, many times; after each kill a
// new engine on the same directory must restore every checkpoint reported
// durable (unless retention legitimately replaced it), list nothing partial,
// and leave no temporary files behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <string>

#include "crash_state.h"

namespace hz::checkpoint {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout
};

Child Spawn(const std::string& root) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execl(HZ_CKPT_PERSIST_LOOP, HZ_CKPT_PERSIST_LOOP, root.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

// Reads whatever the child wrote, appending complete "D <step>" lines.
void Drain(int fd, std::string* buf, std::set<uint64_t>* durable, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return;
  char tmp[4096];
  ssize_t n = read(fd, tmp, sizeof tmp);
  if (n <= 0) return;
  buf->append(tmp, static_cast<size_t>(n));
  size_t nl;
  while ((nl = buf->find('\n')) != std::string::npos) {
    std::string line = buf->substr(0, nl);
    buf->erase(0, nl + 1);
    if (line.size() > 2 && line[0] == 'D') durable->insert(std::stoull(line.substr(2)));
  }
}

// Files an interrupted persist may leave; none may survive a start-up.
std::vector<std::string> Leftovers(const std::string& root) {
  std::vector<std::string> bad;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp") bad.push_back(e.path());
    if (e.is_directory() && name.size() == 20 && !fs::exists(e.path() / "manifest.json")) {
      bad.push_back(e.path());
    }
  }
  return bad;
}

TEST(CheckpointCrash, SigkillDuringPersistNeverLosesOrTearsCheckpoints) {
  std::string root = std::string(HZ_CKPT_TEST_DIR) + "/crash-" + std::to_string(getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  std::mt19937 rng(12345);
  std::set<uint64_t> reported;  // every step ever reported durable
  const auto started = Clock::now();
  int iterations = 0, kills_after_progress = 0;
  for (; iterations < 30 && Clock::now() - started < std::chrono::seconds(60); ++iterations) {
    Child c = Spawn(root);
    ASSERT_GT(c.pid, 0);
    std::string buf;
    size_t before = reported.size();
    // Kill at a random point: every fifth time blindly (often during
    // start-up or recovery), otherwise a random time after the child's first
    // durable checkpoint of this run, while it keeps saving and persisting.
    if (iterations % 5 != 0) {
      auto give_up = Clock::now() + std::chrono::seconds(20);  // hang guard only
      while (reported.size() == before && Clock::now() < give_up) {
        Drain(c.out, &buf, &reported, 5);
      }
    }
    int delay_ms = std::uniform_int_distribution<int>(0, 120)(rng);
    auto kill_at = Clock::now() + std::chrono::milliseconds(delay_ms);
    while (Clock::now() < kill_at) Drain(c.out, &buf, &reported, 5);
    kill(c.pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
    // A child that exited by itself failed: that is a bug, not a crash point.
    ASSERT_TRUE(WIFSIGNALED(status)) << "persist loop exited with " << WEXITSTATUS(status);
    for (int i = 0; i < 100; ++i)
      Drain(c.out, &buf, &reported, 0);  // lines written before the kill
    close(c.out);
    kills_after_progress += reported.size() > before;

    // A fresh engine on the same directory.
    std::unique_ptr<Engine> eng;
    Status err = Engine::Open(crash::LoopConfig(root), &eng);
    ASSERT_TRUE(err.ok()) << err;
    EXPECT_TRUE(Leftovers(root).empty()) << Leftovers(root).front();
    std::vector<ListEntry> entries;
    bool more = false;
    if (reported.empty()) continue;
    ASSERT_EQ(eng->List(crash::kTenant, crash::kStream, 0, 1000, &entries, &more).code(),
              StatusCode::kOk);
    EXPECT_LE(entries.size(), crash::kRetention);
    std::set<uint64_t> listed;
    for (const ListEntry& e : entries) {
      EXPECT_EQ(e.state, CkptState::kDurable);
      listed.insert(e.step);
      // Every listed checkpoint is complete: it restores bit-exact.
      auto expect = crash::StateFor(e.step);
      std::vector<std::vector<uint8_t>> out;
      std::vector<IoSpan> spans;
      for (auto& s : expect) out.emplace_back(s.size(), 0);
      for (auto& s : out) spans.push_back({s.data(), s.size()});
      RestoreResult rr;
      ASSERT_EQ(eng->Restore({crash::kTenant, crash::kStream, e.step, spans}, &rr).code(),
                StatusCode::kOk)
          << "step " << e.step << " iteration " << iterations;
      EXPECT_EQ(out, expect) << "step " << e.step;
      EXPECT_EQ(rr.meta, crash::MetaFor(e.step));
    }
    // A reported step may be missing only if retention replaced it, i.e.
    // at least kRetention newer checkpoints are listed.
    for (uint64_t s : reported) {
      if (listed.count(s) != 0) continue;
      size_t newer = 0;
      for (uint64_t l : listed) newer += l > s;
      EXPECT_GE(newer, crash::kRetention) << "durable step " << s << " lost";
    }
    // The newest reported step is always there.
    EXPECT_EQ(listed.count(*reported.rbegin()), 1u) << *reported.rbegin();
  }
  RecordProperty("iterations", iterations);
  RecordProperty("durable_steps", static_cast<int>(reported.size()));
  EXPECT_GE(iterations, 10);
  // The kills must have hit a persisting engine, not only start-ups.
  EXPECT_GE(kills_after_progress, iterations / 2);
  fs::remove_all(root);
}

}  // namespace
}  // namespace hz::checkpoint
