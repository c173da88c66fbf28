// The measured cost model of an inter-host leg (inter_host.h).
#include <algorithm>
#include <chrono>
#include <vector>

#include "hz/cluster/inter_host.h"

namespace hz::cluster {

namespace {

// Runs per size: the small ones are cheap, the large ones dominate the time
// a calibration takes.
constexpr int kSmallRuns = 3;
constexpr int kLargeRuns = 2;

size_t IndexOf(InterHostAlgorithm a) {
  return static_cast<size_t>(a);
}

// The fastest of `runs` all-reduces of bytes (fp32 sums) with algorithm.
StatusOr<double> Fastest(InterHostGroup& group, InterHostAlgorithm algorithm, size_t bytes,
                         int runs) {
  std::vector<float> data(bytes / sizeof(float), 1.0f);
  double best = 0;
  for (int run = 0; run < runs; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = group.AllReduce(data.data(), data.size(), InterHostType::kF32, InterHostOp::kSum,
                               algorithm);
    if (!s.ok()) return s;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = run == 0 ? t : std::min(best, t);
  }
  return best;
}

}  // namespace

const char* InterHostAlgorithmName(InterHostAlgorithm algorithm) {
  switch (algorithm) {
    case InterHostAlgorithm::kRing:
      return "ring";
    case InterHostAlgorithm::kBcube:
      return "bcube";
    case InterHostAlgorithm::kHalvingDoubling:
      return "halving_doubling";
  }
  return "unknown";
}

double LegCostModel::Seconds(InterHostAlgorithm algorithm, size_t bytes) const {
  const Line& l = lines[IndexOf(algorithm)];
  return l.latency_s + l.per_byte_s * static_cast<double>(bytes);
}

double LegCostModel::BytesPerSecond(InterHostAlgorithm algorithm) const {
  const double per_byte = lines[IndexOf(algorithm)].per_byte_s;
  return per_byte > 0 ? 1.0 / per_byte : 0.0;
}

InterHostAlgorithm LegCostModel::Best(size_t bytes) const {
  InterHostAlgorithm best = kInterHostAlgorithms[0];
  for (InterHostAlgorithm a : kInterHostAlgorithms) {
    if (Seconds(a, bytes) < Seconds(best, bytes)) best = a;
  }
  return best;
}

StatusOr<LegCostModel> CalibrateLeg(InterHostGroup& group, size_t large_bytes) {
  if (large_bytes <= kCalibrationSmallBytes) {
    return Status::InvalidArgument("inter-host leg: the large calibration size is too small");
  }
  // small and large time per algorithm, then the slowest member's of each.
  std::vector<double> times;
  for (InterHostAlgorithm a : kInterHostAlgorithms) {
    for (size_t bytes : {kCalibrationSmallBytes, large_bytes}) {
      StatusOr<double> t = Fastest(group, a, bytes, bytes == large_bytes ? kLargeRuns : kSmallRuns);
      if (!t.ok()) return t.status();
      times.push_back(*t);
    }
  }
  Status s = group.AllReduce(times.data(), times.size(), InterHostType::kF64, InterHostOp::kMax,
                             InterHostAlgorithm::kRing);
  if (!s.ok()) return s;
  LegCostModel model;
  const double span = static_cast<double>(large_bytes - kCalibrationSmallBytes);
  for (InterHostAlgorithm a : kInterHostAlgorithms) {
    const double small = times[2 * IndexOf(a)], large = times[2 * IndexOf(a) + 1];
    LegCostModel::Line& l = model.lines[IndexOf(a)];
    l.per_byte_s = std::max(0.0, (large - small) / span);
    l.latency_s = std::max(0.0, small - l.per_byte_s * kCalibrationSmallBytes);
  }
  return model;
}

}  // namespace hz::cluster
