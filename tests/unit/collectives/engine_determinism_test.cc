// Results are bit-identical whatever the number of workers, the block size
// or the algorithm the planner picks, because every element is reduced in
// rank order. Sizes here exceed the default cache block.
#include "harness.h"

namespace hz::coll::testing {
namespace {

std::vector<uint8_t> RunAllReduce(EngineOptions o, uint8_t dtype, uint8_t redop, uint32_t p,
                                  uint64_t count, const std::vector<std::vector<uint8_t>>& in,
                                  Constraints c = {}) {
  Engine e(o);
  auto m = MakeComm(e, Tenant(3), p, c);
  std::vector<std::unique_ptr<Buffer>> s(p), r(p);
  std::vector<OpDesc> d(p);
  for (uint32_t i = 0; i < p; ++i) {
    s[i] = std::make_unique<Buffer>(in[i].size(), Layout::kSplit, 100 + i);
    s[i]->Set(in[i]);
    r[i] = std::make_unique<Buffer>(in[i].size(), i % 2 ? Layout::kUnaligned : Layout::kSplit,
                                    200 + i);
    d[i].op = Op::kAllReduce;
    d[i].count = count;
    d[i].dtype = dtype;
    d[i].redop = redop;
    d[i].send = s[i]->iov();
    d[i].recv = r[i]->iov();
  }
  for (Status st : RunAll(e, m, d)) EXPECT_EQ(st.code(), StatusCode::kOk);
  std::vector<uint8_t> out = r[0]->Get();
  for (uint32_t i = 1; i < p; ++i) EXPECT_TRUE(r[i]->Get() == out) << "rank " << i;
  for (auto& m1 : m) e.Destroy(m1);
  return out;
}

TEST(CollectivesDeterminism, SameBitsWithOneOrManyWorkersAndAnyBlockSize) {
  const uint32_t p = 5;
  const uint64_t count = 300007;  // > 1 MiB of fp32 per rank, odd
  const std::pair<DType, RedOp> kinds[] = {
      {DType::kFp32, RedOp::kSum}, {DType::kBf16, RedOp::kSum}, {DType::kFp64, RedOp::kAvg}};
  for (auto [dt, op] : kinds) {
    {
      const uint8_t dtype = static_cast<uint8_t>(dt), redop = static_cast<uint8_t>(op);
      SCOPED_TRACE("dtype " + std::to_string(dtype) + " redop " + std::to_string(redop));
      std::mt19937 rng(dtype * 10 + redop);
      std::vector<std::vector<uint8_t>> in(p);
      for (auto& v : in) v = RandomElements(dtype, count, rng);
      std::vector<const uint8_t*> ptrs;
      for (auto& v : in) ptrs.push_back(v.data());
      const std::vector<uint8_t> want = ReferenceReduce(dtype, redop, ptrs, count);

      EngineOptions one;
      one.worker_threads = 1;
      EngineOptions many;
      many.worker_threads = 4;
      EngineOptions tiny_blocks;
      tiny_blocks.worker_threads = 3;
      tiny_blocks.block_bytes = 4096 + 8;  // blocks not a power of two
      tiny_blocks.stream_min_bytes = 1;
      EngineOptions all_inline;
      all_inline.inline_max_bytes = ~0ull;
      // Every block on the workers: the matching thread runs no share.
      EngineOptions workers_only;
      workers_only.worker_threads = 2;
      workers_only.inline_max_bytes = 0;
      workers_only.caller_runs_max_bytes = 0;
      workers_only.block_bytes = 4096;
      for (const EngineOptions& o : {one, many, tiny_blocks, all_inline, workers_only}) {
        EXPECT_TRUE(RunAllReduce(o, dtype, redop, p, count, in) == want)
            << "workers " << o.worker_threads << " block " << o.block_bytes;
      }
    }
  }
}

// One fp32 sum all-reduce: rank i sends sends[i] and receives into recvs[i].
std::vector<OpDesc> Fp32AllReduce(const std::vector<std::vector<float>*>& sends,
                                  const std::vector<std::vector<float>*>& recvs) {
  std::vector<OpDesc> d(sends.size());
  for (size_t i = 0; i < d.size(); ++i) {
    d[i].op = Op::kAllReduce;
    d[i].count = sends[i]->size();
    d[i].dtype = static_cast<uint8_t>(DType::kFp32);
    d[i].send = {IoSpan{reinterpret_cast<uint8_t*>(sends[i]->data()), sends[i]->size() * 4}};
    d[i].recv = {IoSpan{reinterpret_cast<uint8_t*>(recvs[i]->data()), recvs[i]->size() * 4}};
  }
  return d;
}

TEST(CollectivesDeterminism, ParallelPlanIsChosenForLargeOps) {
  EngineOptions o;
  o.worker_threads = 4;
  Engine e(o);
  auto m = MakeComm(e, Tenant(3), 2);
  std::vector<float> a(1 << 20, 1), b(1 << 20, 2), x(1 << 20), y(1 << 20);
  for (Status st : RunAll(e, m, Fp32AllReduce({&a, &b}, {&x, &y})))
    EXPECT_EQ(st.code(), StatusCode::kOk);
  EngineStats st = e.Stats();
  EXPECT_EQ(st.algorithms[static_cast<size_t>(Algorithm::kBlockedParallel)], 1u);
  EXPECT_EQ(st.threads_chosen, 4u);
  EXPECT_EQ(st.caller_shares, 0u) << "16 MiB touched is above caller_runs_max_bytes";
  EXPECT_EQ(x[777], 3.0f);
  EXPECT_EQ(y[(1 << 20) - 1], 3.0f);
}

// Outputs are streamed from stream_min_bytes touched (read plus written) on,
// never with 0; by default from the L3 size, which is never taken above
// 32 MiB (a virtual machine is shown its host's whole cache).
TEST(CollectivesDeterminism, OutputsAreStreamedFromTheThresholdOn) {
  const uint64_t kTouched = uint64_t{16} << 20;  // 2 ranks, 4 MiB each, read and written
  EXPECT_GT(DefaultStreamMinBytes(), 0u);
  EXPECT_LE(DefaultStreamMinBytes(), uint64_t{32} << 20);
  for (uint64_t threshold : {uint64_t{0}, kTouched, kTouched + 4, DefaultStreamMinBytes()}) {
    SCOPED_TRACE(threshold);
    EngineOptions o;
    o.stream_min_bytes = threshold;
    Engine e(o);
    auto m = MakeComm(e, Tenant(3), 2);
    std::vector<float> a(1 << 20, 1), b(1 << 20, 2), x(1 << 20), y(1 << 20);
    for (Status st : RunAll(e, m, Fp32AllReduce({&a, &b}, {&x, &y})))
      EXPECT_EQ(st.code(), StatusCode::kOk);
    const bool streamed = threshold != 0 && kTouched >= threshold;
    EXPECT_EQ(e.Stats().streamed, streamed ? 1u : 0u);
    EXPECT_EQ(x[777], 3.0f);
    EXPECT_EQ(y[(1 << 20) - 1], 3.0f);
  }
}

// A mid-sized operation on an idle engine is started by the thread that
// completed the match (it runs a share while the workers join); the choice
// is counted, and turning it off leaves everything to the workers.
TEST(CollectivesDeterminism, MidSizedOpsGetACallerShareUnlessDisabled) {
  for (uint64_t limit : {uint64_t{8} << 20, uint64_t{0}}) {
    EngineOptions o;
    o.worker_threads = 2;
    o.caller_runs_max_bytes = limit;
    o.single_thread_max_bytes = 1 << 20;  // 4 MiB touched is split
    Engine e(o);
    auto m = MakeComm(e, Tenant(3), 2);
    constexpr size_t kCount = 1 << 18;  // 1 MiB per rank, 4 MiB touched
    std::vector<float> a(kCount, 1), b(kCount, 2), x(kCount), y(kCount);
    for (Status st : RunAll(e, m, Fp32AllReduce({&a, &b}, {&x, &y})))
      EXPECT_EQ(st.code(), StatusCode::kOk);
    EngineStats st = e.Stats();
    EXPECT_EQ(st.algorithms[static_cast<size_t>(Algorithm::kBlockedParallel)], 1u);
    EXPECT_EQ(st.caller_shares, limit != 0 ? 1u : 0u) << "limit " << limit;
    EXPECT_EQ(x[0], 3.0f);
    EXPECT_EQ(y[kCount - 1], 3.0f);
  }
}

// The matching thread, out of blocks, cancels queued runners and waits for
// running ones, so that it hands out the completions itself (see
// EngineStats::caller_finishes); results stay exact whoever finishes.
TEST(CollectivesDeterminism, TheMatchingThreadFinishesTheOpsItShares) {
  EngineOptions o;
  o.worker_threads = 2;
  o.single_thread_max_bytes = 1 << 20;  // 4 MiB touched is split
  Engine e(o);
  auto m = MakeComm(e, Tenant(3), 2);
  constexpr size_t kCount = 1 << 18;  // 1 MiB per rank
  constexpr int kOps = 40;
  std::vector<float> a(kCount), b(kCount), x(kCount), y(kCount);
  for (int i = 0; i < kOps; ++i) {
    std::fill(a.begin(), a.end(), static_cast<float>(i));
    std::fill(b.begin(), b.end(), 1.0f);
    std::vector<OpDesc> d = Fp32AllReduce({&a, &b}, {&x, &y});
    for (OpDesc& r : d) r.seq = static_cast<uint64_t>(i);
    for (Status st : RunAll(e, m, d)) ASSERT_EQ(st.code(), StatusCode::kOk);
    ASSERT_EQ(x[0], static_cast<float>(i + 1));
    ASSERT_EQ(y[kCount - 1], static_cast<float>(i + 1));
  }
  EngineStats st = e.Stats();
  // Runners the caller cancelled leave no task behind, so the next op finds
  // no task waiting and gets its caller share too.
  EXPECT_EQ(st.caller_shares, static_cast<uint64_t>(kOps));
  EXPECT_GE(st.caller_finishes, 1u);
  EXPECT_LE(st.caller_finishes, st.caller_shares);
}

}  // namespace
}  // namespace hz::coll::testing
