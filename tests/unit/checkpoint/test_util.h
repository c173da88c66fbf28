// Shared helpers for the checkpoint engine's tests.
#ifndef HZ_TESTS_CHECKPOINT_TEST_UTIL_H_
#define HZ_TESTS_CHECKPOINT_TEST_UTIL_H_

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/checkpoint/engine.h"

namespace hz::checkpoint::testing {

// A fresh directory on the build tree's filesystem, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    static std::atomic<int> counter{0};
    path_ = std::string(HZ_CKPT_TEST_DIR) + "/" + name + "-" + std::to_string(getpid()) + "-" +
            std::to_string(counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Deterministic bytes from a seed, so restored data is checked byte by byte.
inline std::vector<uint8_t> Pattern(size_t len, uint64_t seed) {
  std::vector<uint8_t> v(len);
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < len; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

inline std::vector<IoSpan> Spans(std::vector<std::vector<uint8_t>>& bufs) {
  std::vector<IoSpan> s;
  for (auto& b : bufs) s.push_back(IoSpan{b.data(), b.size()});
  return s;
}

// Buffers of the given sizes, each filled from (seed, index).
inline std::vector<std::vector<uint8_t>> MakeState(const std::vector<size_t>& sizes,
                                                   uint64_t seed) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back(Pattern(sizes[i], seed * 1000 + i));
  return out;
}

inline std::vector<std::vector<uint8_t>> ZeroState(const std::vector<size_t>& sizes) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t s : sizes) out.emplace_back(s, 0);
  return out;
}

struct RecordedEvent {
  TenantId tenant;
  EventKind kind;
  StreamId stream;
  uint64_t step;
};

class RecordingSink : public EventSink {
 public:
  void Publish(const TenantId& tenant, EventKind kind, StreamId stream, uint64_t step) override {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back({tenant, kind, stream, step});
  }
  void PublishEvent(const CheckpointEvent& e) override {
    if (e.flags & kJitFlagExisted) existed_flags_++;
    Publish(e.tenant, e.kind, e.stream, e.step);
  }
  size_t existed_flags() const { return existed_flags_.load(); }
  std::vector<RecordedEvent> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  size_t Count(EventKind kind, const TenantId& tenant, StreamId stream, uint64_t step) const {
    std::lock_guard<std::mutex> l(mu_);
    size_t n = 0;
    for (const auto& e : events_) {
      n += e.kind == kind && e.tenant == tenant && e.stream == stream && e.step == step;
    }
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::vector<RecordedEvent> events_;
  std::atomic<size_t> existed_flags_{0};
};

// A small engine configuration for tests: 64 KiB chunks, 4 MiB pool.
// SmallConfig's chunk: its staging pool holds 64 of them.
constexpr size_t kSmallChunkBytes = 64 << 10;

inline EngineConfig SmallConfig(const std::string& root, EventSink* sink = nullptr) {
  EngineConfig c;
  c.root = root;
  c.chunk_bytes = kSmallChunkBytes;
  c.staging_bytes = 4 << 20;
  c.memory_tier_bytes = 1 << 20;
  c.queue_depth = 8;
  c.copy_threads = 2;
  c.parallel_copy_min_bytes = 256 << 10;
  c.sink = sink;
  return c;
}

// The engine at config.root, or null (with *status saying why).
inline std::unique_ptr<Engine> OpenEngine(const EngineConfig& config, Status* status = nullptr) {
  std::unique_ptr<Engine> engine;
  Status s = Engine::Open(config, &engine);
  if (status != nullptr) *status = s;
  return engine;
}

// A tenant of the tests, "tenant<n>".
inline TenantId Tenant(uint64_t n) {
  return TenantId("tenant" + std::to_string(n));
}

// The directory the engine keeps a tenant's checkpoints in: its number in
// <root>/tenants.json. Empty when the tenant has none.
inline std::string TenantDir(const std::string& root, const TenantId& t) {
  std::ifstream in(root + "/tenants.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(t.name())) return {};
  return root + "/" + std::to_string(j[t.name()].get<uint64_t>());
}

// Gives a tenant a number by hand, as the engine records it, for tests that
// lay out a tenant's directory before the engine opens.
inline void NumberTenant(const std::string& root, const TenantId& t, TenantNo number) {
  nlohmann::json j = nlohmann::json::object();
  {
    std::ifstream in(root + "/tenants.json");
    if (in) j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  j[t.name()] = number;
  std::ofstream(root + "/tenants.json") << j.dump() << "\n";
}

inline std::string StepDir(const std::string& root, const TenantId& t, StreamId s, uint64_t step) {
  char buf[32];
  snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(step));
  return TenantDir(root, t) + "/" + std::to_string(s) + "/" + buf;
}

}  // namespace hz::checkpoint::testing

#endif  // HZ_TESTS_CHECKPOINT_TEST_UTIL_H_
