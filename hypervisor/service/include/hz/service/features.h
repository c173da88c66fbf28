// The HZ_F_* feature bits (SPEC §4.1) by the names the operator uses for a
// tenant's allowance (SPEC §4.2: HELLO grants only what it allows; hzctl
// tenant create --features, hzctl tenant features). The one table of them
// on the provider's side.
#ifndef HZ_SERVICE_FEATURES_H_
#define HZ_SERVICE_FEATURES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hz/common/status_or.h"
#include "protocol/harmonaize.h"

namespace hz::service {

struct FeatureName {
  unsigned bit;  // HZ_F_*
  const char* name;
};

inline constexpr FeatureName kFeatureNames[] = {
    {HZ_F_COLLECTIVES, "collectives"}, {HZ_F_CHECKPOINT, "checkpoint"}, {HZ_F_EVENTS, "events"},
    {HZ_F_NEGOTIATION, "negotiation"}, {HZ_F_TOPOLOGY, "topology"},     {HZ_F_HINTS, "hints"},
    {HZ_F_INLINE_DATA, "inline-data"}, {HZ_F_ENERGY, "energy"},
};

constexpr uint64_t AllFeatureBits() {
  uint64_t bits = 0;
  for (const FeatureName& f : kFeatureNames) bits |= uint64_t{1} << f.bit;
  return bits;
}

// Every feature of the table: a tenant's allowance unless the operator
// gives it a smaller one.
inline constexpr uint64_t kEveryFeature = AllFeatureBits();

// Names of the table, "all" (every feature) or "none" (no name at all is
// none too); kInvalidArgument naming what is unknown.
StatusOr<uint64_t> ParseFeatures(const std::vector<std::string>& names);
// The names of `bits`, in the table's order; bits outside the table are left out.
std::vector<std::string> FeatureNamesOf(uint64_t bits);

}  // namespace hz::service

#endif  // HZ_SERVICE_FEATURES_H_
