// Coarse values: every number an event carries goes through one of these
// helpers, so no publisher can leak a precise physical figure by accident.
#ifndef HZ_EVENTS_COARSE_H_
#define HZ_EVENTS_COARSE_H_

#include <cstdint>
#include <map>
#include <string>

namespace hz::events {

// Times and deadlines are unix seconds rounded down to this granularity.
inline constexpr uint64_t kTimeGranularityS = 10;

constexpr uint64_t RoundDownTime(uint64_t unix_s) {
  return unix_s - unix_s % kTimeGranularityS;
}

// Congestion of a shared resource, from its utilisation.
enum CongestionLevel : uint8_t {
  kCongestionNone = 0,      // utilisation < 50 %
  kCongestionLight = 1,     // 50 % <= utilisation < 80 %
  kCongestionModerate = 2,  // 80 % <= utilisation < 95 %
  kCongestionSevere = 3,    // utilisation >= 95 %
};

// `used` out of `capacity`; a zero capacity counts as fully used (severe).
CongestionLevel CongestionFromUtilisation(uint64_t used, uint64_t capacity);

// Device counts are published as power-of-two buckets, each reported as its
// lower bound: 0 -> 0, 1 -> 1, 2..3 -> 2, 4..7 -> 4, 8..15 -> 8, ...
uint64_t CapacityBucket(uint64_t count);

// Energy state of the host's power budget.
enum EnergyLevel : uint8_t {
  kEnergyNormal = 0,       // draw < 80 % of the budget
  kEnergyConstrained = 1,  // 80 % <= draw < 95 %
  kEnergyCritical = 2,     // draw >= 95 %
};

// `draw` out of `budget`; a zero budget counts as critical.
EnergyLevel EnergyFromDraw(uint64_t draw, uint64_t budget);

// Rate limit and hysteresis for published levels (SPEC.md §8.3.4, §8.3.5):
// a value is published only when it differs from the last published one, and
// at most once per `min_interval_s` per key. A change held back is published
// by a later Update() once the interval has passed, so publishers call Update
// on every sample. Keys are the publisher's (for example tenant + device kind).
class ChangeFilter {
 public:
  explicit ChangeFilter(uint64_t min_interval_s) : interval_(min_interval_s) {}
  // True when `value` should be published now for `key`; it then counts as published.
  bool Update(const std::string& key, uint64_t value, uint64_t now);

 private:
  struct Last {
    uint64_t value = 0;
    uint64_t time = 0;
  };
  uint64_t interval_;
  std::map<std::string, Last> last_;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_COARSE_H_
