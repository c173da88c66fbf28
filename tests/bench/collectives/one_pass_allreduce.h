// A reference fp32-sum all-reduce that moves only the bytes every all-reduce
// must: each rank's input read once, the sum written once to each rank's
// output with non-temporal stores (no read of the output lines first). Each
// thread takes an equal slice and, 64 bytes at a time, loads them from every
// input, sums them in registers and streams the sum to every output: 2p
// memory streams at once.
//
// It is the second memory reference of the all-reduce benchmarks. The
// memory-traffic bound times the same 2p * B bytes at the speed of a copy,
// one read and one write stream; DRAM may serve a few long streams better
// than many interleaved ones, so an all-reduce over many ranks can fall short
// of that bound while moving no byte more than it must. This kernel shows how
// far, on the machine and in the round being measured. (Written here rather
// than taken from the engine, so that the reference does not depend on the
// code it measures.)
#ifndef HZ_TESTS_BENCH_COLLECTIVES_ONE_PASS_ALLREDUCE_H_
#define HZ_TESTS_BENCH_COLLECTIVES_ONE_PASS_ALLREDUCE_H_

#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "ref_sizes.h"

namespace hz::coll::bench {

// Sizes from which the benchmarks measure it: below, the operands stay in
// the caches and the fixed costs of the code measured dominate.
inline constexpr size_t kOnePassMinBytes = size_t{16} << 20;

class OnePassAllReduce {
 public:
  // p inputs (rank r holds r + 1 everywhere) and p outputs of `bytes` each,
  // rounded down to whole 64-byte lines, every page touched. Shared
  // anonymous mappings, as the ranks' regions are shared memory too.
  OnePassAllReduce(uint32_t ranks, size_t bytes) : floats_(bytes / 64 * 16) {
    for (uint32_t r = 0; r < ranks; ++r) {
      in_.push_back(Map(static_cast<float>(r + 1)));
      out_.push_back(Map(0.0f));
    }
  }
  ~OnePassAllReduce() {
    for (float* p : in_) Unmap(p);
    for (float* p : out_) Unmap(p);
  }
  OnePassAllReduce(const OnePassAllReduce&) = delete;
  OnePassAllReduce& operator=(const OnePassAllReduce&) = delete;

  // False when an allocation failed.
  bool ok() const {
    return std::none_of(in_.begin(), in_.end(), [](float* p) { return p == nullptr; }) &&
           std::none_of(out_.begin(), out_.end(), [](float* p) { return p == nullptr; });
  }

  // One pass on `threads` threads, in seconds: from the moment every thread
  // has started until the last one is done, so that creating the threads
  // (70-250 us here, a tenth of a 16 MiB pass) is not counted.
  double PassSeconds(unsigned threads) {
    using Clock = std::chrono::steady_clock;
    threads = std::max(1u, threads);
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false};
    std::vector<Clock::time_point> done(threads);
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      // Slices of whole lines (16 floats).
      const size_t lo = floats_ / 16 * t / threads * 16;
      const size_t hi = floats_ / 16 * (t + 1) / threads * 16;
      workers.emplace_back([this, lo, hi, t, &ready, &go, &done] {
        ready.fetch_add(1);
        // Yield, not spin: the threads may outnumber the CPUs.
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        Slice(lo, hi);
        done[t] = Clock::now();
      });
    }
    while (ready.load() < threads) std::this_thread::yield();
    const auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto& w : workers) w.join();
    return std::chrono::duration<double>(*std::max_element(done.begin(), done.end()) - t0).count();
  }

  // The fastest and the median of `passes` passes after one that warms up.
  struct Times {
    double best = 0, median = 0;
  };
  Times Measure(unsigned threads, int passes) {
    std::vector<double> t;
    for (int i = 0; i <= passes; ++i) {
      const double s = PassSeconds(threads);
      if (i > 0) t.push_back(s);
    }
    return t.empty() ? Times{} : Times{*std::min_element(t.begin(), t.end()), MedianOf(t)};
  }

  // Every output holds 1 + 2 + ... + p at its first, middle and last float.
  bool Correct() const {
    const size_t p = in_.size();
    const auto want = static_cast<float>(p * (p + 1) / 2);
    for (const float* o : out_) {
      if (floats_ != 0 && (o[0] != want || o[floats_ / 2] != want || o[floats_ - 1] != want)) {
        return false;
      }
    }
    return true;
  }

 private:
  float* Map(float value) {
    void* p = mmap(nullptr, floats_ * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* f = static_cast<float*>(p);
    std::fill(f, f + floats_, value);
    return f;
  }
  void Unmap(float* p) {
    if (p != nullptr) munmap(p, floats_ * sizeof(float));
  }

  // 32-byte stores where the CPU has AVX: on an AMD EPYC host, 16-byte
  // non-temporal stores took a quarter to a half longer over 8 ranks.
  void Slice(size_t lo, size_t hi) const {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx")) {
      SliceAvx(in_.data(), out_.data(), in_.size(), lo, hi);
    } else {
      SliceSse2(in_.data(), out_.data(), in_.size(), lo, hi);
    }
#else
    const size_t p = in_.size();
    for (size_t i = lo; i < hi; ++i) {
      float s = in_[0][i];
      for (size_t r = 1; r < p; ++r) s += in_[r][i];
      for (size_t r = 0; r < p; ++r) out_[r][i] = s;
    }
#endif
  }

#if defined(__x86_64__)
  [[gnu::target("avx")]] static void SliceAvx(float* const* in, float* const* out, size_t p,
                                              size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i += 16) {
      __m256 a = _mm256_loadu_ps(in[0] + i), b = _mm256_loadu_ps(in[0] + i + 8);
      for (size_t r = 1; r < p; ++r) {
        a = _mm256_add_ps(a, _mm256_loadu_ps(in[r] + i));
        b = _mm256_add_ps(b, _mm256_loadu_ps(in[r] + i + 8));
      }
      for (size_t r = 0; r < p; ++r) {
        _mm256_stream_ps(out[r] + i, a);
        _mm256_stream_ps(out[r] + i + 8, b);
      }
    }
    _mm_sfence();
  }

  static void SliceSse2(float* const* in, float* const* out, size_t p, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i += 16) {
      __m128 s[4];
      for (int k = 0; k < 4; ++k) s[k] = _mm_loadu_ps(in[0] + i + 4 * k);
      for (size_t r = 1; r < p; ++r) {
        for (int k = 0; k < 4; ++k) s[k] = _mm_add_ps(s[k], _mm_loadu_ps(in[r] + i + 4 * k));
      }
      for (size_t r = 0; r < p; ++r) {
        for (int k = 0; k < 4; ++k) _mm_stream_ps(out[r] + i + 4 * k, s[k]);
      }
    }
    _mm_sfence();
  }
#endif

  size_t floats_;
  std::vector<float*> in_, out_;
};

}  // namespace hz::coll::bench

#endif  // HZ_TESTS_BENCH_COLLECTIVES_ONE_PASS_ALLREDUCE_H_
