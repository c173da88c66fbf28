// Bad requests, limits and quotas, listing, deletion, retention, concurrency.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <mutex>
#include <thread>

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

class CheckpointRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("requests");
    Status err;
    eng_ = testing::OpenEngine(SmallConfig(dir_->path(), &sink_), &err);
    ASSERT_TRUE(eng_) << err;
  }
  Status SaveStep(TenantId t, StreamId s, uint64_t step, std::vector<size_t> sizes = {5000}) {
    auto st = MakeState(sizes, step);
    auto sp = Spans(st);
    SaveResult r;
    return eng_->Save({t, s, step, sp, {}}, &r);
  }
  std::vector<uint64_t> Steps(TenantId t, StreamId s) {
    std::vector<ListEntry> e;
    bool more = false;
    EXPECT_EQ(eng_->List(t, s, 0, 1000, &e, &more).code(), StatusCode::kOk);
    std::vector<uint64_t> out;
    for (auto& x : e) out.push_back(x.step);
    return out;
  }
  RecordingSink sink_;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Engine> eng_;
};

TEST_F(CheckpointRequests, UnknownStreamIsNotFound) {
  EXPECT_EQ(SaveStep(Tenant(1), 9, 1).code(), StatusCode::kNotFound);
  auto out = ZeroState({5000});
  auto sp = Spans(out);
  RestoreResult rr;
  EXPECT_EQ(eng_->Restore({Tenant(1), 9, kLatestStep, sp}, &rr).code(), StatusCode::kNotFound);
  std::vector<ListEntry> e;
  bool more;
  EXPECT_EQ(eng_->List(Tenant(1), 9, 0, 10, &e, &more).code(), StatusCode::kNotFound);
  EXPECT_EQ(eng_->Delete(Tenant(1), 9, 1).code(), StatusCode::kNotFound);
}

