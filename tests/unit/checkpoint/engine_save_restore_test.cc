// Save then restore, bit-exact, across sizes and slice layouts.
#include <gtest/gtest.h>

#include "hz/checkpoint/engine.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::MakeState;
using testing::Pattern;
using testing::RecordingSink;
using testing::SmallConfig;
using testing::Spans;
using testing::TempDir;
using testing::Tenant;
using testing::ZeroState;
using namespace std::chrono_literals;

struct Layout {
  const char* name;
  std::vector<size_t> sizes;
  size_t meta;
};

class CheckpointSaveRestore : public ::testing::TestWithParam<Layout> {};

TEST_P(CheckpointSaveRestore, RestoresBitExactFromDisk) {
  const Layout& lay = GetParam();
  TempDir dir("save-restore");
  RecordingSink sink;
  Status err;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink), &err);
  ASSERT_TRUE(eng) << err;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);

  auto state = MakeState(lay.sizes, 5);
  auto spans = Spans(state);
  auto meta = Pattern(lay.meta, 99);
  SaveResult sr;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 10, spans, meta}, &sr).code(), StatusCode::kOk);
  EXPECT_EQ(sr.step, 10u);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 10, 30s).code(), StatusCode::kOk);
  EXPECT_EQ(sink.Count(EventKind::kDurable, Tenant(1), 1, 10), 1u);

  // The source may change after Save returned: the snapshot is what counts.
  for (auto& b : state) std::fill(b.begin(), b.end(), 0x5a);
  auto expect = MakeState(lay.sizes, 5);

  // Restore through a fresh engine so the bytes come from disk, not memory.
  eng.reset();
  eng = testing::OpenEngine(SmallConfig(dir.path(), &sink), &err);
  ASSERT_TRUE(eng) << err;
  auto out = ZeroState(lay.sizes);
  auto out_spans = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, kLatestStep, out_spans}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(rr.step, 10u);
  EXPECT_EQ(rr.tier, TierKind::kLocalDisk);
  size_t total = 0;
  for (size_t s : lay.sizes) total += s;
  EXPECT_EQ(rr.bytes, total);
  EXPECT_EQ(out, expect);
  EXPECT_EQ(rr.meta, meta);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CheckpointSaveRestore,
    ::testing::Values(Layout{"one_byte", {1}, 0}, Layout{"empty_slice_only", {0}, 0},
                      Layout{"exact_chunk", {64 << 10}, 0},
                      Layout{"unaligned_sizes", {4097, 13, 65535, 65537, 3}, 7},
                      Layout{"many_small_slices", std::vector<size_t>(3000, 37), 0},
                      Layout{"mixed_with_empties", {0, 100000, 0, 1, 0}, 1},
                      Layout{"multi_chunk", {(1u << 20) + 12345}, 0},
                      Layout{"big_metadata", {1000}, (300u << 10) + 17},
                      Layout{"metadata_only_payload", {0, 0}, 5000}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

TEST(CheckpointSaveRestoreBasics, RestoreOfStagedCheckpointComesFromMemory) {
  TempDir dir("staged");
  auto cfg = SmallConfig(dir.path());
  cfg.disk_bandwidth_bytes_per_s = 64 << 10;  // slow persist keeps it staged
  cfg.staging_bytes = 8 << 20;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto state = MakeState({3u << 20}, 1);
  auto spans = Spans(state);
  SaveResult sr;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, spans, {}}, &sr).code(), StatusCode::kOk);
  EXPECT_EQ(sr.state, CkptState::kStaged);
  std::vector<ListEntry> entries;
  bool more = true;
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &entries, &more).code(), StatusCode::kOk);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].state, CkptState::kStaged);
  auto out = ZeroState({3u << 20});
  auto out_spans = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, 1, out_spans}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(rr.tier, TierKind::kHostMemory);
  EXPECT_EQ(out, state);
}

TEST(CheckpointSaveRestoreBasics, GivenStepAndLatest) {
  TempDir dir("steps");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  Policy p;
  p.retention = 3;
  ASSERT_EQ(eng->SetPolicy(Tenant(4), 2, p).code(), StatusCode::kOk);
  for (uint64_t step : {1ull, 5ull, 6ull}) {
    auto st = MakeState({1000, 2000}, step);
    auto sp = Spans(st);
    SaveResult sr;
    ASSERT_EQ(eng->Save({Tenant(4), 2, step, sp, {}}, &sr).code(), StatusCode::kOk);
  }
  ASSERT_EQ(eng->Flush(30s).code(), StatusCode::kOk);
  for (uint64_t step : {1ull, 5ull, 6ull}) {
    auto out = ZeroState({1000, 2000});
    auto sp = Spans(out);
    RestoreResult rr;
    ASSERT_EQ(eng->Restore({Tenant(4), 2, step, sp}, &rr).code(), StatusCode::kOk);
    EXPECT_EQ(out, MakeState({1000, 2000}, step));
  }
  auto out = ZeroState({1000, 2000});
  auto sp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(4), 2, kLatestStep, sp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(rr.step, 6u);
  EXPECT_EQ(out, MakeState({1000, 2000}, 6));
}

TEST(CheckpointSaveRestoreBasics, ProbeReturnsMetadataAndWritesNothing) {
  TempDir dir("probe");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({70000, 5}, 2);
  auto sp = Spans(st);
  SaveResult sr;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 3, sp, Pattern(77, 2)}, &sr).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 3, 30s).code(), StatusCode::kOk);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, kLatestStep, {}}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(rr.step, 3u);
  EXPECT_EQ(rr.bytes, 70005u);
  EXPECT_EQ(rr.meta, Pattern(77, 2));
}

TEST(CheckpointSaveRestoreBasics, OverlappingDestinationsAreRefused) {
  TempDir dir("overlap");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({100, 100}, 2);
  auto sp = Spans(st);
  SaveResult sr;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &sr).code(), StatusCode::kOk);
  std::vector<uint8_t> out(150, 0);
  IoSpan dst[2] = {{out.data(), 100}, {out.data() + 50, 100}};
  RestoreResult rr;
  EXPECT_EQ(eng->Restore({Tenant(1), 1, 1, dst}, &rr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, std::vector<uint8_t>(150, 0));
}

TEST(CheckpointSaveRestoreBasics, LargeStateUsesParallelCopyAndSurvivesRestart) {
  TempDir dir("large");
  auto cfg = SmallConfig(dir.path());
  cfg.chunk_bytes = 1 << 20;
  cfg.staging_bytes = 16 << 20;
  cfg.parallel_copy_min_bytes = 1 << 20;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto state = MakeState({(5u << 20) + 3, (4u << 20) + 4093}, 3);
  auto spans = Spans(state);
  SaveResult sr;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 77, spans, Pattern(333, 3)}, &sr).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 77, 30s).code(), StatusCode::kOk);
  Stats st = eng->GetStats();
  EXPECT_EQ(st.free_chunks, st.pool_chunks);  // disk tier: staging returned
  ASSERT_EQ(st.tenants.size(), 1u);
  EXPECT_EQ(st.tenants[0].durable, 1u);
  EXPECT_GE(st.tenants[0].bytes_persisted, (9u << 20));
  eng.reset();
  eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  auto out = ZeroState({(5u << 20) + 3, (4u << 20) + 4093});
  auto out_spans = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, kLatestStep, out_spans}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, state);
  EXPECT_EQ(rr.meta, Pattern(333, 3));
}

}  // namespace
}  // namespace hz::checkpoint
