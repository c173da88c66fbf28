// Engine-level benchmark of the collective engine, one JSON object per line.
//
//  1. "stream": a STREAM-style copy over 256 MiB arrays with the engine's
//     worker count, B = 2 x bytes / time (read + write).
//  2. "allreduce": fp32 sum over p ranks (p = 2, 4, 8), separate send and
//     recv buffers per rank, first touched before timing, starting on a
//     64-byte boundary or, with --offset BYTES, that many bytes past one
//     (as a tensor that is a slice of a larger one can); with --extent
//     BYTES, each described as extents ending on multiples of BYTES (4096:
//     as a guest's pages reach the engine). One driver thread
//     posts every rank's part and waits for all completions, so the time is
//     the engine's (matching, planning, execution), not the thread hand-off of
//     p rank threads. algbw = size / time, busbw = algbw x 2(p-1)/p. The
//     reference is the single-copy memory-traffic bound B / (3p) from the same
//     run; "ratio" = algbw / bound. (The engine reduces each block of all p
//     inputs while it is in cache and writes all p outputs from there, about
//     2pN bytes of traffic, so it can exceed the 3pN bound.) From 16 MiB, a
//     second reference: one_pass_allreduce.h's kernel, which moves exactly
//     those 2pN bytes in one pass with non-temporal stores, a pass after each
//     engine iteration on buffers of the same size; ratio_to_one_pass = its
//     median time / the engine's.
//  3. "fairness": two tenants with different priority classes run all-reduces
//     concurrently for a fixed time; each one's share of completed bytes and
//     of worker time, against its share of the weights. At 4 MiB (workers
//     only) and at 1 MiB (which the matching thread may run itself).
//
// Default sizes finish well under a minute; --full runs 4 KiB .. 256 MiB.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/collectives/engine.h"
#include "one_pass_allreduce.h"

namespace {

using hz::Status;
using hz::TenantId;
using hz::coll::Constraints;
using hz::coll::DType;
using hz::coll::Engine;
using hz::coll::EngineOptions;
using hz::coll::IoSpan;
using hz::coll::IoVec;
using hz::coll::Member;
using hz::coll::Op;
using hz::coll::OpDesc;
using hz::coll::RedOp;
using Clock = std::chrono::steady_clock;

// The engine's streaming-store threshold, for reporting.
uint64_t g_stream_min = EngineOptions{}.stream_min_bytes;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// Page-touched float buffer (no value-initialisation cost hidden in timing).
std::unique_ptr<float[]> Alloc(size_t n, float v) {
  std::unique_ptr<float[]> p(new float[n]);
  std::fill(p.get(), p.get() + n, v);
  return p;
}

// A float buffer that starts offset_bytes past a 64-byte boundary.
class OffsetFloats {
 public:
  OffsetFloats(size_t n, size_t offset_bytes, float v)
      : storage_(new float[n + kSlack]),
        data_(reinterpret_cast<float*>(
            ((reinterpret_cast<uintptr_t>(storage_.get()) + 63) & ~uintptr_t{63}) + offset_bytes)) {
    std::fill(data_, data_ + n, v);
  }
  float* get() const { return data_; }
  float& operator[](size_t i) const { return data_[i]; }

 private:
  static constexpr size_t kSlack = 32;  // 64 bytes of alignment + 64 of offset
  std::unique_ptr<float[]> storage_;
  float* data_;
};

double StreamCopy(uint32_t threads, size_t bytes) {
  const size_t n = bytes / sizeof(float);
  auto a = Alloc(n, 1.0f), b = Alloc(n, 0.0f);
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (uint32_t t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        float* __restrict dst = b.get();
        const float* __restrict src = a.get();
        for (size_t i = lo; i < hi; ++i) dst[i] = src[i];
      });
    }
    for (auto& t : ts) t.join();
    if (rep > 0) times.push_back(Seconds(Clock::now() - t0));  // rep 0 warms up
  }
  if (b[n - 1] != 1.0f) std::fprintf(stderr, "stream copy check failed\n");
  return 2.0 * static_cast<double>(bytes) / Median(times);
}

std::vector<std::shared_ptr<Member>> Join(Engine& e, const TenantId& tenant, uint32_t p,
                                          Constraints c) {
  hz::coll::Uid uid;
  if (!e.NewUid(tenant, &uid).ok()) std::abort();
  std::vector<std::shared_ptr<Member>> m(p);
  std::atomic<uint32_t> done{0};
  for (uint32_t r = 0; r < p; ++r) {
    e.Init(tenant, uid, p, r, c, [&, r](Status s, std::shared_ptr<Member> mm) {
      if (!s.ok()) std::abort();
      m[r] = std::move(mm);
      done++;
    });
  }
  while (done.load() < p) std::this_thread::yield();
  return m;
}