TEST_F(CheckpointRequests, MalformedSavesAreRefused) {
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  SaveResult r;
  EXPECT_EQ(eng_->Save({Tenant(1), 1, 1, {}, {}}, &r).code(),
            StatusCode::kInvalidArgument);  // zero slices
  IoSpan null_span{nullptr, 10};
  EXPECT_EQ(eng_->Save({Tenant(1), 1, 1, {&null_span, 1}, {}}, &r).code(),
            StatusCode::kInvalidArgument);
  uint8_t byte = 0;
  IoSpan ok{&byte, 1};
  EXPECT_EQ(eng_->Save({Tenant(1), 1, kLatestStep, {&ok, 1}, {}}, &r).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(eng_->Save({Tenant(1), 1, 0, {&ok, 1}, {}}, &r).code(),
            StatusCode::kInvalidArgument);  // 0 is not a step
  // Lengths whose sum overflows.
  IoSpan huge[2] = {{&byte, SIZE_MAX / 2}, {&byte, SIZE_MAX / 2}};
  EXPECT_EQ(eng_->Save({Tenant(1), 1, 1, huge, {}}, &r).code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointRequests, StepsIncreaseAboveWhatTheStreamHolds) {
  Policy p;
  p.retention = 5;
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 5).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 5).code(), StatusCode::kExists);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 6).code(), StatusCode::kOk);
  // Other streams and tenants have their own steps.
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 2, Policy{}).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->SetPolicy(Tenant(2), 1, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 2, 1).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(2), 1, 1).code(), StatusCode::kOk);
  // A tenant that goes back deletes the newer checkpoints, then saves again
  // from there (SPEC.md §7.5.2).
  ASSERT_EQ(eng_->Flush(30s).code(), StatusCode::kOk);
  EXPECT_EQ(eng_->Delete(Tenant(1), 1, kLatestStep).code(), StatusCode::kOk);  // step 6
  EXPECT_EQ(Steps(Tenant(1), 1), (std::vector<uint64_t>{5}));
  EXPECT_EQ(SaveStep(Tenant(1), 1, 6).code(), StatusCode::kOk);
  EXPECT_EQ(eng_->Delete(Tenant(1), 1, 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointRequests, RestoreLayoutMustMatch) {
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  ASSERT_EQ(SaveStep(Tenant(1), 1, 1, {100, 200}).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->Flush(30s).code(), StatusCode::kOk);
  RestoreResult rr;
  for (std::vector<size_t> sizes :
       {std::vector<size_t>{100}, {100, 201}, {99, 200}, {200, 100}, {100, 200, 0}}) {
    auto out = ZeroState(sizes);
    auto sp = Spans(out);
    EXPECT_EQ(eng_->Restore({Tenant(1), 1, 1, sp}, &rr).code(), StatusCode::kInvalidArgument);
    for (auto& b : out) {
      for (uint8_t v : b) ASSERT_EQ(v, 0);  // nothing written on refusal
    }
  }
  auto out = ZeroState({100, 200});
  auto sp = Spans(out);
  EXPECT_EQ(eng_->Restore({Tenant(1), 1, 2, sp}, &rr).code(),
            StatusCode::kNotFound);  // no such step
  EXPECT_EQ(eng_->Restore({Tenant(1), 1, 1, sp}, &rr).code(), StatusCode::kOk);
}

TEST_F(CheckpointRequests, PolicyValidationAndStreamLimit) {
  Policy bad;
  bad.retention = 0;
  EXPECT_EQ(eng_->SetPolicy(Tenant(1), 1, bad).code(), StatusCode::kInvalidArgument);
  Policy peer;
  peer.tier = TierKind::kPeerHost;  // without a peer link (not in a cluster)
  EXPECT_EQ(eng_->SetPolicy(Tenant(1), 1, peer).code(), StatusCode::kNotSupported);
  EXPECT_EQ(eng_->SetPolicy(Tenant(1), 0, Policy{}).code(),
            StatusCode::kInvalidArgument);  // stream 0 is reserved
  TenantLimits lim;
  lim.max_streams = 2;
  ASSERT_EQ(eng_->SetLimits(Tenant(3), lim).code(), StatusCode::kOk);
  EXPECT_EQ(eng_->SetPolicy(Tenant(3), 1, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(eng_->SetPolicy(Tenant(3), 2, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(eng_->SetPolicy(Tenant(3), 3, Policy{}).code(), StatusCode::kLimit);
  EXPECT_EQ(eng_->SetPolicy(Tenant(3), 2, Policy{}).code(),
            StatusCode::kOk);  // updating is not a new stream
}

TEST_F(CheckpointRequests, StagingQuotaAndPoolSizeGiveLimit) {
  TenantLimits lim;
  lim.staging_bytes = 256 << 10;  // four 64 KiB chunks
  ASSERT_EQ(eng_->SetLimits(Tenant(1), lim).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 1, {(256 << 10) + 1}).code(), StatusCode::kLimit);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 1, {256 << 10}).code(),
            StatusCode::kOk);  // the refused step stays free
  // Larger than the whole pool: never admissible, whatever the quota.
  ASSERT_EQ(eng_->SetPolicy(Tenant(2), 1, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(2), 1, 1, {(4u << 20) + 1}).code(), StatusCode::kLimit);
}

TEST_F(CheckpointRequests, DiskQuotaGivesLimit) {
  TenantLimits lim;
  lim.disk_bytes = 3 * 8192;
  ASSERT_EQ(eng_->SetLimits(Tenant(1), lim).code(), StatusCode::kOk);
  Policy p;
  p.retention = 5;
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 1, {8000}).code(), StatusCode::kOk);  // 8 KiB on disk each
  EXPECT_EQ(SaveStep(Tenant(1), 1, 2, {8000}).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 3, {8000}).code(), StatusCode::kOk);
  EXPECT_EQ(SaveStep(Tenant(1), 1, 4, {8000}).code(), StatusCode::kLimit);
  ASSERT_EQ(eng_->Flush(30s).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->Delete(Tenant(1), 1, 1).code(), StatusCode::kOk);  // frees room
  EXPECT_EQ(SaveStep(Tenant(1), 1, 4, {8000}).code(), StatusCode::kOk);
  Stats st = eng_->GetStats();
  for (auto& t : st.tenants) {
    if (t.tenant == Tenant(1)) {
      EXPECT_EQ(t.disk_bytes, 3u * 8192);
    }
  }
}

