// Means with 95% confidence intervals over the seeds of an experiment.
#ifndef HZ_EXPERIMENT_STATS_H_
#define HZ_EXPERIMENT_STATS_H_

#include <cstddef>
#include <vector>

namespace hz::experiment {

struct Interval {
  double mean = 0;
  double low = 0;  // mean - t(0.975, n-1) * s / sqrt(n)
  double high = 0;
  size_t n = 0;
};

// Student's t interval of the mean; with one sample the interval is the point.
Interval MeanCi95(const std::vector<double>& samples);

// The two-sided 97.5% quantile of Student's t with `df` degrees of freedom.
double StudentT975(size_t df);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_STATS_H_