// Counts completions of one collective over all ranks.
class Latch {
 public:
  void Reset(uint32_t n) {
    std::lock_guard<std::mutex> l(mu_);
    left_ = n;
    failed_ = false;
  }
  hz::coll::Done Callback() {
    return [this](Status s) {
      std::lock_guard<std::mutex> l(mu_);
      failed_ |= !s.ok();
      if (--left_ == 0) cv_.notify_all();
    };
  }
  bool Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return left_ == 0; });
    return !failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t left_ = 0;
  bool failed_ = false;
};

// bytes at p as extents that end on multiples of extent_bytes (0: one
// extent), as a buffer made of a guest's pages reaches the engine.
IoVec Extents(float* p, size_t bytes, size_t extent_bytes) {
  auto* b = reinterpret_cast<uint8_t*>(p);
  if (extent_bytes == 0) return {IoSpan{b, bytes}};
  IoVec v;
  for (uint8_t* end = b + bytes; b < end;) {
    const uintptr_t next = (reinterpret_cast<uintptr_t>(b) / extent_bytes + 1) * extent_bytes;
    const size_t n = std::min<size_t>(next - reinterpret_cast<uintptr_t>(b), end - b);
    v.push_back(IoSpan{b, n});
    b += n;
  }
  return v;
}

OpDesc AllReduceDesc(uint64_t seq, size_t n, float* send, float* recv, size_t extent_bytes) {
  OpDesc d;
  d.op = Op::kAllReduce;
  d.seq = seq;
  d.count = n;
  d.dtype = static_cast<uint8_t>(DType::kFp32);
  d.redop = static_cast<uint8_t>(RedOp::kSum);
  d.send = Extents(send, n * 4, extent_bytes);
  d.recv = Extents(recv, n * 4, extent_bytes);
  return d;
}

// Where each rank's buffers lie: offset_bytes past a 64-byte boundary, in
// extents of extent_bytes (0: one).
struct Placement {
  size_t offset_bytes = 0;
  size_t extent_bytes = 0;
};

void BenchAllReduce(Engine& e, uint32_t p, size_t bytes, const Placement& at, double stream_bps) {
  const size_t n = bytes / 4;
  auto m = Join(e, TenantId("bench"), p, Constraints{});
  std::vector<OffsetFloats> send, recv;
  for (uint32_t r = 0; r < p; ++r) {
    send.emplace_back(n, at.offset_bytes, static_cast<float>(r + 1));
    recv.emplace_back(n, at.offset_bytes, 0.0f);
  }
  // Roughly 0.3 s of timed work per configuration, at least 3 iterations.
  const double per_iter_guess = static_cast<double>(bytes) * 3 * p / stream_bps + 5e-6;
  const int iters = std::clamp(static_cast<int>(0.3 / per_iter_guess), 3, 2000);
  const int warmup = std::max(1, iters / 10);
  // Past the caches, a pass of the one-pass reference after each iteration,
  // on buffers of the same size and with as many threads as the engine has
  // workers: both medians then span the same stretch of time.
  std::unique_ptr<hz::coll::bench::OnePassAllReduce> reference;
  if (bytes >= hz::coll::bench::kOnePassMinBytes) {
    reference = std::make_unique<hz::coll::bench::OnePassAllReduce>(p, bytes);
    if (!reference->ok()) reference.reset();
  }
  auto before = e.Stats();
  Latch latch;
  std::vector<double> times, reference_times;
  uint64_t seq = 0;
  bool ok = true;
  for (int it = 0; it < warmup + iters; ++it) {
    if (reference) {
      const double s = reference->PassSeconds(e.workers());
      if (it >= warmup) reference_times.push_back(s);
    }
    latch.Reset(p);
    auto t0 = Clock::now();
    for (uint32_t r = 0; r < p; ++r) {
      e.Post(m[r], AllReduceDesc(seq, n, send[r].get(), recv[r].get(), at.extent_bytes),
             latch.Callback());
    }
    ok &= latch.Wait();
    double t = Seconds(Clock::now() - t0);
    ++seq;
    if (it >= warmup) times.push_back(t);
  }
  const float want = static_cast<float>(p * (p + 1) / 2);
  for (uint32_t r = 0; r < p; ++r) {
    ok &= recv[r][0] == want && recv[r][n / 2] == want && recv[r][n - 1] == want;
  }
  auto after = e.Stats();
  std::string algo;
  for (size_t a = 0; a < hz::coll::kAlgorithmCount; ++a) {
    if (after.algorithms[a] > before.algorithms[a]) {
      algo = hz::coll::AlgorithmName(static_cast<hz::coll::Algorithm>(a));
    }
  }
  const double t = Median(times);
  const double algbw = static_cast<double>(bytes) / t;
  const double busbw = algbw * 2.0 * (p - 1) / p;
  const double bound = stream_bps / (3.0 * p);
  nlohmann::json one_pass_us = nullptr, to_one_pass = nullptr;
  if (reference && reference->Correct()) {
    const double s = Median(reference_times);
    one_pass_us = s * 1e6;
    to_one_pass = s / t;
  }
  Emit({{"bench", "allreduce"},
        {"dtype", "fp32"},
        {"p", p},
        {"size", bytes},
        {"offset_bytes", at.offset_bytes},
        {"extent_bytes", at.extent_bytes},
        {"iters", iters},
        {"time_us", t * 1e6},
        {"time_us_min", *std::min_element(times.begin(), times.end()) * 1e6},
        {"algbw_GBps", algbw / 1e9},
        {"busbw_GBps", busbw / 1e9},
        {"stream_copy_GBps", stream_bps / 1e9},
        {"bound_GBps", bound / 1e9},
        {"ratio_to_bound", algbw / bound},
        {"one_pass_time_us", one_pass_us},
        {"ratio_to_one_pass", to_one_pass},
        {"algorithm", algo},
        {"workers", e.workers()},
        {"streaming_stores", g_stream_min != 0 && bytes * 2 * p >= g_stream_min},
        {"check", ok ? "ok" : "FAILED"}});
  for (auto& mm : m) e.Destroy(mm);
}