TEST_F(CheckpointRequests, FullStagingPoolBackpressuresThenAgain) {
  // A slow disk (throttled) keeps chunks staged; a short stall budget then
  // turns a save that does not fit into kAgain, and memory stays bounded.
  TempDir dir("again");
  auto cfg = SmallConfig(dir.path());
  cfg.disk_bandwidth_bytes_per_s = 1 << 20;
  cfg.staging_bytes = 1 << 20;  // 16 chunks
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  Policy p;
  p.stall_budget_ms = 50;
  p.retention = 10;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  auto st = MakeState({768 << 10}, 1);  // 12 chunks
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Save({Tenant(1), 1, 2, sp, {}}, &r).code(), StatusCode::kTryAgain);
  Stats stats = eng->GetStats();
  EXPECT_LE(stats.pool_chunks - stats.free_chunks, 16u);
  ASSERT_EQ(stats.tenants.size(), 1u);
  EXPECT_EQ(stats.tenants[0].saves_again, 1u);
  bool rejected = false;
  for (const Decision& d : eng->Decisions()) {
    rejected |= d.kind == Decision::Kind::kRejectAgain && d.step == 2;
  }
  EXPECT_TRUE(rejected);
  // With a budget long enough for the persist to free chunks, the save waits
  // (backpressure) and succeeds with the same step.
  p.stall_budget_ms = 60000;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Save({Tenant(1), 1, 2, sp, {}}, &r).code(), StatusCode::kOk);
  bool waited = false;
  for (const Decision& d : eng->Decisions()) {
    waited |= d.kind == Decision::Kind::kBackpressure && d.step == 2 && d.value > 0;
  }
  EXPECT_TRUE(waited);
  ASSERT_EQ(eng->Flush(60s).code(), StatusCode::kOk);
  EXPECT_EQ(eng->GetStats().free_chunks, eng->GetStats().pool_chunks);
}

