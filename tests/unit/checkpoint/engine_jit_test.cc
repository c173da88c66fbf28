// Just-in-time saves on a notice, against a tenant that keeps mutating.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "hz/checkpoint/engine.h"
#include "quiesce.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::kSmallChunkBytes;
using testing::RecordingSink;
using testing::SmallConfig;
using testing::TempDir;
using testing::Tenant;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Tenant state: two slices of 64-bit words; at every consistent point every
// word of both slices equals the step.
struct LiveState {
  alignas(8) hz_quiesce_word word{};
  std::vector<uint64_t> a = std::vector<uint64_t>(40000, 0);
  std::vector<uint64_t> b = std::vector<uint64_t>(3001, 0);
  std::vector<IoSpan> spans() {
    return {{reinterpret_cast<uint8_t*>(a.data()), a.size() * 8},
            {reinterpret_cast<uint8_t*>(b.data()), b.size() * 8}};
  }
  IoSpan word_span() { return {reinterpret_cast<uint8_t*>(&word), sizeof word}; }
  void Update(uint64_t step) {
    SeqlockBeginWrite(reinterpret_cast<uint8_t*>(&word));
    for (auto& v : a) std::atomic_ref<uint64_t>(v).store(step, std::memory_order_relaxed);
    for (auto& v : b) std::atomic_ref<uint64_t>(v).store(step, std::memory_order_relaxed);
    SeqlockEndWrite(reinterpret_cast<uint8_t*>(&word), step);
  }
};

TEST(CheckpointJit, NoticeSnapshotsAConsistentStepWhileTheTenantMutates) {
  TempDir dir("jit");
  RecordingSink sink;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink));
  ASSERT_TRUE(eng);
  Policy p;
  p.auto_save_on_notice = true;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  LiveState live;
  live.Update(1);
  auto spans = live.spans();
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 1, live.word_span(), spans).code(), StatusCode::kOk);

  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t step = 2; !stop.load(); ++step) {
      live.Update(step);
      std::this_thread::sleep_for(200us);  // compute between updates
    }
  });
  auto outcomes = eng->OnNotice(Tenant(1), Clock::now() + 20s);
  stop = true;
  writer.join();
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_EQ(outcomes[0].status.code(), StatusCode::kOk);
  EXPECT_GE(outcomes[0].attempts, 1u);
  uint64_t step = outcomes[0].step;
  EXPECT_GE(step, 1u);
  EXPECT_EQ(sink.Count(EventKind::kJitSaved, Tenant(1), 1, step), 1u);
  ASSERT_EQ(eng->WaitDurable(Tenant(1), 1, step, 30s).code(), StatusCode::kOk);
  EXPECT_EQ(sink.Count(EventKind::kDurable, Tenant(1), 1, step), 1u);

  // The checkpoint is of that step, and consistent: every word equals it.
  LiveState out;
  auto out_spans = out.spans();
  RestoreResult rr;
  ASSERT_EQ(eng->Restore({Tenant(1), 1, step, out_spans}, &rr).code(), StatusCode::kOk);
  for (uint64_t v : out.a) ASSERT_EQ(v, step);
  for (uint64_t v : out.b) ASSERT_EQ(v, step);
  bool logged = false;
  for (const Decision& d : eng->Decisions()) logged |= d.kind == Decision::Kind::kJit;
  EXPECT_TRUE(logged);
}

TEST(CheckpointJit, TenantStuckMidUpdateMissesTheDeadline) {
  TempDir dir("jit-miss");
  RecordingSink sink;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink));
  ASSERT_TRUE(eng);
  Policy p;
  p.auto_save_on_notice = true;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, p).code(), StatusCode::kOk);
  LiveState live;
  live.word.seq = 3;  // odd: never consistent
  auto spans = live.spans();
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 1, live.word_span(), spans).code(), StatusCode::kOk);
  auto outcomes = eng->OnNotice(Tenant(1), Clock::now() + 50ms);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status.code(), StatusCode::kTimedOut);
  EXPECT_EQ(sink.Count(EventKind::kJitFailed, Tenant(1), 1, 0), 1u);
  std::vector<ListEntry> e;
  bool more;
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
  // Nothing leaked: only the registration's reservation is held.
  ASSERT_EQ(eng->CancelQuiesce(Tenant(1), 1).code(), StatusCode::kOk);
  EXPECT_EQ(eng->GetStats().free_chunks, eng->GetStats().pool_chunks);
}