// Two tenants, each with `comms` communicators of 2 ranks and two all-reduces
// in flight per communicator, run for `seconds`; reports the shares.
void BenchFairness(uint32_t workers, uint16_t prio_a, uint16_t prio_b, size_t bytes,
                   double seconds) {
  EngineOptions o;
  o.worker_threads = workers;
  Engine e(o);
  const uint32_t p = 2, comms = 2, depth = 2;
  const size_t n = bytes / 4;
  struct Tenant {
    TenantId id;
    uint16_t prio;
    std::vector<std::vector<std::shared_ptr<Member>>> comms;
    std::vector<std::unique_ptr<float[]>> bufs;
    std::atomic<uint64_t> ops{0};
  };
  Tenant ta{TenantId("a"), prio_a, {}, {}, {}}, tb{TenantId("b"), prio_b, {}, {}, {}};
  std::atomic<bool> stop{false};
  auto run = [&](Tenant& t) {
    Constraints c;
    c.priority_class = t.prio;
    for (uint32_t k = 0; k < comms; ++k) t.comms.push_back(Join(e, t.id, p, c));
    for (uint32_t i = 0; i < comms * p * 2; ++i) t.bufs.push_back(Alloc(n, 1.0f));
    std::mutex mu;
    std::condition_variable cv;
    std::vector<uint64_t> next(comms, 0);
    std::vector<uint32_t> inflight(comms, 0);  // guarded by mu
    uint32_t total = 0;                        // guarded by mu
    // Only this thread posts, so next[] needs no lock.
    auto post = [&](uint32_t k) {
      const uint64_t seq = next[k]++;
      auto left = std::make_shared<std::atomic<uint32_t>>(p);
      for (uint32_t r = 0; r < p; ++r) {
        float* s = t.bufs[(k * p + r) * 2].get();
        float* d = t.bufs[(k * p + r) * 2 + 1].get();
        e.Post(t.comms[k][r], AllReduceDesc(seq, n, s, d, 0), [&, k, left](Status st) {
          if (!st.ok()) std::abort();
          if (left->fetch_sub(1) == 1) {
            t.ops++;
            std::lock_guard<std::mutex> l(mu);
            --inflight[k];
            --total;
            cv.notify_all();
          }
        });
      }
    };
    for (;;) {
      int k = -1;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return total < comms * depth || stop.load(); });
        if (stop.load()) break;
        for (uint32_t i = 0; i < comms; ++i) {
          if (inflight[i] < depth) k = static_cast<int>(i);
        }
        ++inflight[k];
        ++total;
      }
      post(static_cast<uint32_t>(k));
    }
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return total == 0; });
  };
  // Start both, measure the window in which both are busy.
  std::thread a([&] { run(ta); });
  std::thread b([&] { run(tb); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both warmed up
  auto s0 = e.Stats();
  uint64_t a0 = ta.ops.load(), b0 = tb.ops.load();
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  uint64_t a1 = ta.ops.load(), b1 = tb.ops.load();
  double dt = Seconds(Clock::now() - t0);
  auto s1 = e.Stats();
  stop = true;
  a.join();
  b.join();
  const EngineOptions defaults;
  const double wa = defaults.priority_weights[prio_a], wb = defaults.priority_weights[prio_b];
  const double bytes_a = static_cast<double>(a1 - a0) * bytes,
               bytes_b = static_cast<double>(b1 - b0) * bytes;
  const double busy_a = static_cast<double>(s1.tenants[ta.id].busy_ns - s0.tenants[ta.id].busy_ns);
  const double busy_b = static_cast<double>(s1.tenants[tb.id].busy_ns - s0.tenants[tb.id].busy_ns);
  const double want_a = wa / (wa + wb);
  const double share_a = bytes_a / std::max(1.0, bytes_a + bytes_b);
  const double busy_share_a = busy_a / std::max(1.0, busy_a + busy_b);
  Emit({{"bench", "fairness"},
        {"workers", workers},
        {"size", bytes},
        {"seconds", dt},
        {"tenant_a",
         {{"priority_class", prio_a},
          {"weight", wa},
          {"algbw_GBps", bytes_a / dt / 1e9},
          {"byte_share", share_a},
          {"worker_time_share", busy_share_a}}},
        {"tenant_b",
         {{"priority_class", prio_b},
          {"weight", wb},
          {"algbw_GBps", bytes_b / dt / 1e9},
          {"byte_share", 1 - share_a},
          {"worker_time_share", 1 - busy_share_a}}},
        {"weight_share_a", want_a},
        {"ratio_byte_share_to_weight_share_a", share_a / want_a},
        {"ratio_time_share_to_weight_share_a", busy_share_a / want_a}});
}

}  // namespace