TEST_F(CheckpointRequests, ListPagesInStepOrder) {
  Policy p;
  p.retention = 100;
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  for (uint64_t s = 1; s <= 25; ++s)
    ASSERT_EQ(SaveStep(Tenant(1), 1, s * 10, {100}).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->Flush(30s).code(), StatusCode::kOk);
  std::vector<uint64_t> seen;
  uint64_t after = 0;
  bool more = true;
  int pages = 0;
  while (more) {
    std::vector<ListEntry> e;
    ASSERT_EQ(eng_->List(Tenant(1), 1, after, 7, &e, &more).code(), StatusCode::kOk);
    ASSERT_LE(e.size(), 7u);
    for (auto& x : e) {
      seen.push_back(x.step);
      EXPECT_EQ(x.state, CkptState::kDurable);
      EXPECT_EQ(x.tier, TierKind::kLocalDisk);
      EXPECT_EQ(x.bytes, 100u);
      EXPECT_EQ(x.time_s % 10, 0u);
    }
    if (!e.empty()) after = e.back().step;
    ++pages;
  }
  EXPECT_EQ(pages, 4);
  ASSERT_EQ(seen.size(), 25u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], (i + 1) * 10);
  // max_entries 0: nothing returned, but "more" says whether any exist.
  std::vector<ListEntry> e;
  ASSERT_EQ(eng_->List(Tenant(1), 1, 0, 0, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
  EXPECT_TRUE(more);
  ASSERT_EQ(eng_->List(Tenant(1), 1, 250, 0, &e, &more).code(), StatusCode::kOk);
  EXPECT_FALSE(more);
}

TEST_F(CheckpointRequests, RetentionKeepsTheNewestDurable) {
  Policy p;
  p.retention = 2;
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  for (uint64_t s = 1; s <= 5; ++s) {
    ASSERT_EQ(SaveStep(Tenant(1), 1, s).code(), StatusCode::kOk);
    ASSERT_EQ(eng_->WaitDurable(Tenant(1), 1, s, 30s).code(), StatusCode::kOk);
  }
  EXPECT_EQ(Steps(Tenant(1), 1), (std::vector<uint64_t>{4, 5}));
  EXPECT_FALSE(std::filesystem::exists(testing::StepDir(dir_->path(), Tenant(1), 1, 3)));
  EXPECT_TRUE(std::filesystem::exists(testing::StepDir(dir_->path(), Tenant(1), 1, 5)));
  // Lowering retention evicts at once.
  p.retention = 1;
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  EXPECT_EQ(Steps(Tenant(1), 1), (std::vector<uint64_t>{5}));
}

TEST_F(CheckpointRequests, DeleteRemovesFilesAndIndex) {
  Policy p;
  p.retention = 3;
  ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  ASSERT_EQ(SaveStep(Tenant(1), 1, 1).code(), StatusCode::kOk);
  ASSERT_EQ(SaveStep(Tenant(1), 1, 2).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->Flush(30s).code(), StatusCode::kOk);
  ASSERT_EQ(eng_->Delete(Tenant(1), 1, 1).code(), StatusCode::kOk);
  EXPECT_EQ(eng_->Delete(Tenant(1), 1, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(Steps(Tenant(1), 1), (std::vector<uint64_t>{2}));
  EXPECT_FALSE(std::filesystem::exists(testing::StepDir(dir_->path(), Tenant(1), 1, 1)));
  // Survives a restart.
  eng_.reset();
  eng_ = testing::OpenEngine(SmallConfig(dir_->path()));
  ASSERT_TRUE(eng_);
  EXPECT_EQ(Steps(Tenant(1), 1), (std::vector<uint64_t>{2}));
}

TEST_F(CheckpointRequests, DeleteWhilePersistingCancelsCleanly) {
  TempDir dir("cancel");
  auto cfg = SmallConfig(dir.path());
  cfg.disk_bandwidth_bytes_per_s = 64 << 10;  // ~1 s for 64 KiB chunks
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({1 << 20}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Delete(Tenant(1), 1, 1).code(), StatusCode::kOk);
  EXPECT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 1s).code(), StatusCode::kNotFound);
  ASSERT_EQ(eng->Flush(60s).code(), StatusCode::kOk);
  EXPECT_FALSE(std::filesystem::exists(testing::StepDir(dir.path(), Tenant(1), 1, 1)));
  Stats stats = eng->GetStats();
  EXPECT_EQ(stats.free_chunks, stats.pool_chunks);
  EXPECT_EQ(stats.tenants[0].disk_bytes, 0u);
}

TEST_F(CheckpointRequests, ChunksHeldBackByTheDiskCountAsStorageWaiting) {
  TempDir dir("storage_waiting");
  auto cfg = SmallConfig(dir.path());
  cfg.disk_bandwidth_bytes_per_s = 256 << 10;  // the disk the operator allows is the bottleneck
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  EXPECT_EQ(eng->StorageWaiting().waiting_ns, 0u);  // nothing to persist, nothing waits
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({1 << 20}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 60s).code(), StatusCode::kOk);
  // About 4 s of chunks held back for the bandwidth: most of it waited.
  WaitingTime w = eng->StorageWaiting();
  EXPECT_GT(w.waiting_ns, w.window_ns / 10) << w.waiting_ns << " of " << w.window_ns;
  EXPECT_LE(w.waiting_ns, w.window_ns);
}

