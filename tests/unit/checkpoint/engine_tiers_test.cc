// Placement across tiers, the decisions log, staggering and recovery.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "hz/checkpoint/engine.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::MakeState;
using testing::RecordingSink;
using testing::SmallConfig;
using testing::Spans;
using testing::TempDir;
using testing::Tenant;
using testing::ZeroState;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool HasDecision(const Engine& e, Decision::Kind k, TenantId t, uint64_t step) {
  for (const Decision& d : e.Decisions()) {
    if (d.kind == k && d.tenant == t && d.step == step) return true;
  }
  return false;
}

TEST(CheckpointTiers, HostMemoryTierHoldsDurableCheckpointsWithoutDisk) {
  TempDir dir("memtier");
  RecordingSink sink;
  auto cfg = SmallConfig(dir.path(), &sink);  // 1 MiB memory tier
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  Policy p;
  p.tier = TierKind::kHostMemory;
  p.retention = 1;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  auto st = MakeState({200000}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  EXPECT_EQ(r.state, CkptState::kDurable);  // durable on completion in host memory
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);
  EXPECT_EQ(sink.Count(EventKind::kDurable, Tenant(1), 1, 1), 1u);
  EXPECT_TRUE(HasDecision(*eng, Decision::Kind::kPlaceMemory, Tenant(1), 1));
  EXPECT_FALSE(fs::exists(testing::StepDir(dir.path(), Tenant(1), 1, 1)));
  std::vector<ListEntry> e;
  bool more;
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].tier, TierKind::kHostMemory);
  EXPECT_EQ(e[0].state, CkptState::kDurable);
  Stats stats = eng->GetStats();
  EXPECT_EQ(stats.memory_tier_chunks, 4u);  // 200000 bytes in 64 KiB chunks
  EXPECT_EQ(stats.tenants[0].memory_tier_bytes, 4u * (64 << 10));

  auto out = ZeroState({200000});
  auto osp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, kLatestStep, osp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(rr.tier, TierKind::kHostMemory);
  EXPECT_EQ(out, st);

  // Retention 1: the next save replaces it and its chunks go back to the pool.
  auto st2 = MakeState({200000}, 2);
  auto sp2 = Spans(st2);
  ASSERT_EQ(eng->Save({Tenant(1), 1, 2, sp2, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 2, 30s).code(), StatusCode::kOk);
  EXPECT_EQ(eng->GetStats().memory_tier_chunks, 4u);
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].step, 2u);
  ASSERT_EQ(eng->Delete(Tenant(1), 1, 2).code(), StatusCode::kOk);
  EXPECT_EQ(eng->GetStats().memory_tier_chunks, 0u);
  EXPECT_EQ(eng->GetStats().free_chunks, eng->GetStats().pool_chunks);
}

TEST(CheckpointTiers, FullMemoryTierSpillsToDisk) {
  TempDir dir("spill");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));  // 1 MiB memory tier
  ASSERT_TRUE(eng);
  Policy p;
  p.tier = TierKind::kHostMemory;
  p.retention = 5;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  auto st = MakeState({600 << 10}, 1);  // 10 chunks
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Save({Tenant(1), 1, 2, sp, {}}, &r).code(),
            StatusCode::kOk);  // 20 chunks > 16 of budget
  ASSERT_EQ(eng->Flush(30s).code(), StatusCode::kOk);
  EXPECT_TRUE(HasDecision(*eng, Decision::Kind::kPlaceMemory, Tenant(1), 1));
  EXPECT_TRUE(HasDecision(*eng, Decision::Kind::kSpillToDisk, Tenant(1), 2));
  std::vector<ListEntry> e;
  bool more;
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].tier, TierKind::kHostMemory);
  EXPECT_EQ(e[1].tier, TierKind::kLocalDisk);
  EXPECT_TRUE(fs::exists(testing::StepDir(dir.path(), Tenant(1), 1, 2) + "/manifest.json"));
}

