// events_bench: publish-to-delivery latency and throughput of the event bus
// with 1, 100 and 1000 subscribing tenants, against the reference a tenant
// has today: polling a metadata endpoint once per second. Prints one JSON
// object per result.
#include <stdlib.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "fanout.h"

using hz::events::FsyncPolicy;
using hz::events::bench::FanoutConfig;
using hz::events::bench::FanoutResult;
using hz::events::bench::Percentiles;

namespace {

std::string MakeTempDir(const std::string& base) {
  std::string t = base + "/hz-events-bench-XXXXXX";
  if (mkdtemp(t.data()) == nullptr) {
    std::cerr << "mkdtemp failed under " << base << "\n";
    exit(1);
  }
  return t;
}

void RaiseFileLimit() {
  // One log file per tenant stays open.
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

nlohmann::json LatencyJson(const Percentiles& p) {
  return {{"samples", p.count},
          {"p50_us", p.p50_us},
          {"p99_us", p.p99_us},
          {"mean_us", p.mean_us},
          {"max_us", p.max_us}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"HarmonAIze event-bus benchmark"};
  std::string base = getenv("TMPDIR") != nullptr ? getenv("TMPDIR") : "/tmp";
  std::vector<int> tenant_counts = {1, 100, 1000};
  uint64_t latency_events = 5000;
  uint64_t throughput_events = 50000;
  double paced_rate = 20000;
  int poll_seconds = 4;
  bool fsync_always = false;
  bool long_run = false;
  app.add_option("--dir", base, "directory for the bus's files");
  app.add_option("--tenants", tenant_counts, "subscribing tenant counts to run");
  app.add_option("--latency-events", latency_events, "closed-loop events per tenant count");
  app.add_option("--throughput-events", throughput_events, "open-loop events per tenant count");
  app.add_option("--paced-rate", paced_rate, "events/s of the paced open-loop run");
  app.add_option("--poll-seconds", poll_seconds, "seconds of real 1 Hz polling (0: model only)");
  app.add_flag("--fsync", fsync_always, "fdatasync every append (default: page cache only)");
  app.add_flag("--long", long_run, "ten times more events and 20 s of polling");
  CLI11_PARSE(app, argc, argv);
  if (long_run) {
    latency_events *= 10;
    throughput_events *= 10;
    poll_seconds = 20;
  }
  RaiseFileLimit();

  // Reference 1: the model of 1 Hz polling. An event lands uniformly within
  // the polling period, so the delay is uniform on [0, 1 s).
  Percentiles model;
  model.p50_us = 500000;
  model.mean_us = 500000;
  model.p99_us = 990000;
  model.max_us = 1000000;
  nlohmann::json ref = LatencyJson(model);
  ref["bench"] = "events";
  ref["name"] = "poll_1hz_model";
  std::cout << ref.dump() << std::endl;

  // Reference 2: a real 1 Hz poll loop over a local metadata file.
  Percentiles measured{};
  if (poll_seconds > 0) {
    std::string dir = MakeTempDir(base);
    measured = hz::events::bench::MeasurePolling(dir + "/metadata", poll_seconds, 1000, 7);
    std::filesystem::remove_all(dir);
    nlohmann::json j = LatencyJson(measured);
    j["bench"] = "events";
    j["name"] = "poll_1hz_measured";
    j["seconds"] = poll_seconds;
    std::cout << j.dump() << std::endl;
  }

  int rc = 0;
  for (int tenants : tenant_counts) {
    // Closed loop: one event in flight, the bare latency. Paced: latency under
    // a steady load. Saturated: as fast as possible, the throughput (its
    // latencies are mostly queueing behind the backlog).
    for (int mode = 0; mode < 3; ++mode) {
      const bool closed = mode == 0;
      const bool paced = mode == 1;
      FanoutConfig c;
      c.dir = MakeTempDir(base);
      c.tenants = tenants;
      c.events = mode == 2 ? throughput_events : latency_events;
      c.closed_loop = closed;
      c.rate = paced ? paced_rate : 0;
      c.fsync = fsync_always ? FsyncPolicy::kAlways : FsyncPolicy::kNone;
      FanoutResult r;
      hz::Status s = hz::events::bench::RunEngineFanout(c, &r);
      std::filesystem::remove_all(c.dir);
      if (!s.ok()) {
        std::cerr << "run with " << tenants << " tenants failed: " << s.ToString() << "\n";
        rc = 1;
        continue;
      }
      nlohmann::json j = LatencyJson(r.latency);
      j["bench"] = "events";
      j["name"] = closed ? "engine_latency" : paced ? "engine_latency_paced" : "engine_throughput";
      if (paced) j["rate"] = paced_rate;
      j["tenants"] = tenants;
      j["events"] = c.events;
      j["fsync"] = fsync_always ? "always" : "none";
      j["events_per_s"] = r.events_per_s;
      // Ratios against the references of this run (higher is better). A 1 Hz
      // poller sees at most one update per tenant per second.
      if (mode == 2) {
        j["ratio_vs_poll_rate"] = r.events_per_s / tenants;
      } else if (r.latency.p50_us > 0) {
        j["ratio_vs_poll_model_mean"] = model.mean_us / r.latency.mean_us;
        j["ratio_vs_poll_model_p99"] = model.p99_us / r.latency.p99_us;
        if (measured.count > 0) {
          j["ratio_vs_poll_measured_mean"] = measured.mean_us / r.latency.mean_us;
        }
      }
      std::cout << j.dump() << std::endl;
    }
  }
  return rc;
}
