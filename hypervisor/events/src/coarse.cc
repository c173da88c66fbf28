#include "hz/events/coarse.h"

namespace hz::events {

namespace {
// used/capacity >= percent/100, without overflow or floating point.
bool AtLeast(uint64_t used, uint64_t capacity, unsigned percent) {
  return static_cast<unsigned __int128>(used) * 100 >=
         static_cast<unsigned __int128>(capacity) * percent;
}
}  // namespace

CongestionLevel CongestionFromUtilisation(uint64_t used, uint64_t capacity) {
  if (AtLeast(used, capacity, 95)) return kCongestionSevere;
  if (AtLeast(used, capacity, 80)) return kCongestionModerate;
  if (AtLeast(used, capacity, 50)) return kCongestionLight;
  return kCongestionNone;
}

uint64_t CapacityBucket(uint64_t count) {
  if (count == 0) return 0;
  return uint64_t{1} << (63 - __builtin_clzll(count));
}

EnergyLevel EnergyFromDraw(uint64_t draw, uint64_t budget) {
  if (AtLeast(draw, budget, 95)) return kEnergyCritical;
  if (AtLeast(draw, budget, 80)) return kEnergyConstrained;
  return kEnergyNormal;
}

bool ChangeFilter::Update(const std::string& key, uint64_t value, uint64_t now) {
  auto it = last_.find(key);
  if (it == last_.end()) {
    last_[key] = Last{value, now};
    return true;
  }
  Last& last = it->second;
  if (value == last.value) return false;
  if (now < last.time + interval_) return false;
  last = Last{value, now};
  return true;
}

}  // namespace hz::events