TEST(CheckpointJit, OnlyOptedInDeclaredStreamsAreSaved) {
  TempDir dir("jit-opt");
  RecordingSink sink;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink));
  ASSERT_TRUE(eng);
  Policy in;
  in.auto_save_on_notice = true;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, in).code(), StatusCode::kOk);  // opted in, registered
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 2, in).code(),
            StatusCode::kOk);  // registered, then opted out
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 3, in).code(), StatusCode::kOk);  // opted in, not registered
  LiveState s1, s2;
  s1.Update(10);
  s2.Update(20);
  auto sp1 = s1.spans();
  auto sp2 = s2.spans();
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s1.word_span(), sp1).code(), StatusCode::kOk);
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 2, s2.word_span(), sp2).code(), StatusCode::kOk);
  // Clearing the flag cancels the registration and its staging reservation.
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 2, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(eng->CancelQuiesce(Tenant(1), 2).code(), StatusCode::kNotFound);
  auto outcomes = eng->OnNotice(Tenant(1), Clock::now() + 10s);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].stream, 1u);
  EXPECT_EQ(outcomes[0].step, 10u);
  EXPECT_FALSE(outcomes[0].existed);
  // A second notice at the same step adds nothing and is not an error.
  outcomes = eng->OnNotice(Tenant(1), Clock::now() + 10s);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status.code(), StatusCode::kOk);
  EXPECT_TRUE(outcomes[0].existed);
  EXPECT_EQ(sink.Count(EventKind::kJitSaved, Tenant(1), 1, 10), 2u);
  EXPECT_EQ(sink.existed_flags(), 1u);
  ASSERT_EQ(eng->Flush(30s).code(), StatusCode::kOk);
  std::vector<ListEntry> e;
  bool more;
  ASSERT_EQ(eng->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_EQ(e.size(), 1u);
  // Other tenants' notices do not touch this tenant.
  EXPECT_TRUE(eng->OnNotice(Tenant(2), Clock::now() + 1s).empty());
}

// A notice about some of the tenant's VMs saves only the streams they
// registered (the caller names them).
TEST(CheckpointJit, ANoticeSavesOnlyTheStreamsItNames) {
  TempDir dir("jit-only");
  RecordingSink sink;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink));
  ASSERT_TRUE(eng);
  Policy p;
  p.auto_save_on_notice = true;
  LiveState s1, s2;
  s1.Update(10);
  s2.Update(20);
  auto sp1 = s1.spans();
  auto sp2 = s2.spans();
  for (StreamId id : {1u, 2u}) ASSERT_EQ(eng->SetPolicy(Tenant(1), id, p).code(), StatusCode::kOk);
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s1.word_span(), sp1).code(), StatusCode::kOk);
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 2, s2.word_span(), sp2).code(), StatusCode::kOk);
  const std::set<StreamId> only = {2};
  auto outcomes = eng->OnNotice(Tenant(1), Clock::now() + 10s, &only);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].stream, 2u);
  EXPECT_EQ(outcomes[0].step, 20u);
  EXPECT_EQ(sink.Count(EventKind::kJitSaved, Tenant(1), 1, 10), 0u);
  const std::set<StreamId> none;
  EXPECT_TRUE(eng->OnNotice(Tenant(1), Clock::now() + 10s, &none).empty());
}

TEST(CheckpointJit, DeclarationsAreValidated) {
  TempDir dir("jit-decl");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  LiveState s;
  auto sp = s.spans();
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s.word_span(), sp).code(), StatusCode::kNotFound);
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s.word_span(), sp).code(),
            StatusCode::kState);  // not opted in
  Policy in;
  in.auto_save_on_notice = true;
  ASSERT_EQ(eng->SetPolicy(Tenant(1), 1, in).code(), StatusCode::kOk);
  IoSpan short_word{reinterpret_cast<uint8_t*>(&s.word), 8};
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, short_word, sp).code(), StatusCode::kInvalidArgument);
  IoSpan misaligned{reinterpret_cast<uint8_t*>(s.a.data()) + 1, 16};
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, misaligned, sp).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s.word_span(), {}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s.word_span(), sp).code(), StatusCode::kOk);
  // The registration sets staging memory aside (SPEC.md §7.5.7) ...
  size_t state_chunks = (s.a.size() * 8 + s.b.size() * 8 + kSmallChunkBytes - 1) / kSmallChunkBytes;
  EXPECT_EQ(eng->GetStats().tenants[0].staging_bytes, state_chunks * kSmallChunkBytes);
  EXPECT_EQ(eng->CancelQuiesce(Tenant(1), 1).code(), StatusCode::kOk);
  EXPECT_EQ(eng->GetStats().tenants[0].staging_bytes, 0u);
  EXPECT_EQ(eng->CancelQuiesce(Tenant(1), 1).code(), StatusCode::kNotFound);
  // ... and is refused when the tenant's staging quota cannot hold it.
  TenantLimits lim;
  lim.staging_bytes = 64 << 10;
  ASSERT_EQ(eng->SetLimits(Tenant(1), lim).code(), StatusCode::kOk);
  EXPECT_EQ(eng->DeclareQuiesce(Tenant(1), 1, s.word_span(), sp).code(), StatusCode::kLimit);
}

}  // namespace
}  // namespace hz::checkpoint
