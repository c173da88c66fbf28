// What a tenant's quiescence registration may cost the provider: a
// registration never waits, a stall budget never exceeds the operator's cap,
// and a registration that ends takes its running just-in-time copy with it.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include "hz/checkpoint/engine.h"
#include "quiesce.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::RecordingSink;
using testing::SmallConfig;
using testing::TempDir;
using testing::Tenant;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Generous bounds that only keep a broken engine from hanging the test.
constexpr auto kHang = 30s;

struct Live {
  alignas(8) hz_quiesce_word word{};
  std::vector<uint8_t> state;
  explicit Live(size_t bytes) : state(bytes, 0x5a) {}
  IoSpan word_span() { return {reinterpret_cast<uint8_t*>(&word), sizeof word}; }
  std::vector<IoSpan> spans() { return {{state.data(), state.size()}}; }
  void SetSeq(uint64_t v) { std::atomic_ref<uint64_t>(word.seq).store(v); }
};

Policy OnNotice(uint32_t stall_budget_ms = 1000) {
  Policy p;
  p.auto_save_on_notice = true;
  p.stall_budget_ms = stall_budget_ms;
  return p;
}

// The tenant's just-in-time copies running now.
uint32_t JitCopies(Engine& eng, const TenantId& tenant) {
  for (const TenantStats& t : eng.GetStats().tenants) {
    if (t.tenant == tenant) return t.jit_copies;
  }
  return 0;
}

// Waits (bounded) until the tenant's just-in-time copy is running.
bool WaitForCopy(Engine& eng, const TenantId& tenant) {
  const auto until = Clock::now() + kHang;
  while (Clock::now() < until) {
    if (JitCopies(eng, tenant) > 0) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// A registration whose staging memory is not free is refused (ELIMIT, SPEC
// §7.5.7) rather than waited for: the caller is a VM's connection thread,
// shared with other VMs, and a tenant can hold the memory itself for ever.
TEST(CheckpointJitBounds, ARegistrationThatDoesNotFitIsRefusedWithoutWaiting) {
  TempDir dir("jitb-fit");
  auto eng = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(eng);
  Live big(2 << 20);  // half the pool: all that registrations may hold together
  Live small(4096);
  ASSERT_TRUE(eng->SetPolicy(Tenant(1), 1, OnNotice()).ok());
  ASSERT_TRUE(eng->SetPolicy(Tenant(1), 2, OnNotice(UINT32_MAX)).ok());
  auto spans = big.spans();
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 1, big.word_span(), spans).code(), StatusCode::kOk);
  auto declare = std::async(std::launch::async, [&] {
    auto sp = small.spans();
    return eng->DeclareQuiesce(Tenant(1), 2, small.word_span(), sp);
  });
  const bool answered = declare.wait_for(kHang) == std::future_status::ready;
  if (!answered) (void)eng->CancelQuiesce(Tenant(1), 1);  // unblocks it
  EXPECT_TRUE(answered) << "CKPT_QUIESCE waited for staging memory";
  EXPECT_EQ(declare.get().code(), answered ? StatusCode::kLimit : StatusCode::kOk);
}

