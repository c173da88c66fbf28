// upgrade_pause_bench: how long a front-end goes unserved while
// vdev-echo-backend upgrades itself live (SIGUSR2, vdev/upgrade.h), next to
// the same loop's p99 round trip outside upgrades, in the same run.
//
// A virtio-user front-end echoes 1 KiB requests one at a time and stamps each
// completion. For each upgrade, the pause is the longest gap between two
// completions that spans any part of it (from the signal to the old process's
// exit). Output: one JSON object on stdout, per upgrade and the median.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend_harness.h"
#include "vdev/frontend/virtio_user.h"

namespace {

using Clock = std::chrono::steady_clock;
using vdev::frontend::Buffer;
using vdev::frontend::Completion;
using vdev::frontend::Status;
using vdev::frontend::VirtioUser;

constexpr size_t kMsg = 1024;
constexpr size_t kMaxCompletions = 1u << 22;
// Gaps this close after an upgrade are left out of the reference: the new
// process's first requests (cold caches, first page faults) are part of it.
constexpr auto kAfterUpgrade = std::chrono::milliseconds(50);

int64_t Ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// One request in flight at a time, with buffers set up once, so that a gap
// between completions is one round trip unless the back-end was not serving.
class EchoLoop {
 public:
  Status Connect(const std::string& path) {
    VirtioUser::Options o;
    o.num_queues = 1;
    o.queue_size = 64;
    o.memory_size = 2 << 20;
    Status s;
    for (int i = 0; i < 200; ++i) {
      s = dev_.Connect(path, o);
      if (s.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!s.ok()) return s;
    in_ = static_cast<uint8_t*>(dev_.Allocate(kMsg, &req_.gpa));
    out_ = static_cast<uint8_t*>(dev_.Allocate(kMsg, &resp_.gpa));
    req_.len = resp_.len = kMsg;
    completions_.reserve(kMaxCompletions);
    return s;
  }

  void Run() {
    for (uint64_t i = 0; !stop_.load(std::memory_order_relaxed); ++i) {
      if (std::string e = EchoOnce(static_cast<uint8_t>(i)); !e.empty()) {
        error_ = "request " + std::to_string(i) + ": " + e;
        return;
      }
      if (completions_.size() == kMaxCompletions) {
        error_ = "more completions than the bench keeps";
        return;
      }
      completions_.push_back(Ns(Clock::now()));
    }
  }
  void Stop() { stop_ = true; }
  const std::string& error() const { return error_; }
  const std::vector<int64_t>& completions() const { return completions_; }

 private:
  std::string EchoOnce(uint8_t tag) {
    std::memset(in_, tag, kMsg);
    const vdev::frontend::ChainBuffers chain{{&req_, 1}, {&resp_, 1}, tag};
    size_t added = 0;
    Status s = dev_.AddChains(0, {&chain, 1}, &added);
    if (s.ok()) s = dev_.Kick(0);
    Completion c{};
    size_t n = 0;
    if (s.ok()) s = dev_.WaitUsed(0, std::chrono::seconds(10), &c, 1, &n);
    if (!s.ok()) return s.ToString();
    if (n != 1 || c.cookie != tag || c.len != kMsg) return "bad completion";
    if (std::memcmp(in_, out_, kMsg) != 0) return "the response differs from the request";
    return {};
  }

  VirtioUser dev_;
  Buffer req_{}, resp_{};
  uint8_t* in_ = nullptr;
  uint8_t* out_ = nullptr;
  std::atomic<bool> stop_{false};
  std::string error_;
  std::vector<int64_t> completions_;
};

struct Window {
  int64_t begin_ns;  // SIGUSR2 sent
  int64_t end_ns;    // the old process exited
};

// The longest gap between consecutive completions overlapping the window.
int64_t LongestGap(const std::vector<int64_t>& c, const Window& w) {
  int64_t longest = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    if (c[i] >= w.begin_ns && c[i - 1] <= w.end_ns) longest = std::max(longest, c[i] - c[i - 1]);
  }
  return longest;
}

// Round trips (gaps) outside every upgrade and the requests just after it.
std::vector<int64_t> NormalGaps(const std::vector<int64_t>& c, const std::vector<Window>& windows) {
  const int64_t after = std::chrono::nanoseconds(kAfterUpgrade).count();
  std::vector<int64_t> out;
  for (size_t i = 1; i < c.size(); ++i) {
    bool near_upgrade = false;
    for (const Window& w : windows) {
      near_upgrade |= c[i] >= w.begin_ns && c[i - 1] <= w.end_ns + after;
    }
    if (!near_upgrade) out.push_back(c[i] - c[i - 1]);
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const auto k = static_cast<size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

int Fail(const std::string& error) {
  std::printf("%s\n",
              nlohmann::json{{"bench", "vdev_upgrade_pause"}, {"error", error}}.dump().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vdev live-upgrade pause benchmark"};
  int upgrades = 10;
  int settle_ms = 300;
  app.add_option("--upgrades", upgrades, "upgrades to measure (default 10)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--settle-ms", settle_ms,
                 "echo time before each upgrade and after the last (default 300)")
      ->check(CLI::Range(10, 60000));
  CLI11_PARSE(app, argc, argv);

  const std::string path = "/tmp/vdev-upgrade-bench-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  std::string error;
  std::vector<Window> windows;
  EchoLoop loop;
  {
    vdev::testing::UpgradableBackend backend(path);  // forked before this process starts threads
    if (Status s = loop.Connect(path); !s.ok()) return Fail("connect: " + s.ToString());
    std::thread echo([&] { loop.Run(); });
    const auto settle = std::chrono::milliseconds(settle_ms);
    for (int i = 0; i < upgrades && error.empty() && loop.error().empty(); ++i) {
      std::this_thread::sleep_for(settle);
      Window w{Ns(Clock::now()), 0};
      error = backend.Upgrade();
      w.end_ns = Ns(Clock::now());
      windows.push_back(w);
    }
    std::this_thread::sleep_for(settle);
    loop.Stop();
    echo.join();
  }
  unlink(path.c_str());
  if (!error.empty()) return Fail(error);
  if (!loop.error().empty()) return Fail(loop.error());

  const std::vector<int64_t>& c = loop.completions();
  std::vector<double> normal;
  for (int64_t gap : NormalGaps(c, windows)) normal.push_back(static_cast<double>(gap) / 1000.0);
  const double p99_us = Percentile(normal, 0.99);
  if (normal.empty() || p99_us <= 0) return Fail("no round trips outside the upgrades");
  nlohmann::json per_upgrade = nlohmann::json::array();
  std::vector<double> pauses;
  for (const Window& w : windows) {
    const double pause_us = static_cast<double>(LongestGap(c, w)) / 1000.0;
    if (pause_us <= 0) return Fail("no request completed across an upgrade");
    pauses.push_back(pause_us);
    per_upgrade.push_back({{"pause_us", pause_us},
                           {"pause_over_p99", pause_us / p99_us},
                           {"upgrade_ms", static_cast<double>(w.end_ns - w.begin_ns) / 1e6}});
  }
  const double median_pause = Percentile(pauses, 0.5);
  nlohmann::json result = {{"bench", "vdev_upgrade_pause"},
                           {"message_bytes", kMsg},
                           {"upgrades", upgrades},
                           {"requests", c.size()},
                           {"p50_us", Percentile(normal, 0.5)},
                           {"p99_us", p99_us},
                           {"pause_us", median_pause},
                           {"pause_over_p99", median_pause / p99_us},
                           {"per_upgrade", per_upgrade}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