TEST(CheckpointTiers, PolicySurvivesRestartAndRetentionAppliesOnStartup) {
  TempDir dir("policy");
  {
    auto eng = testing::OpenEngine(SmallConfig(dir.path()));
    ASSERT_TRUE(eng);
    Policy p;
    p.retention = 3;
    ASSERT_EQ(eng->SetPolicy(Tenant(5), 7, p).code(), StatusCode::kOk);
    for (uint64_t s = 1; s <= 3; ++s) {
      auto st = MakeState({1000}, s);
      auto sp = Spans(st);
      SaveResult r;
      ASSERT_EQ(eng->Save({Tenant(5), 7, s, sp, {}}, &r).code(), StatusCode::kOk);
    }
    ASSERT_EQ(eng->Flush(30s).code(), StatusCode::kOk);
  }
  std::vector<ListEntry> e;
  bool more;
  {
    // The stream, its retention and its last step come back from disk.
    auto eng = testing::OpenEngine(SmallConfig(dir.path()));
    ASSERT_TRUE(eng);
    ASSERT_EQ(eng->List(Tenant(5), 7, 0, 10, &e, &more).code(), StatusCode::kOk);
    EXPECT_EQ(e.size(), 3u);
    auto st = MakeState({1000}, 4);
    auto sp = Spans(st);
    SaveResult r;
    EXPECT_EQ(eng->Save({Tenant(5), 7, 3, sp, {}}, &r).code(), StatusCode::kExists);
    EXPECT_EQ(eng->Save({Tenant(5), 7, 2, sp, {}}, &r).code(), StatusCode::kExists);
    EXPECT_EQ(eng->Save({Tenant(5), 7, 4, sp, {}}, &r).code(), StatusCode::kOk);
    ASSERT_EQ(eng->Flush(30s).code(), StatusCode::kOk);
    ASSERT_EQ(eng->List(Tenant(5), 7, 0, 10, &e, &more).code(), StatusCode::kOk);
    ASSERT_EQ(e.size(), 3u);
    EXPECT_EQ(e.front().step, 2u);
  }
  // A stream holding more than its retention (a crash between a commit and
  // its eviction) is trimmed at start-up.
  std::ofstream(testing::TenantDir(dir.path(), Tenant(5)) + "/7/policy.json")
      << R"({"retention":1,"tier":1})";
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->List(Tenant(5), 7, 0, 10, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].step, 4u);
  EXPECT_FALSE(fs::exists(testing::StepDir(dir.path(), Tenant(5), 7, 3)));
}

TEST(CheckpointTiers, MalformedPolicyFilesFallBackToDefaults) {
  TempDir dir("badpolicy");
  // The tenant's checkpoints are in directory 1, laid out before the engine opens.
  testing::NumberTenant(dir.path(), Tenant(1), 1);
  for (const char* text : {R"({"retention":"many","tier":[1],"rpo_s":-4})", "not json", "[]",
                           R"({"retention":99999999999,"auto_save_on_notice":"yes"})"}) {
    fs::remove_all(dir.path() + "/1");
    fs::create_directories(dir.path() + "/1/1");
    std::ofstream(dir.path() + "/1/1/policy.json") << text;
    auto eng = testing::OpenEngine(SmallConfig(dir.path()));
    ASSERT_TRUE(eng) << text;
    // The stream exists with a default policy and works.
    auto st = MakeState({10}, 1);
    auto sp = Spans(st);
    SaveResult r;
    EXPECT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk) << text;
  }
}

TEST(CheckpointTiers, StartupRemovesUncommittedLeftovers) {
  TempDir dir("leftovers");
  {
    auto eng = testing::OpenEngine(SmallConfig(dir.path()));
    ASSERT_TRUE(eng);
    ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  }
  // What a kill mid-persist leaves: a step directory with data and a temp manifest.
  std::string step = testing::StepDir(dir.path(), Tenant(1), 1, 9);
  fs::create_directories(step);
  std::ofstream(step + "/data") << "partial";
  std::ofstream(step + "/manifest.json.tmp") << "{\"body\":";
  std::ofstream(testing::TenantDir(dir.path(), Tenant(1)) + "/1/policy.json.tmp") << "{";
  // And a pending directory that never reached its rename.
  std::string pending = testing::StepDir(dir.path(), Tenant(1), 1, 10) + ".tmp";
  fs::create_directories(pending);
  std::ofstream(pending + "/data") << "partial";
  std::ofstream(pending + "/manifest.json") << "{}";
  // And a checkpoint retention had renamed out of the way but not yet removed.
  std::string retired = testing::StepDir(dir.path(), Tenant(1), 1, 8) + ".del";
  fs::create_directories(retired);
  std::ofstream(retired + "/data") << "old";
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  EXPECT_FALSE(fs::exists(step));
  EXPECT_FALSE(fs::exists(pending));
  EXPECT_FALSE(fs::exists(retired));
  EXPECT_FALSE(fs::exists(testing::TenantDir(dir.path(), Tenant(1)) + "/1/policy.json.tmp"));
  EXPECT_TRUE(fs::exists(testing::TenantDir(dir.path(), Tenant(1)) + "/1/policy.json"));
  bool cleaned = false;
  for (const Decision& d : eng->Decisions()) cleaned |= d.kind == Decision::Kind::kRecoveredCleanup;
  EXPECT_TRUE(cleaned);
  // Step 9 was never committed, so it can be saved now.
  auto st = MakeState({10}, 9);
  auto sp = Spans(st);
  SaveResult r;
  EXPECT_EQ(eng->Save({Tenant(1), 1, 9, sp, {}}, &r).code(), StatusCode::kOk);
}

