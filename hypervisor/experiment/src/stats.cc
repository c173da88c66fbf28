#include "hz/experiment/stats.h"

#include <cmath>
#include <numeric>

namespace hz::experiment {

double StudentT975(size_t df) {
  // Tabulated to df 30; beyond, the normal quantile is within 2%.
  static constexpr double kTable[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                      2.306, 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                      2.120, 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                                      2.064, 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  constexpr size_t kRows = sizeof(kTable) / sizeof(kTable[0]);
  if (df == 0) return 0;
  return df < kRows ? kTable[df] : 1.96;
}

Interval MeanCi95(const std::vector<double>& samples) {
  Interval r;
  r.n = samples.size();
  if (r.n == 0) return r;
  const double n = static_cast<double>(r.n);
  r.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  r.low = r.high = r.mean;
  if (r.n < 2) return r;
  double ss = 0;
  for (double x : samples) ss += (x - r.mean) * (x - r.mean);
  const double half = StudentT975(r.n - 1) * std::sqrt(ss / (n - 1)) / std::sqrt(n);
  r.low = r.mean - half;
  r.high = r.mean + half;
  return r;
}

}  // namespace hz::experiment