// A guest's stall budget is capped by the operator's maximum: a save that
// cannot get staging memory gives up (EAGAIN) after the cap, not after the
// 49 days a u32 of milliseconds allows.
TEST(CheckpointJitBounds, TheOperatorCapsTheStallBudget) {
  TempDir dir("jitb-cap");
  EngineConfig cfg = SmallConfig(dir.path());
  cfg.max_stall_budget_ms = 200;
  auto eng = testing::OpenEngine(cfg);
  ASSERT_TRUE(eng);
  // Tenant 1's registration holds all the staging memory its limit allows.
  TenantLimits limits;
  limits.staging_bytes = 128 << 10;
  ASSERT_TRUE(eng->SetLimits(Tenant(1), limits).ok());
  Live hog(128 << 10);
  ASSERT_TRUE(eng->SetPolicy(Tenant(1), 2, OnNotice()).ok());
  auto spans = hog.spans();
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 2, hog.word_span(), spans).code(), StatusCode::kOk);

  Policy p;
  p.stall_budget_ms = UINT32_MAX;
  ASSERT_TRUE(eng->SetPolicy(Tenant(1), 1, p).ok());
  std::vector<uint8_t> data(64 << 10, 1);
  auto save = std::async(std::launch::async, [&] {
    std::vector<IoSpan> sl = {{data.data(), data.size()}};
    SaveRequest req;
    req.tenant = Tenant(1);
    req.stream = 1;
    req.step = 1;
    req.slices = sl;
    SaveResult res;
    return eng->Save(req, &res);
  });
  const bool answered = save.wait_for(kHang) == std::future_status::ready;
  if (!answered) (void)eng->CancelQuiesce(Tenant(1), 2);  // unblocks it
  EXPECT_TRUE(answered) << "the save waited past the operator's stall cap";
  Status st = save.get();
  if (answered) {
    EXPECT_EQ(st.code(), StatusCode::kTryAgain) << st.ToString();
  }
}

// Ending a registration (cancel, clearing AUTO_SAVE_ON_NOTICE, replacing it)
// while a notice copies it: once the call returns, the engine no longer reads
// the registered memory, so the session may unpin and unmap it. The tenant
// holds seq odd, so an engine that does not stop the copy reads on until the
// notice's deadline.
void ExpectEndingStopsTheCopy(const std::function<Status(Engine&)>& end) {
  TempDir dir("jitb-end");
  RecordingSink sink;
  auto eng = testing::OpenEngine(SmallConfig(dir.path(), &sink));
  ASSERT_TRUE(eng);
  ASSERT_TRUE(eng->SetPolicy(Tenant(1), 1, OnNotice()).ok());
  Live live(256 << 10);
  live.SetSeq(1);
  auto spans = live.spans();
  ASSERT_EQ(eng->DeclareQuiesce(Tenant(1), 1, live.word_span(), spans).code(), StatusCode::kOk);
  auto notice =
      std::async(std::launch::async, [&] { return eng->OnNotice(Tenant(1), Clock::now() + 1h); });
  ASSERT_TRUE(WaitForCopy(*eng, Tenant(1)));
  Status st = end(*eng);
  // The copy has stopped reading by now (the notice itself may still be
  // publishing its outcome).
  const bool stopped = JitCopies(*eng, Tenant(1)) == 0;
  if (!stopped) live.SetSeq(2);  // lets a copy that kept reading finish
  ASSERT_EQ(notice.wait_for(kHang), std::future_status::ready);
  EXPECT_TRUE(stopped) << "the copy outlived its registration";
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto outcomes = notice.get();
  ASSERT_EQ(outcomes.size(), 1u);
  if (stopped) {
    EXPECT_FALSE(outcomes[0].status.ok());
    EXPECT_EQ(sink.Count(EventKind::kJitFailed, Tenant(1), 1, 0), 1u);
  }
  // Nothing is left reserved for the cancelled copy.
  (void)eng->CancelQuiesce(Tenant(1), 1);
  EXPECT_EQ(eng->GetStats().free_chunks, eng->GetStats().pool_chunks);
}

TEST(CheckpointJitBounds, CancellingARegistrationStopsItsRunningCopy) {
  ExpectEndingStopsTheCopy([](Engine& e) { return e.CancelQuiesce(Tenant(1), 1); });
}

TEST(CheckpointJitBounds, ClearingAutoSaveStopsTheRunningCopy) {
  ExpectEndingStopsTheCopy([](Engine& e) { return e.SetPolicy(Tenant(1), 1, Policy{}); });
}

TEST(CheckpointJitBounds, ReplacingARegistrationStopsTheOldOnesCopy) {
  Live other(4096);
  ExpectEndingStopsTheCopy([&](Engine& e) {
    auto sp = other.spans();
    return e.DeclareQuiesce(Tenant(1), 1, other.word_span(), sp);
  });
}

}  // namespace
}  // namespace hz::checkpoint
