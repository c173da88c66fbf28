// upgrade_pause_bench: how long tenants go unserved while harmonaized
// upgrades itself live (hzctl upgrade, SPEC.md §2.9), or with --crash while
// it is killed (SIGKILL) and restarted with its fd store (SPEC.md §2.10),
// next to the same all-reduce loop's p99 outside those events, in the same
// run.
//
// Two rank processes on virtio-user run a verified 1 KiB fp32 all-reduce
// loop on one communicator; rank 0 stamps each completion. For each event,
// the pause is the longest gap between two completions that spans any part
// of it (from the request, or the kill, to the new process answering on the
// control socket). After a crash the ranks form a new communicator first,
// which is part of what a tenant waits for. The reference is the p99 gap
// outside the events. Output: one JSON object on stdout, per event and the
// median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "allreduce_loop.h"
#include "service_harness.h"

namespace {

using Clock = std::chrono::steady_clock;
using hz::testing::AllReduceLoop;

constexpr uint64_t kCount = 256;  // 1 KiB of fp32
// Gaps this close after an upgrade are left out of the reference: the new
// process's first collectives (cold caches, first page faults) are its part.
constexpr int64_t kAfterUpgradeNs = 50'000'000;

int64_t Ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct Window {
  int64_t from, to;  // the upgrade, ns
};

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Kills the service and starts it again with its store, after the delay a
// service manager waits (systemd's RestartSec=).
bool Crash(hz::testing::ServiceProcess& svc, int restart_delay_ms) {
  svc.Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(restart_delay_ms));
  return svc.Start({"--fd-store"});
}

nlohmann::json Report(const std::vector<int64_t>& stamps, const std::vector<Window>& windows,
                      bool crash, int restart_delay_ms) {
  std::vector<int64_t> reference;
  std::vector<int64_t> pauses(windows.size(), 0);
  for (size_t i = 1; i < stamps.size(); ++i) {
    const int64_t a = stamps[i - 1], b = stamps[i], gap = b - a;
    bool near_event = false;
    for (size_t w = 0; w < windows.size(); ++w) {
      if (b >= windows[w].from && a <= windows[w].to) pauses[w] = std::max(pauses[w], gap);
      near_event = near_event || (b >= windows[w].from && a <= windows[w].to + kAfterUpgradeNs);
    }
    if (!near_event) reference.push_back(gap);
  }
  std::sort(reference.begin(), reference.end());
  const int64_t p99 = reference.empty() ? 0 : reference[reference.size() * 99 / 100];
  nlohmann::json per = nlohmann::json::array();
  for (size_t w = 0; w < windows.size(); ++w) {
    per.push_back(
        {{"pause_us", pauses[w] / 1000},
         {"pause_over_p99", p99 > 0 ? static_cast<double>(pauses[w]) / p99 : 0.0},
         {crash ? "restart_ms" : "upgrade_ms", (windows[w].to - windows[w].from) / 1000000}});
  }
  const int64_t median = Median(pauses);
  nlohmann::json out = {{"bench", crash ? "service_crash_pause" : "service_upgrade_pause"},
                        {"ranks", 2},
                        {"bytes", kCount * 4},
                        {crash ? "crashes" : "upgrades", windows.size()},
                        {"requests", stamps.size()},
                        {"p99_us", p99 / 1000.0},
                        {"pause_us", median / 1000},
                        {"pause_over_p99", p99 > 0 ? static_cast<double>(median) / p99 : 0.0},
                        {"goal_pause_us", crash ? 1000 * (restart_delay_ms + 200) : 100000},
                        {crash ? "per_crash" : "per_upgrade", per}};
  if (crash) out["restart_delay_ms"] = restart_delay_ms;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tenant-visible pause of a live upgrade, or a crash, of harmonaized"};
  int events = 10;
  int settle_ms = 500;
  bool crash = false;
  int restart_delay_ms = 100;
  app.add_option("--upgrades", events, "upgrades (or crashes) to measure")
      ->check(CLI::Range(1, 1000));
  app.add_option("--settle-ms", settle_ms, "loop time before and after each event")
      ->check(CLI::Range(10, 60000));
  app.add_flag("--crash", crash, "SIGKILL and restart the service instead of upgrading it");
  app.add_option("--restart-delay-ms", restart_delay_ms,
                 "with --crash: the wait before the restart (systemd's default RestartSec=)")
      ->check(CLI::Range(0, 60000));
  CLI11_PARSE(app, argc, argv);

  hz::testing::ServiceProcess svc;
  hz::testing::FakeServiceManager manager(svc.dir() + "/notify.sock");
  if (crash) svc.set_service_manager(&manager);
  if (!svc.Start(crash ? std::vector<std::string>{"--fd-store"} : std::vector<std::string>{})) {
    std::fprintf(stderr, "harmonaized did not start\n");
    return 1;
  }
  std::vector<std::string> vms = svc.TenantWithVms("t1", 2);
  AllReduceLoop loop(2, kCount, 1u << 22, /*re_form=*/crash);
  hz::testing::LoopRanks ranks(loop, vms);
  std::vector<Window> windows;
  std::string error;
  bool ok = loop.ProgressTo(100);
  for (int u = 0; ok && u < events; ++u) {
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    const auto from = Clock::now();
    ok = crash ? Crash(svc, restart_delay_ms) : svc.Upgrade(&error) > 0;
    windows.push_back({Ns(from), Ns(Clock::now())});
    ok = ok && loop.ProgressTo(loop.Slowest() + 10);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  const std::vector<int> codes = ranks.Finish();
  svc.Terminate();
  if (!ok || codes != std::vector<int>{0, 0}) {
    std::fprintf(stderr, "the loop did not run through the events: %s\n", error.c_str());
    return 1;
  }
  std::printf("%s\n", Report(loop.Stamps(), windows, crash, restart_delay_ms).dump().c_str());
  return 0;
}
