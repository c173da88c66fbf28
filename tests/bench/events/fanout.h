// A reusable publish-to-delivery harness. A publisher stamps each event's
// payload with a steady-clock time; a consumer, woken by the delivery's
// "events available" notification, reads records and records the delay.
// ConsumerFactory decides how records are read: the engine-level consumer
// calls Delivery::Next directly; an end-to-end consumer would read them from
// a guest's event queue instead.
#ifndef HZ_TESTS_BENCH_EVENTS_FANOUT_H_
#define HZ_TESTS_BENCH_EVENTS_FANOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hz/events/event_bus.h"

namespace hz::events::bench {

struct Percentiles {
  uint64_t count = 0;
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  double mean_us = 0;
};

// Sorts `samples_ns` and summarises it.
Percentiles Summarise(std::vector<uint64_t>& samples_ns);

uint64_t SteadyNowNs();

// Writes the publish time into an event payload and reads it back.
void StampPayload(EventSpec* spec, uint64_t ns);
uint64_t StampOf(const hz_event& event);

struct FanoutConfig {
  std::string dir;          // bus directory (fresh)
  int tenants = 1;          // one subscriber per tenant
  uint64_t events = 10000;  // events published in total
  bool closed_loop = true;  // wait for each delivery before the next publish
  double rate = 0;          // open loop: events/s to pace at (0: as fast as possible)
  FsyncPolicy fsync = FsyncPolicy::kNone;
  uint64_t seed = 1;
};

struct FanoutResult {
  Percentiles latency;
  double events_per_s = 0;  // delivered events / (last delivery - first publish)
  double seconds = 0;
};

// Runs one configuration at the engine level: Delivery::Next in a consumer
// thread woken by SetNotify.
Status RunEngineFanout(const FanoutConfig& config, FanoutResult* result);

// The reference: a poller that reads a file once per `period_ms` while a
// writer updates it at random times; the delay from write to the poller
// seeing it is recorded. Runs for about `seconds`.
Percentiles MeasurePolling(const std::string& path, int seconds, int period_ms, uint64_t seed);

}  // namespace hz::events::bench

#endif  // HZ_TESTS_BENCH_EVENTS_FANOUT_H_