TEST(CheckpointTiers, StaggerDelaysAnotherTenantsPersistStart) {
  TempDir dir("stagger");
  auto cfg = SmallConfig(dir.path());
  cfg.stagger_ms = 1000;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  Policy tight;
  tight.rpo_s = 0;
  ASSERT_EQ(eng->SetPolicy(Tenant(2), 1, tight).code(), StatusCode::kOk);
  auto st = MakeState({300000}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Save({Tenant(2), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Flush(30s).code(), StatusCode::kOk);
  // Exactly one of the two starts was delayed, by at most the stagger interval.
  int staggered = 0;
  for (const Decision& d : eng->Decisions()) {
    if (d.kind == Decision::Kind::kStagger) {
      ++staggered;
      EXPECT_LE(d.value, 1000000u);
      EXPECT_GT(d.value, 0u);
    }
  }
  EXPECT_EQ(staggered, 1);
}

TEST(CheckpointTiers, TwoTenantsUnderABandwidthCapBothComplete) {
  // The token-bucket path in the engine: both persists complete under the
  // cap (the shares themselves are checked with a fake clock in
  // fair_scheduler_test.cc).
  TempDir dir("share");
  auto cfg = SmallConfig(dir.path());
  cfg.disk_bandwidth_bytes_per_s = 4 << 20;
  cfg.staging_bytes = 8 << 20;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  ASSERT_EQ(eng->SetPolicy(Tenant(2), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({1 << 20}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Save({Tenant(2), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->Flush(60s).code(), StatusCode::kOk);
  Stats s = eng->GetStats();
  ASSERT_EQ(s.tenants.size(), 2u);
  EXPECT_EQ(s.tenants[0].bytes_persisted, s.tenants[1].bytes_persisted);
  EXPECT_EQ(s.tenants[0].durable, 1u);
  EXPECT_EQ(s.tenants[1].durable, 1u);
}

TEST(CheckpointTiers, BufferedFallbackWhenDirectIoIsOff) {
  TempDir dir("buffered");
  auto cfg = SmallConfig(dir.path());
  cfg.direct_io = false;
  cfg.register_buffers = false;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  EXPECT_FALSE(eng->GetStats().direct_io);
  EXPECT_FALSE(eng->GetStats().registered_buffers);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({123457, 5}, 4);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);
  eng.reset();
  eng = testing::OpenEngine(cfg);
  auto out = ZeroState({123457, 5});
  auto osp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, 1, osp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, st);
}

// A process started after a crash serves before its staging memory is
// faulted in (EngineConfig::populate_staging_later): checkpoints work
// before PrepareStaging and while it runs, and the buffers end up
// registered wherever an engine opened the usual way registers them.
TEST(CheckpointTiers, StagingPreparedAfterOpenServesCheckpointsAllAlong) {
  TempDir dir("staging-later");
  auto cfg = SmallConfig(dir.path());
  bool registers = false;
  {
    auto usual = testing::OpenEngine(cfg);
    ASSERT_TRUE(usual);
    registers = usual->GetStats().registered_buffers;
  }
  cfg.populate_staging_later = true;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  EXPECT_FALSE(eng->GetStats().registered_buffers);
  Policy keep_two;
  keep_two.retention = 2;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, keep_two).code(), StatusCode::kOk);
  auto before = MakeState({100000, 77}, 4);
  auto bsp = Spans(before);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, bsp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);

  eng->PrepareStaging();
  auto during = MakeState({100000, 77}, 9);
  auto dsp = Spans(during);
  ASSERT_EQ(eng->Save({Tenant(1), 1, 2, dsp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 2, 30s).code(), StatusCode::kOk);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (registers && !eng->GetStats().registered_buffers &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(eng->GetStats().registered_buffers, registers);

  eng.reset();
  eng = testing::OpenEngine(SmallConfig(dir.path()));
  for (auto [step, want] : {std::pair{uint64_t{1}, &before}, {uint64_t{2}, &during}}) {
    auto out = ZeroState({100000, 77});
    auto osp = Spans(out);
    RestoreResult rr;
    ASSERT_EQ(eng->Restore({Tenant(1), 1, step, osp}, &rr).code(), StatusCode::kOk);
    EXPECT_EQ(out, *want) << "step " << step;
  }
}

TEST(CheckpointTiers, DirectIoAndRegisteredBuffersOnTheBuildFilesystem) {
  TempDir dir("direct");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  auto st = MakeState({100000}, 4);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);
  // The engine uses O_DIRECT exactly where the filesystem accepts it (ext4,
  // xfs), and falls back (and says so in Stats) where it does not (tmpfs).
  std::string probe = dir.path() + "/probe";
  int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  bool fs_direct = fd >= 0;
  if (fd >= 0) close(fd);
  Stats s = eng->GetStats();
  RecordProperty("direct_io", s.direct_io ? "yes" : "no");
  RecordProperty("registered_buffers", s.registered_buffers ? "yes" : "no");
  EXPECT_EQ(s.direct_io, fs_direct);
}

}  // namespace
}  // namespace hz::checkpoint

