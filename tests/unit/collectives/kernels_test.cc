// The engine's fp16/bf16 conversions against independent references
// (the compiler's _Float16, a branchy bf16 rounding), the one-pass
// reduction kernels against the scalar reference, the span list, the
// streaming copy, and the weighted fair scheduler's shares.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "hz/common/half.h"
#include "hz/common/thread_priority.h"
#include "kernels.h"
#include "protocol/harmonaize.h"
#include "scheduler.h"
#include "span_list.h"
#include "stream_copy.h"

namespace hz::coll::testing {
namespace {

using hz::Bf16ToFloat;
using hz::FloatToBf16;
using hz::FloatToHalf;
using hz::HalfToFloat;

bool SameFloat(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(CollectivesKernels, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(SameFloat(HalfToFloat(uint16_t(h)), RefHalfToFloat(uint16_t(h)))) << h;
  }
}

TEST(CollectivesKernels, FloatToHalfRoundsToNearestEven) {
  std::vector<float> probes = {0.0f,     -0.0f,          1.0f,          65504.0f, 65519.99f,
                               65520.0f, 1e9f,           -1e9f,         INFINITY, -INFINITY,
                               5.96e-8f, 2.98e-8f,       2.99e-8f,      6.1e-5f,  6.103515625e-05f,
                               1e-10f,   1.00048828125f, 1.00146484375f};
  // Every half, and every midpoint between neighbouring halves (ties).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    float f = RefHalfToFloat(uint16_t(h));
    probes.push_back(f);
    probes.push_back(-f);
    float next = RefHalfToFloat(uint16_t(h + 1));
    probes.push_back(f + (next - f) / 2);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f = std::bit_cast<float>(bits);
    if (!std::isnan(f)) probes.push_back(f);
  }
  for (float f : probes) {
    ASSERT_EQ(FloatToHalf(f), RefFloatToHalf(f)) << f;
  }
  EXPECT_EQ(FloatToHalf(NAN) & 0x7e00, 0x7e00);  // stays a (quiet) NaN
}

TEST(CollectivesKernels, Bf16ConversionsMatchReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(SameFloat(Bf16ToFloat(uint16_t(h)), RefBf16ToFloat(uint16_t(h))));
  }
  std::mt19937 rng(6);
  for (int i = 0; i < 500000; ++i) {
    uint32_t bits = rng();
    if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // exact ties
    float f = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToBf16(f), RefFloatToBf16(f)) << bits;
  }
}

TEST(CollectivesKernels, SpanListAddressesAcrossExtents) {
  std::vector<uint8_t> a(5), b(0), c(3), d(8);
  IoVec v = {{a.data(), a.size()}, {b.data(), 0}, {c.data(), c.size()}, {d.data(), d.size()}};
  internal::SpanList s(v);
  EXPECT_EQ(s.size(), 16u);
  internal::SpanCursor at(s, 4);
  EXPECT_EQ(at.data(), a.data() + 4);
  EXPECT_EQ(at.run(), 1u);
  at.Skip(2);  // across the end of a and the empty extent
  EXPECT_EQ(at.data(), c.data() + 1);
  EXPECT_EQ(at.run(), 2u);
  std::vector<uint8_t> in(16);
  for (int i = 0; i < 16; ++i) in[i] = uint8_t(i + 1);
  s.Write(0, in.data(), 16);
  EXPECT_EQ(c[0], 6);
  EXPECT_EQ(d[7], 16);
  std::vector<uint8_t> out(7);
  s.Read(3, out.data(), 7);
  EXPECT_EQ(out, std::vector<uint8_t>({4, 5, 6, 7, 8, 9, 10}));
}