int main(int argc, char** argv) {
  bool full = false, fairness = true;
  Placement at;
  EngineOptions opts;
  std::vector<uint32_t> ranks = {2, 4, 8};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) {
      full = true;
    } else if (std::strcmp(argv[i], "--no-stream") == 0) {
      opts.stream_min_bytes = 0;  // regular stores only, for comparison
    } else if (std::strcmp(argv[i], "--stream-min") == 0 && i + 1 < argc) {
      opts.stream_min_bytes = std::strtoull(argv[++i], nullptr, 0);  // bytes touched
    } else if (std::strcmp(argv[i], "--no-fairness") == 0) {
      fairness = false;
    } else if (std::strcmp(argv[i], "--p") == 0 && i + 1 < argc) {
      int p = std::atoi(argv[++i]);
      if (p < 1 || p > 64) {
        std::fprintf(stderr, "--p takes 1..64\n");
        return 2;
      }
      ranks = {static_cast<uint32_t>(p)};
    } else if (std::strcmp(argv[i], "--offset") == 0 && i + 1 < argc) {
      const int off = std::atoi(argv[++i]);
      if (off < 0 || off >= 64 || off % 4 != 0) {
        std::fprintf(stderr, "--offset takes a multiple of 4 in 0..60\n");
        return 2;
      }
      at.offset_bytes = static_cast<size_t>(off);
    } else if (std::strcmp(argv[i], "--extent") == 0 && i + 1 < argc) {
      const long ext = std::atol(argv[++i]);
      if (ext < 0 || ext % 64 != 0) {
        std::fprintf(stderr, "--extent takes a multiple of 64 bytes (0: one extent)\n");
        return 2;
      }
      at.extent_bytes = static_cast<size_t>(ext);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--full] [--p N] [--offset BYTES] [--extent BYTES] "
                   "[--no-stream | --stream-min BYTES] [--no-fairness]\n",
                   argv[0]);
      return 2;
    }
  }
  g_stream_min = opts.stream_min_bytes;
  Engine engine(opts);
  const uint32_t workers = engine.workers();
  const double stream = StreamCopy(workers, 256u << 20);
  Emit({{"bench", "stream"},
        {"kernel", "copy"},
        {"threads", workers},
        {"array_bytes", 256u << 20},
        {"GBps", stream / 1e9}});

  std::vector<size_t> sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  if (full) {
    sizes.clear();
    for (size_t s = 4u << 10; s <= (256u << 20); s *= 4) sizes.push_back(s);
  }
  for (uint32_t p : ranks) {
    for (size_t s : sizes) BenchAllReduce(engine, p, s, at, stream);
  }
  if (fairness) {
    // 4 MiB ops run on the workers only; 1 MiB ops are mid-sized, where the
    // thread that completes a match may run a share itself when no task waits.
    for (size_t bytes : {size_t{4} << 20, size_t{1} << 20}) {
      BenchFairness(workers, /*high*/ 2, /*low*/ 0, bytes, full ? 5.0 : 2.0);
      BenchFairness(workers, /*normal*/ 1, /*low*/ 0, bytes, full ? 5.0 : 2.0);
    }
  }
  return 0;
}
