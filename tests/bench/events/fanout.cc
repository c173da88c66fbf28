#include "fanout.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace hz::events::bench {

uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

Percentiles Summarise(std::vector<uint64_t>& samples) {
  Percentiles p;
  p.count = samples.size();
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
    return static_cast<double>(samples[std::min(i, samples.size() - 1)]) / 1000.0;
  };
  p.p50_us = at(0.50);
  p.p99_us = at(0.99);
  p.max_us = static_cast<double>(samples.back()) / 1000.0;
  double sum = 0;
  for (uint64_t s : samples) sum += static_cast<double>(s);
  p.mean_us = sum / static_cast<double>(samples.size()) / 1000.0;
  return p;
}

void StampPayload(EventSpec* spec, uint64_t ns) {
  std::memcpy(spec->payload.data(), &ns, sizeof ns);
}

uint64_t StampOf(const hz_event& event) {
  uint64_t ns;
  std::memcpy(&ns, event.payload, sizeof ns);
  return ns;
}

namespace {

// Models the service's event loop: notifications queue the tenant, one
// thread drains it and fills "buffers" by calling Next().
class Consumer {
 public:
  explicit Consumer(std::vector<std::unique_ptr<Delivery>>* deliveries)
      : deliveries_(deliveries), thread_([this] { Run(); }) {}
  ~Consumer() { Stop(); }
  // Drains what is queued, then joins the thread.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  void Wake(int tenant) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(tenant);
    }
    cv_.notify_one();
  }
  uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }
  uint64_t last_delivery_ns() const { return last_ns_.load(std::memory_order_acquire); }
  std::vector<uint64_t> TakeSamples() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(samples_);
  }

 private:
  void Run() {
    std::vector<uint64_t> local;
    for (;;) {
      int tenant;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !ready_.empty(); });
        if (ready_.empty()) {
          samples_.insert(samples_.end(), local.begin(), local.end());
          return;
        }
        tenant = ready_.front();
        ready_.pop_front();
      }
      hz_event ev;
      while ((*deliveries_)[static_cast<size_t>(tenant)]->Next(&ev)) {
        uint64_t now = SteadyNowNs();
        local.push_back(now - StampOf(ev));
        last_ns_.store(now, std::memory_order_release);
        delivered_.fetch_add(1, std::memory_order_acq_rel);
      }
      if (local.size() >= 4096) {
        std::lock_guard<std::mutex> lock(mu_);
        samples_.insert(samples_.end(), local.begin(), local.end());
        local.clear();
      }
    }
  }

  std::vector<std::unique_ptr<Delivery>>* deliveries_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> ready_;
  bool stop_ = false;
  std::vector<uint64_t> samples_;
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> last_ns_{0};
  std::thread thread_;
};

}  // namespace

Status RunEngineFanout(const FanoutConfig& config, FanoutResult* result) {
  BusOptions o;
  o.dir = config.dir;
  o.retention = 1u << 16;
  o.fsync = config.fsync;
  std::unique_ptr<EventBus> bus;
  Status s = EventBus::Open(o, &bus);
  if (!s.ok()) return s;

  std::vector<TenantId> names;
  std::vector<std::unique_ptr<Delivery>> deliveries(static_cast<size_t>(config.tenants));
  for (int t = 0; t < config.tenants; ++t) names.push_back(TenantId("tenant-" + std::to_string(t)));
  auto consumer = std::make_unique<Consumer>(&deliveries);
  for (int t = 0; t < config.tenants; ++t) {
    s = bus->Connect(names[static_cast<size_t>(t)], "guest", &deliveries[static_cast<size_t>(t)]);
    if (!s.ok()) return s;
    hz_event_subscribe_result r{};
    s = deliveries[static_cast<size_t>(t)]->Subscribe({HZ_TOPIC_ALL, HZ_SEQ_CURSOR}, &r);
    if (!s.ok()) return s;
    Consumer* c = consumer.get();
    deliveries[static_cast<size_t>(t)]->SetNotify([c, t] { c->Wake(t); });
  }

  std::mt19937_64 rng(config.seed);
  EventSpec spec;
  spec.topic = HZ_TOPIC_CAPACITY;
  const uint64_t start = SteadyNowNs();
  const double gap_ns = config.rate > 0 ? 1e9 / config.rate : 0;
  for (uint64_t i = 0; i < config.events; ++i) {
    size_t t = config.closed_loop ? rng() % names.size() : i % names.size();
    if (!config.closed_loop && gap_ns > 0) {
      const uint64_t due = start + static_cast<uint64_t>(gap_ns * static_cast<double>(i));
      while (SteadyNowNs() < due) std::this_thread::yield();
    }
    StampPayload(&spec, SteadyNowNs());
    s = bus->Publish(names[t], spec, nullptr);
    if (!s.ok()) return s;
    if (config.closed_loop) {
      while (consumer->delivered() < i + 1) std::this_thread::yield();
    }
  }
  while (consumer->delivered() < config.events) std::this_thread::yield();
  const uint64_t end = consumer->last_delivery_ns();
  consumer->Stop();
  std::vector<uint64_t> samples = consumer->TakeSamples();
  for (auto& d : deliveries) d.reset();
  consumer.reset();

  result->latency = Summarise(samples);
  result->seconds = static_cast<double>(end - start) / 1e9;
  result->events_per_s =
      result->seconds > 0 ? static_cast<double>(config.events) / result->seconds : 0;
  return Status::Ok();
}

Percentiles MeasurePolling(const std::string& path, int seconds, int period_ms, uint64_t seed) {
  std::atomic<bool> stop{false};
  std::mt19937_64 rng(seed);
  // Writer: updates the "metadata document" at random moments, one per period
  // on average, each carrying its write time.
  std::thread writer([&] {
    uint64_t n = 0;
    while (!stop.load()) {
      std::uniform_int_distribution<int> gap(period_ms / 2, period_ms * 3 / 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(gap(rng)));
      if (stop.load()) break;
      std::string tmp = path + ".tmp";
      {
        std::ofstream f(tmp, std::ios::trunc);
        f << ++n << " " << SteadyNowNs() << "\n";
      }
      std::rename(tmp.c_str(), path.c_str());
    }
  });
  std::vector<uint64_t> samples;
  uint64_t last_seen = 0;
  const uint64_t end = SteadyNowNs() + static_cast<uint64_t>(seconds) * 1000000000ull;
  auto next = std::chrono::steady_clock::now();
  while (SteadyNowNs() < end) {
    next += std::chrono::milliseconds(period_ms);
    std::this_thread::sleep_until(next);
    std::ifstream f(path);
    uint64_t n = 0, ts = 0;
    if (f >> n >> ts && n != last_seen) {
      // Only the latest update is visible to a poller; earlier ones in the
      // same period are overwritten (another cost of polling).
      samples.push_back(SteadyNowNs() - ts);
      last_seen = n;
    }
  }
  stop = true;
  writer.join();
  return Summarise(samples);
}

}  // namespace hz::events::bench
