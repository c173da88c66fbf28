// The operator's energy schedule for this host (hzctl energy schedule):
// time windows, each with an energy level (SPEC.md §8.5: 0 normal,
// 1 constrained, 2 critical) and what drives it (§8.3.9's sources: power
// budget, price, carbon). Outside every window the level is normal; where
// windows overlap the highest level wins, with the sources of the windows
// at that level. The operator maps a price or carbon forecast, or a power
// cap, onto these levels (README.md, the operator section, says how).
#ifndef HZ_SERVICE_ENERGY_SCHEDULE_H_
#define HZ_SERVICE_ENERGY_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::service {

struct EnergyWindow {
  uint64_t start_s = 0;  // unix seconds, inclusive
  uint64_t end_s = 0;    // unix seconds, exclusive
  uint8_t level = 0;     // events::EnergyLevel
  uint8_t sources = 0;   // events::kEnergySource* bits
};

struct EnergyCondition {
  uint8_t level = 0;
  uint8_t sources = 0;
  friend bool operator==(const EnergyCondition&, const EnergyCondition&) = default;
};

class EnergySchedule {
 public:
  static constexpr size_t kMaxWindows = 4096;

  // {"windows": [{"start_s", "end_s", "level", "sources"}, ...]}: level is
  // 0..2 or "normal", "constrained", "critical"; sources a list of "power",
  // "price", "carbon" (may be empty). kInvalidArgument naming the window
  // and the field otherwise.
  static StatusOr<EnergySchedule> FromJson(const nlohmann::json& j);
  nlohmann::json ToJson() const;

  // <state_dir>/energy.json: an empty schedule when the file does not
  // exist; an error naming the file when it cannot be read or parsed.
  static StatusOr<EnergySchedule> Load(const std::string& path);
  Status Save(const std::string& path) const;  // WriteFileAtomic

  EnergyCondition At(uint64_t unix_s) const;
  // The first window edge after unix_s (where At may change); 0: none.
  uint64_t NextChange(uint64_t unix_s) const;
  const std::vector<EnergyWindow>& windows() const { return windows_; }

 private:
  std::vector<EnergyWindow> windows_;  // sorted by start
};

const char* EnergyLevelName(uint8_t level);
nlohmann::json EnergySourceNames(uint8_t sources);

}  // namespace hz::service

#endif  // HZ_SERVICE_ENERGY_SCHEDULE_H_
