// The memory references of service_allreduce_bench: a STREAM-style copy
// (the memory-traffic bound) and the one-pass all-reduce of every size past
// the caches.
#ifndef HZ_TESTS_BENCH_SERVICE_MEMORY_REFERENCES_H_
#define HZ_TESTS_BENCH_SERVICE_MEMORY_REFERENCES_H_

#include <unistd.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "one_pass_allreduce.h"

namespace hz::bench {

// Wall-clock seconds since t0.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Copies with non-temporal stores, as STREAM does when built with streaming
// stores: for arrays far larger than the caches this skips the read of each
// destination line before it is written, the fastest large copy on x86.
// (Written here rather than taken from the engine's StreamCopy, so that the
// reference does not depend on the code it measures.)
inline void CopyNonTemporal(char* dst, const char* src, size_t n) {
#ifdef __SSE2__
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (size_t k = 0; k < 64; k += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + k));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + k), v);
    }
  }
  _mm_sfence();
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

// The arrays of the STREAM-style copy, allocated (and first touched) once:
// each round measures the copy again, on the same pages.
struct CopyArrays {
  explicit CopyArrays(size_t n) : bytes(n), a(n, 1), b(n, 2) {}
  size_t bytes;
  std::vector<char> a, b;
};

// STREAM copy: each of `threads` threads copies its slice, and a pass takes
// as long as the slowest. Best of 5, 2 x bytes counted.
inline double StreamCopyGBps(CopyArrays& arrays, size_t threads, bool non_temporal) {
  const size_t bytes = arrays.bytes;
  char* const a = arrays.a.data();
  char* const b = arrays.b.data();
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> copiers;
    for (size_t t = 0; t < threads; ++t) {
      copiers.emplace_back([&, t] {
        // Slices on 64-byte boundaries (the vectors are 16-byte aligned).
        const size_t lo = bytes * t / threads / 64 * 64;
        const size_t hi = t + 1 == threads ? bytes : bytes * (t + 1) / threads / 64 * 64;
        if (non_temporal) {
          CopyNonTemporal(b + lo, a + lo, hi - lo);
        } else {
          std::memcpy(b + lo, a + lo, hi - lo);
        }
      });
    }
    for (auto& c : copiers) c.join();
    double t = SecondsSince(t0);
    if (i > 0) best = std::min(best, t);  // the first pass warms up
    a[i] = b[bytes - 1 - i];
  }
  return 2.0 * bytes / best / 1e9;
}

// The machine's copy bandwidth: the best of memcpy and a non-temporal copy,
// each on one thread and on every online CPU (the daemon's engine uses them
// all, but on a small or shared machine one thread can copy as fast).
inline double MemoryBandwidthGBps(CopyArrays& arrays) {
  const auto cpus = static_cast<size_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  double best = 0;
  for (size_t threads : {size_t{1}, cpus}) {
    for (bool non_temporal : {false, true}) {
      best = std::max(best, StreamCopyGBps(arrays, threads, non_temporal));
    }
  }
  return best;
}

// The one-pass reference of every size past the caches, its arrays made
// once per rank count (8 ranks of 64 MiB: 1 GiB) and measured every round.
class OnePassReferences {
 public:
  OnePassReferences(int p, const std::vector<size_t>& sizes) {
    for (size_t bytes : sizes) {
      if (bytes < hz::coll::bench::kOnePassMinBytes) continue;
      auto ref = std::make_unique<hz::coll::bench::OnePassAllReduce>(p, bytes);
      if (ref->ok()) refs_.emplace_back(bytes, std::move(ref));
    }
  }

  // bytes -> {best, median} of five passes on every online CPU; sizes whose
  // result was wrong are left out.
  std::vector<std::pair<size_t, hz::coll::bench::OnePassAllReduce::Times>> Measure() {
    const auto cpus = static_cast<unsigned>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    std::vector<std::pair<size_t, hz::coll::bench::OnePassAllReduce::Times>> out;
    for (auto& [bytes, ref] : refs_) {
      const auto times = ref->Measure(cpus, 5);
      if (ref->Correct()) out.emplace_back(bytes, times);
    }
    return out;
  }

 private:
  std::vector<std::pair<size_t, std::unique_ptr<hz::coll::bench::OnePassAllReduce>>> refs_;
};

}  // namespace hz::bench

#endif  // HZ_TESTS_BENCH_SERVICE_MEMORY_REFERENCES_H_