TEST_F(CheckpointRequests, ConcurrentTenantsEachRestoreTheirOwn) {
  constexpr int kTenants = 4;
  constexpr int kSteps = 6;
  for (int t = 1; t <= kTenants; ++t) {
    Policy p;
    p.retention = 2;
    p.stall_budget_ms = 60000;
    ASSERT_EQ(eng_->SetPolicy(Tenant(t), 1, p).code(), StatusCode::kOk);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 1; t <= kTenants; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t s = 1; s <= kSteps; ++s) {
        auto st = MakeState({70000, 12345}, t * 100 + s);
        auto sp = Spans(st);
        SaveResult r;
        if (!eng_->Save({Tenant(t), 1, s, sp, {}}, &r).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(eng_->Flush(60s).code(), StatusCode::kOk);
  for (int t = 1; t <= kTenants; ++t) {
    auto out = ZeroState({70000, 12345});
    auto sp = Spans(out);
    RestoreResult rr;
    ASSERT_EQ(eng_->Restore({Tenant(t), 1, kLatestStep, sp}, &rr).code(), StatusCode::kOk);
    EXPECT_EQ(rr.step, static_cast<uint64_t>(kSteps));
    EXPECT_EQ(out, MakeState({70000, 12345}, t * 100 + kSteps));
    EXPECT_EQ(Steps(Tenant(t), 1), (std::vector<uint64_t>{kSteps - 1, kSteps}));
    EXPECT_EQ(sink_.Count(EventKind::kDurable, Tenant(t), 1, kSteps), 1u);
  }
}

// A save waiting for staging stops when its caller cancels it: no checkpoint,
// and the chunks and the disk quota it had reserved come back.
TEST(CheckpointCancel, WaitingSaveStopsWhenCancelled) {
  TempDir dir("cancelwait");
  auto cfg = SmallConfig(dir.path());
  cfg.staging_bytes = 4 * cfg.chunk_bytes;
  cfg.memory_tier_bytes = 2 * cfg.chunk_bytes;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  Policy mem;
  mem.tier = TierKind::kHostMemory;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, mem).code(), StatusCode::kOk);
  Policy disk;
  disk.stall_budget_ms = 600000;  // only the cancel ends the wait
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 2, disk).code(), StatusCode::kOk);
  auto held = MakeState({2 * cfg.chunk_bytes}, 1);
  auto held_spans = Spans(held);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, held_spans, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(r.state, CkptState::kDurable);  // holds two of the four chunks

  auto big = MakeState({3 * cfg.chunk_bytes}, 2);
  auto big_spans = Spans(big);
  SaveRequest req{Tenant(1), 2, 1, big_spans, {}};
  std::atomic<int> polls{0};
  // Polled while the save waits; the third poll cancels it.
  req.cancelled = [&polls] { return polls.fetch_add(1) >= 2; };
  EXPECT_EQ(eng->Save(req, &r).code(), StatusCode::kAborted);
  EXPECT_GE(polls.load(), 3);
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(eng->List(Tenant(1), 2, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
  Stats stats = eng->GetStats();
  EXPECT_EQ(stats.free_chunks, 2u);
  ASSERT_EQ(stats.tenants.size(), 1u);
  EXPECT_EQ(stats.tenants[0].disk_bytes, 0u);
  // The stream is not left busy: the same step saves once staging is free.
  ASSERT_EQ(eng->Delete(Tenant(1), 1, 1).code(), StatusCode::kOk);
  req.cancelled = nullptr;
  EXPECT_EQ(eng->Save(req, &r).code(), StatusCode::kOk);
}

TEST(CheckpointCancel, CancelledRestoreWritesNothing) {
  TempDir dir("cancelrestore");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({300000}, 4);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);
  auto out = ZeroState({300000});
  auto out_spans = Spans(out);
  RestoreRequest rq{Tenant(1), 1, 1, out_spans};
  rq.cancelled = [] { return true; };
  RestoreResult rr;
  EXPECT_EQ(eng->Restore(rq, &rr).code(), StatusCode::kAborted);
  EXPECT_EQ(out, ZeroState({300000}));
  rq.cancelled = nullptr;
  EXPECT_EQ(eng->Restore(rq, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, st);
}

// RunAsync work runs on the engine's threads, in order, and every queued
// piece still runs when the engine is destroyed.
TEST(CheckpointAsync, RunAsyncRunsEveryPieceOffTheCaller) {
  TempDir dir("async");
  auto cfg = SmallConfig(dir.path());
  cfg.request_threads = 1;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    eng->RunAsync(Tenant(1), [&, i] {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  eng.reset();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  for (auto id : threads) EXPECT_NE(id, std::this_thread::get_id());
}

// The engine's threads are bulk work: at thread_nice they give way to the
// threads that serve requests.
TEST(CheckpointAsync, EngineThreadsRunAtThreadNice) {
  if (getpriority(PRIO_PROCESS, 0) > 6) GTEST_SKIP() << "lowering a nice value needs privilege";
  TempDir dir("nice");
  auto cfg = SmallConfig(dir.path());
  cfg.thread_nice = 6;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  std::atomic<int> seen{-100};
  eng->RunAsync(Tenant(1), [&] {
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
    seen = errno == 0 ? nice : -100;
  });
  eng.reset();  // runs what is queued
  EXPECT_EQ(seen.load(), 6);
}

}  // namespace
}  // namespace hz::checkpoint
