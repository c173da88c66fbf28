// The state the persist loop saves at each step, derived from the step alone
// so the checker can rebuild it after a crash.
#ifndef HZ_TESTS_CHECKPOINT_CRASH_STATE_H_
#define HZ_TESTS_CHECKPOINT_CRASH_STATE_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hz/checkpoint/engine.h"

namespace hz::checkpoint::crash {

inline const TenantId kTenant("tenant3");
inline constexpr StreamId kStream = 1;
inline constexpr uint32_t kRetention = 4;

inline EngineConfig LoopConfig(const std::string& root) {
  EngineConfig c;
  c.root = root;
  c.chunk_bytes = 256 << 10;
  c.staging_bytes = 16 << 20;
  c.memory_tier_bytes = 0;
  c.queue_depth = 8;
  c.copy_threads = 1;
  return c;
}

// Two slices of step-dependent sizes (neither aligned) and contents.
inline std::vector<size_t> SliceSizes(uint64_t step) {
  return {(1u << 20) + (step * 4099) % 200000, 777 + (step % 13) * 1000};
}

inline std::vector<std::vector<uint8_t>> StateFor(uint64_t step) {
  std::vector<std::vector<uint8_t>> out;
  std::mt19937_64 rng(step * 0x9e3779b97f4a7c15ull + 7);
  for (size_t len : SliceSizes(step)) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i + 8 <= len; i += 8) {
      uint64_t x = rng();
      std::memcpy(v.data() + i, &x, 8);
    }
    for (size_t i = len / 8 * 8; i < len; ++i) v[i] = static_cast<uint8_t>(step + i);
    out.push_back(std::move(v));
  }
  return out;
}

inline std::vector<uint8_t> MetaFor(uint64_t step) {
  std::vector<uint8_t> m(16 + step % 50);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(step * 31 + i);
  return m;
}

}  // namespace hz::checkpoint::crash

#endif  // HZ_TESTS_CHECKPOINT_CRASH_STATE_H_