// A cursor placed anywhere and moved on by any step stands where a search
// from the start would put it: steps within an extent, to its end, and over
// whole extents, as a reduction's pieces move.
TEST(CollectivesKernels, SpanCursorStandsWhereASearchWould) {
  std::vector<uint8_t> arena(64);
  IoVec v = {{arena.data(), 5},
             {arena.data() + 8, 0},
             {arena.data() + 10, 3},
             {arena.data() + 20, 8},
             {arena.data() + 40, 1}};
  internal::SpanList s(v);
  ASSERT_EQ(s.size(), 17u);
  EXPECT_EQ(s.extents(), 4u);  // the empty extent is dropped
  // Bytes to the end of the extent holding each offset, and its address.
  const uint64_t left[17] = {5, 4, 3, 2, 1, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1, 1};
  const uint8_t* at[17] = {
      arena.data(),      arena.data() + 1,  arena.data() + 2,  arena.data() + 3,  arena.data() + 4,
      arena.data() + 10, arena.data() + 11, arena.data() + 12, arena.data() + 20, arena.data() + 21,
      arena.data() + 22, arena.data() + 23, arena.data() + 24, arena.data() + 25, arena.data() + 26,
      arena.data() + 27, arena.data() + 40};
  for (uint64_t start = 0; start <= 17; ++start) {
    for (uint64_t step = 1; step <= 17; ++step) {
      internal::SpanCursor c(s, start);
      for (uint64_t off = start;; off += step) {
        if (off >= 17) {
          EXPECT_EQ(c.data(), nullptr) << "start " << start << " step " << step;
          EXPECT_EQ(c.run(), 0u);
          break;
        }
        EXPECT_EQ(c.data(), at[off]) << "start " << start << " step " << step << " off " << off;
        EXPECT_EQ(c.run(), left[off]) << "start " << start << " step " << step << " off " << off;
        c.Skip(step);
      }
    }
  }
}

// Workers run below the threads that hand them work when asked to, so a
// tenant's large reductions leave the CPU to everyone's small requests.
// Its ends are written by overlapping 8-byte stores whatever the alignment:
// every length and destination offset must copy exactly its bytes and
// touch none beside them.
TEST(CollectivesKernels, StreamCopyWritesExactlyItsBytesAtEveryAlignment) {
  constexpr size_t kGuard = 64;
  std::vector<uint8_t> src(4096 + 64), dst(4096 + 64 + 2 * kGuard);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 160; ++n) lengths.push_back(n);
  for (size_t n : {255, 256, 257, 1023, 2048, 2052, 4095, 4096}) lengths.push_back(n);
  for (size_t dst_off = 0; dst_off < 64; ++dst_off) {
    for (size_t src_off : {0, 3, 8}) {
      for (size_t n : lengths) {
        std::fill(dst.begin(), dst.end(), 0xee);
        uint8_t* d = dst.data() + kGuard + dst_off;
        internal::StreamCopy(d, src.data() + src_off, n);
        internal::StreamFence();
        ASSERT_EQ(std::memcmp(d, src.data() + src_off, n), 0)
            << "n " << n << " dst_off " << dst_off << " src_off " << src_off;
        for (uint8_t* g = dst.data(); g < d; ++g) ASSERT_EQ(*g, 0xee) << "before, n " << n;
        for (uint8_t* g = d + n; g < dst.data() + dst.size(); ++g) {
          ASSERT_EQ(*g, 0xee) << "after, n " << n << " dst_off " << dst_off;
        }
      }
    }
  }
}

// One reduce_into case: nin random inputs of n elements, outputs aligned as
// streamed stores need between guard bytes, one fewer than the inputs (at
// least one) so that a kernel that mixed up the two counts would show; in
// place, the first output is the first input.
struct ReduceIntoCase {
  uint8_t dtype, redop;
  uint32_t nin;
  size_t n;
  bool stream, in_place;
};

void CheckReduceInto(const ReduceIntoCase& c, std::mt19937& rng) {
  constexpr size_t kAlign = internal::kReduceIntoStreamAlign;
  constexpr size_t kGuard = 64;
  const size_t bytes = c.n * hz_dtype_size(c.dtype);
  std::vector<std::vector<uint8_t>> in(c.nin);
  std::vector<const uint8_t*> in_ptr;
  for (auto& v : in) {
    v = RandomElements(c.dtype, c.n, rng);
    in_ptr.push_back(v.data());
  }
  const std::vector<uint8_t> want = ReferenceReduce(c.dtype, c.redop, in_ptr, c.n);
  const uint32_t nout = std::max(1u, c.nin - 1);
  std::vector<std::vector<uint8_t>> out_mem(nout);
  std::vector<uint8_t*> out_ptr;
  for (auto& m : out_mem) {
    m.assign(bytes + 2 * kGuard + kAlign, 0xee);
    const uintptr_t at = reinterpret_cast<uintptr_t>(m.data()) + kGuard;
    out_ptr.push_back(reinterpret_cast<uint8_t*>((at + kAlign - 1) / kAlign * kAlign));
  }
  if (c.in_place) {
    std::copy(in[0].begin(), in[0].end(), out_ptr[0]);
    in_ptr[0] = out_ptr[0];
  }
  internal::GetReduceKernel(c.dtype, c.redop)
      ->reduce_into(out_ptr.data(), nout, in_ptr.data(), c.nin, c.n, c.nin, c.stream);
  internal::StreamFence();
  for (uint32_t j = 0; j < nout; ++j) {
    ASSERT_TRUE(std::equal(want.begin(), want.end(), out_ptr[j])) << "output " << j;
    for (size_t i = 0; i < out_mem[j].size(); ++i) {
      const uint8_t* g = out_mem[j].data() + i;
      if (g >= out_ptr[j] && g < out_ptr[j] + bytes) continue;
      ASSERT_EQ(*g, 0xee) << "output " << j << " written outside its elements";
    }
  }
}

