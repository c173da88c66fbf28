#include "hz/service/features.h"

namespace hz::service {

StatusOr<uint64_t> ParseFeatures(const std::vector<std::string>& names) {
  uint64_t bits = 0;
  for (const std::string& name : names) {
    if (name == "all") {
      bits |= kEveryFeature;
      continue;
    }
    if (name == "none") continue;
    bool known = false;
    for (const FeatureName& f : kFeatureNames) {
      if (name == f.name) {
        bits |= uint64_t{1} << f.bit;
        known = true;
      }
    }
    if (!known) {
      std::string valid;
      for (const FeatureName& f : kFeatureNames) valid += std::string(", ") + f.name;
      return Status::InvalidArgument("unknown feature \"" + name + "\" (all, none" + valid + ")");
    }
  }
  return bits;
}

std::vector<std::string> FeatureNamesOf(uint64_t bits) {
  std::vector<std::string> names;
  for (const FeatureName& f : kFeatureNames) {
    if ((bits & (uint64_t{1} << f.bit)) != 0) names.emplace_back(f.name);
  }
  return names;
}

}  // namespace hz::service