namespace hz::checkpoint {
namespace {

TEST(CheckpointTiers, PersistFailureIsReportedAndKeptInMemory) {
  TempDir dir("persist-fail");
  RecordingSink sink;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink));
  ASSERT_TRUE(eng);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  // The stream directory turns into a file: no step directory can be created.
  const std::string stream_dir = testing::TenantDir(dir.path(), Tenant(1)) + "/1";
  fs::remove_all(stream_dir);
  std::ofstream(stream_dir) << "not a directory";
  auto st = MakeState({100000}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  EXPECT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kIoError);
  EXPECT_EQ(sink.Count(EventKind::kFailed, Tenant(1), 1, 1), 1u);
  EXPECT_EQ(sink.Count(EventKind::kDurable, Tenant(1), 1, 1), 0u);
  // It stays restorable as STAGED from host memory (SPEC.md §7.5.2).
  std::vector<ListEntry> e;
  bool more;
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].state, CkptState::kStaged);
  EXPECT_EQ(e[0].tier, TierKind::kHostMemory);
  auto out = ZeroState({100000});
  auto osp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, 1, osp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, st);
  EXPECT_TRUE(HasDecision(*eng, Decision::Kind::kKeepAfterFailure, Tenant(1), 1));
  Stats s = eng->GetStats();
  ASSERT_EQ(s.tenants.size(), 1u);
  EXPECT_EQ(s.tenants[0].persist_failures, 1u);
  EXPECT_EQ(s.tenants[0].disk_bytes, 0u);
  // Deleting it gives everything back.
  ASSERT_EQ(eng->Delete(Tenant(1), 1, 1).code(), StatusCode::kOk);
  s = eng->GetStats();
  EXPECT_EQ(s.free_chunks, s.pool_chunks);
  EXPECT_EQ(s.memory_tier_chunks, 0u);
}

}  // namespace
}  // namespace hz::checkpoint

namespace hz::checkpoint {
namespace {

TEST(CheckpointTiers, PersistLaterThanTheRpoIsCounted) {
  // The token bucket makes this persist take at least 1.5 s (a lower bound,
  // not a race): 320 KiB at 128 KiB/s with 128 KiB of initial burst.
  TempDir dir("rpo");
  auto cfg = SmallConfig(dir.path());
  cfg.disk_bandwidth_bytes_per_s = 128 << 10;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  Policy p;
  p.rpo_s = 1;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  auto st = MakeState({320 << 10}, 1);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(eng->Save({Tenant(1), 1, 1, sp, {}}, &r).code(), StatusCode::kOk);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, 1, 60s).code(), StatusCode::kOk);
  Stats s = eng->GetStats();
  ASSERT_EQ(s.tenants.size(), 1u);
  EXPECT_EQ(s.tenants[0].rpo_misses, 1u);
  EXPECT_GE(s.tenants[0].persist_busy_us, 1000000u);
}

}  // namespace
}  // namespace hz::checkpoint