// reduce_into, which large reductions take, gives the reference's bits for
// every type and operation: whole lines and a partial last one, any number
// of inputs and outputs, streamed or not, and in place. Bytes past the n
// elements stay as they were.
TEST(CollectivesKernels, ReduceIntoMatchesTheReferenceForEveryTypeAndOperation) {
  std::mt19937 rng(7);
  for (uint8_t dtype = 0; dtype < kDTypeCount; ++dtype) {
    const size_t per_line = 64 / hz_dtype_size(dtype);
    for (uint8_t redop = 0; redop < kRedOpCount; ++redop) {
      for (uint32_t nin : {1u, 2u, 3u, 5u, 8u}) {
        for (size_t n :
             {size_t{0}, size_t{1}, per_line - 1, per_line, per_line + 1, size_t{1000}}) {
          for (int variant = 0; variant < 4; ++variant) {
            const ReduceIntoCase c{dtype, redop, nin, n, (variant & 1) != 0, (variant & 2) != 0};
            SCOPED_TRACE(::testing::Message()
                         << "dtype " << int(dtype) << " redop " << int(redop) << " inputs " << nin
                         << " n " << n << " stream " << c.stream << " in place " << c.in_place);
            CheckReduceInto(c, rng);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(CollectivesScheduler, WorkersRunAtTheNiceValueAsked) {
  const int before = getpriority(PRIO_PROCESS, 0);
  if (before > 7)
    GTEST_SKIP() << "lowering a nice value needs privilege; this process runs at " << before;
  internal::Scheduler sched(2, 7);
  std::mutex mu;
  std::condition_variable cv;
  int seen = -100, done = 0;
  for (int i = 0; i < 2; ++i) {
    sched.Submit({Tenant(1), 0}, 1, 1, [&] {
      errno = 0;
      int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
      std::lock_guard<std::mutex> l(mu);
      seen = errno == 0 ? nice : -100;
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done == 2; });
  EXPECT_EQ(seen, 7);
  // Only the workers: the thread that made the scheduler keeps its own.
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), before);
}

// Runs one task on the scheduler and waits for it; true when the worker
// that ran it was in the idle class.
bool RunOneTask(internal::Scheduler& sched) {
  std::atomic<int> state{0};  // 1: ran in the idle class, 2: outside it
  sched.Submit({Tenant(1), 0}, 1, 1, [&] { state = hz::ThisThreadInIdleClass() ? 1 : 2; });
  while (state.load() == 0) std::this_thread::yield();
  return state.load() == 1;
}

TEST(CollectivesScheduler, AnIdleClassWorkerPollsOnlyWhileTasksFollowWithinTheBudget) {
  using std::chrono::milliseconds;
  internal::Scheduler sched(1, hz::kIdleClassNice, 10'000'000'000, {}, milliseconds(1000));
  if (!RunOneTask(sched)) GTEST_SKIP() << "the kernel kept the worker out of the idle class";
  // A task soon after the last: the worker, polling since it finished that
  // one, takes it without a wake-up. Each task is queued once the poll has
  // begun (a busy host may keep the worker off its CPU for a while, and it
  // must still be polling when it gets one back, so a few tries are
  // allowed).
  for (int i = 0; i < 10 && sched.polled_tasks() == 0; ++i) {
    const uint64_t polls = sched.polls();
    RunOneTask(sched);
    for (int ms = 0; ms < 1000 && sched.polls() == polls; ++ms) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    RunOneTask(sched);
  }
  EXPECT_GE(sched.polls(), 1u);
  EXPECT_GE(sched.polled_tasks(), 1u);
  // Its poll ends with the budget; a task 2 s later wakes it, and since
  // that wait was longer than the budget it does not poll after it: the
  // next task, 1 ms later, wakes it too.
  std::this_thread::sleep_for(milliseconds(2000));
  const uint64_t polls = sched.polls();
  const uint64_t polled = sched.polled_tasks();
  RunOneTask(sched);
  std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(sched.polls(), polls);
  RunOneTask(sched);
  EXPECT_EQ(sched.polled_tasks(), polled);
}

TEST(CollectivesScheduler, ATaskLeftToAPollingWorkerWakesNoSleeper) {
  // Two workers: the one that ran the first task polls after it, the other
  // has run none and sleeps. Each following task is queued once the poll has
  // begun; the poller takes it, and the sleeper is not woken to find nothing
  // (a system call for the submitter, a trip onto a CPU for the sleeper).
  // The budget outlasts the test, so that no poll ends while the host keeps
  // the worker off its CPU; the scheduler's destructor ends it.
  using std::chrono::milliseconds;
  internal::Scheduler sched(2, hz::kIdleClassNice, 10'000'000'000, {}, milliseconds(600'000));
  uint64_t polls = sched.polls();
  if (!RunOneTask(sched)) GTEST_SKIP() << "the kernel kept the worker out of the idle class";
  for (int i = 0; i < 50; ++i) {
    for (int ms = 0; ms < 10'000 && sched.polls() == polls; ++ms) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    if (sched.polls() == polls) GTEST_SKIP() << "the host kept the worker off its CPU for 10 s";
    polls = sched.polls();
    RunOneTask(sched);
  }
  // Only the first task woke a worker. A worker that started late may have
  // taken that one from the worker woken for it (whose wake-up then found
  // nothing), or found one of the others queued.
  EXPECT_GE(sched.polled_tasks(), 49u);
  EXPECT_LE(sched.empty_wakeups(), 1u);
}

TEST(CollectivesScheduler, AWorkerOutsideTheIdleClassNeverPolls) {
  // Polling there would take CPU time from the threads serving requests.
  internal::Scheduler sched(1, 0, 10'000'000'000, {}, std::chrono::milliseconds(100));
  for (int i = 0; i < 5; ++i) RunOneTask(sched);
  EXPECT_EQ(sched.polls(), 0u);
  EXPECT_EQ(sched.polled_tasks(), 0u);
}

TEST(CollectivesScheduler, CancelRemovesOnlyTasksNotYetTaken) {
  internal::Scheduler sched(1);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false, started = false;
  // The only worker takes this one and holds it.
  auto held = sched.Submit({Tenant(1), 0}, 1, 1, [&] {
    std::unique_lock<std::mutex> l(mu);
    started = true;
    cv.notify_all();
    cv.wait(l, [&] { return go; });
  });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return started; });
  }
  std::atomic<int> ran{0};
  auto a = sched.Submit({Tenant(1), 0}, 1, 1, [&] { ran += 1; });
  auto b = sched.Submit({Tenant(2), 0}, 1, 1, [&] { ran += 10; });
  EXPECT_EQ(sched.queued(), 2u);
  EXPECT_FALSE(sched.Cancel(held)) << "already taken";
  EXPECT_TRUE(sched.Cancel(a));
  EXPECT_FALSE(sched.Cancel(a)) << "cancelled twice";
  EXPECT_EQ(sched.queued(), 1u);
  EXPECT_TRUE(sched.HasWaiting());
  {
    std::lock_guard<std::mutex> l(mu);
    go = true;
  }
  cv.notify_all();
  while (ran.load() == 0) std::this_thread::yield();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_FALSE(sched.Cancel(b)) << "ran already";
  EXPECT_FALSE(sched.HasWaiting());
}

TEST(CollectivesScheduler, BackloggedFlowsShareByWeight) {
  internal::Scheduler sched(1);
  // Hold the only worker while both flows queue up, then release it.
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  sched.Submit({Tenant(9), 0}, 1, 1, [&] {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return go; });
  });
  std::vector<int> order;
  std::mutex order_mu;
  for (int i = 0; i < 100; ++i) {
    sched.Submit({Tenant(1), 0}, 1, 1000, [&] {
      std::lock_guard<std::mutex> l(order_mu);
      order.push_back(1);
    });
    sched.Submit({Tenant(2), 2}, 4, 1000, [&] {
      std::lock_guard<std::mutex> l(order_mu);
      order.push_back(2);
    });
  }
  {
    std::lock_guard<std::mutex> l(mu);
    go = true;
  }
  cv.notify_all();
  while (true) {
    std::lock_guard<std::mutex> l(order_mu);
    if (order.size() == 200) break;
  }
  // While both are backlogged (the first 100 picks), weight 4 gets 4 of 5.
  int high = 0;
  for (int i = 0; i < 100; ++i) high += order[i] == 2;
  EXPECT_GE(high, 78);
  EXPECT_LE(high, 82);
}

}  // namespace
}  // namespace hz::coll::testing
