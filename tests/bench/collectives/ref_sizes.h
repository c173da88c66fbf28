// Sizes and iteration counts shared by the reference all-reduce programs, as
// in the project's reference figures: (warm-up, timed) iterations per size.
#ifndef HZ_TESTS_BENCH_COLLECTIVES_REF_SIZES_H_
#define HZ_TESTS_BENCH_COLLECTIVES_REF_SIZES_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace hz::coll::bench {

struct SizeRun {
  size_t bytes;
  int warmup;
  int iters;
};

// Default: 4 KiB .. 16 MiB; full: up to 256 MiB.
inline std::vector<SizeRun> RefSizes(bool full) {
  std::vector<SizeRun> v = {
      {4u << 10, 50, 500}, {64u << 10, 50, 500}, {1u << 20, 10, 100}, {16u << 20, 3, 20}};
  if (full) {
    v.push_back({64u << 20, 2, 10});
    v.push_back({256u << 20, 1, 5});
  }
  return v;
}

inline double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace hz::coll::bench

#endif  // HZ_TESTS_BENCH_COLLECTIVES_REF_SIZES_H_
