// Detaching from a VM whose guest takes its time: the wait runs without the
// scheduler's lock, so other tenants go on, and the devices being detached
// are never handed out before the guest let go of them, nor after it did not.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "hz/scheduler/scheduler.h"
#include "slow_guest_attacher.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using testing::AllocationBdfs;
using testing::kBound;
using testing::LetGoAtEnd;
using testing::RecordingSink;
using testing::SlowGuestAttacher;
using testing::TempDir;

class SchedulerSlowDetach : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = testing::FixtureSchedulerOptions("hgx8", dir_.path());
    Reopen();
    ASSERT_TRUE(sched_->BindTenant(TenantId("slow"), SlowGuestAttacher::kSlowVm).ok());
    ASSERT_TRUE(sched_->BindTenant(TenantId("quick"), "vm-quick").ok());
  }
  void Reopen() {
    sched_.reset();
    Status s = Scheduler::Open(options_, &attacher_, &sink_, &sched_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::set<std::string> Bdfs(uint64_t id) { return AllocationBdfs(*sched_, id); }
  nlohmann::json AllocationJson(uint64_t id) {
    for (const auto& a : sched_->Allocations()) {
      if (a["id"] == id) return a;
    }
    return nullptr;
  }
  std::string StateOf(const std::string& bdf) {
    for (const auto& d : sched_->Inventory()) {
      if (d["bdf"] == bdf) return d["state"].get<std::string>();
    }
    return "absent";
  }
  // Runs fn on a thread of its own.
  template <typename Fn>
  static auto Async(Fn fn) {
    return std::async(std::launch::async, std::move(fn));
  }
  template <typename T>
  static bool Finishes(std::future<T>& f) {
    return f.wait_for(kBound) == std::future_status::ready;
  }

  TempDir dir_;
  SchedulerOptions options_;
  SlowGuestAttacher attacher_;
  RecordingSink sink_;
  std::unique_ptr<Scheduler> sched_;
};

// What another tenant and the operator saw while the slow guest had not let go.
struct Meanwhile {
  Status allocated;
  std::set<std::string> quick_devices;
  nlohmann::json slow_allocation;
  std::string slow_device_state;
  Status second_release;
  Status forget_slow;
  Status quick_released;
};

TEST_F(SchedulerSlowDetach, ReleaseWaitingForItsGuestBlocksNoOtherTenant) {
  uint64_t slow = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("slow"), {2, 0, HZ_LOC_ANY}, &slow).ok());
  const std::set<std::string> slow_devices = Bdfs(slow);
  auto release = Async([&] { return sched_->Release(slow); });
  LetGoAtEnd let_go(&attacher_);
  ASSERT_TRUE(attacher_.WaitForSlowDetach());

  auto others = Async([&] {
    Meanwhile m;
    uint64_t quick = 0;
    m.allocated = sched_->Allocate(TenantId("quick"), {2, 0, HZ_LOC_ANY}, &quick);
    m.quick_devices = Bdfs(quick);
    m.slow_allocation = AllocationJson(slow);
    m.slow_device_state = StateOf(*slow_devices.begin());
    m.second_release = sched_->Release(slow);
    m.forget_slow = sched_->ForgetTenant(TenantId("slow"));
    m.quick_released = sched_->Release(quick);
    return m;
  });
  const bool prompt = Finishes(others);
  attacher_.LetGo(Status::Ok());
  EXPECT_TRUE(prompt) << "another tenant waited for the slow guest";
  ASSERT_TRUE(Finishes(release));
  EXPECT_TRUE(release.get().ok());

  const Meanwhile m = others.get();
  EXPECT_TRUE(m.allocated.ok()) << m.allocated.ToString();
  EXPECT_EQ(m.quick_devices.size(), 2u);
  for (const std::string& b : m.quick_devices) EXPECT_FALSE(slow_devices.count(b)) << b;
  EXPECT_TRUE(m.quick_released.ok()) << m.quick_released.ToString();
  // The operator sees the release under way; a second one is refused, and
  // so is removing the tenant.
  ASSERT_TRUE(m.slow_allocation.is_object());
  ASSERT_TRUE(m.slow_allocation.contains("releasing")) << m.slow_allocation.dump();
  EXPECT_EQ(m.slow_allocation["releasing"].size(), 2u);
  EXPECT_EQ(m.slow_device_state, "releasing");
  EXPECT_EQ(m.second_release.code(), StatusCode::kBusy);
  EXPECT_EQ(m.forget_slow.code(), StatusCode::kBusy);

  // The release finished once the guest let go.
  EXPECT_TRUE(sched_->Allocations().empty());
  for (const std::string& b : slow_devices) {
    EXPECT_FALSE(attacher_.Attached(b)) << b;
    EXPECT_EQ(StateOf(b), "free") << b;
  }
}

TEST_F(SchedulerSlowDetach, DevicesLeavingAVmAreNotHandedOutNorAfterTheGuestKeptThem) {
  // Every GPU is the slow tenant's.
  uint64_t slow = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("slow"), {8, 0, HZ_LOC_ANY}, &slow).ok());
  auto release = Async([&] { return sched_->Release(slow); });
  LetGoAtEnd let_go(&attacher_);
  ASSERT_TRUE(attacher_.WaitForSlowDetach());

  auto meanwhile = Async([&] {
    uint64_t id = 0;
    return sched_->Allocate(TenantId("quick"), {1, 0, HZ_LOC_ANY}, &id);
  });
  ASSERT_TRUE(Finishes(meanwhile)) << "another tenant waited for the slow guest";
  EXPECT_EQ(meanwhile.get().code(), StatusCode::kLimit);

  // The guest never lets go: the devices stay the tenant's, and say why.
  attacher_.LetGo(Status::TimedOut("the guest has not released it"));
  ASSERT_TRUE(Finishes(release));
  EXPECT_EQ(release.get().code(), StatusCode::kTimedOut);
  nlohmann::json kept = AllocationJson(slow);
  ASSERT_TRUE(kept.is_object());
  EXPECT_FALSE(kept.contains("releasing"));
  EXPECT_NE(kept.value("detach_error", std::string()).find("has not released"), std::string::npos)
      << kept.dump();
  uint64_t id = 0;
  EXPECT_EQ(sched_->Allocate(TenantId("quick"), {1, 0, HZ_LOC_ANY}, &id).code(),
            StatusCode::kLimit);

  // So after a restart too.
  Reopen();
  EXPECT_EQ(Bdfs(slow).size(), 8u);
  EXPECT_EQ(sched_->Allocate(TenantId("quick"), {1, 0, HZ_LOC_ANY}, &id).code(),
            StatusCode::kLimit);
}

TEST_F(SchedulerSlowDetach, FailedDeviceLeavesItsVmWithoutBlockingOthers) {
  uint64_t slow = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("slow"), {2, 0, HZ_LOC_ANY}, &slow).ok());
  const std::string victim = *Bdfs(slow).begin();
  auto failed = Async([&] { return sched_->MarkFailed(victim, 1); });
  LetGoAtEnd let_go(&attacher_);
  ASSERT_TRUE(attacher_.WaitForSlowDetach());

  auto others = Async([&] {
    uint64_t id = 0;
    Status allocated = sched_->Allocate(TenantId("quick"), {1, 0, HZ_LOC_ANY}, &id);
    // Repaired now, it would be free once it left the allocation, whether
    // or not the guest let go.
    Status repaired = sched_->Repair(victim);
    return std::make_pair(allocated, repaired);
  });
  const bool prompt = Finishes(others);
  attacher_.LetGo(Status::Ok());
  EXPECT_TRUE(prompt) << "another tenant waited for the slow guest";
  ASSERT_TRUE(Finishes(failed));
  StatusOr<DeviceLoss> loss = failed.get();
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_EQ(loss->tenant, TenantId("slow"));
  const auto [allocated, repaired] = others.get();
  EXPECT_TRUE(allocated.ok()) << allocated.ToString();
  EXPECT_EQ(repaired.code(), StatusCode::kBusy);
  EXPECT_EQ(StateOf(victim), "failed");
  EXPECT_EQ(Bdfs(slow).size(), 1u);
}

TEST_F(SchedulerSlowDetach, FailureDuringAReleaseWaitsForItsOutcome) {
  uint64_t slow = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("slow"), {2, 0, HZ_LOC_ANY}, &slow).ok());
  const std::string victim = *Bdfs(slow).begin();
  auto release = Async([&] { return sched_->Release(slow); });
  LetGoAtEnd let_go(&attacher_);
  ASSERT_TRUE(attacher_.WaitForSlowDetach());
  auto failed = Async([&] { return sched_->MarkFailed(victim, 1); });
  // The failure is recorded at once; the rest waits for the release.
  const auto bound = std::chrono::steady_clock::now() + kBound;
  while (StateOf(victim) != "failed" && std::chrono::steady_clock::now() < bound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(StateOf(victim), "failed");
  EXPECT_EQ(failed.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  attacher_.LetGo(Status::Ok());
  ASSERT_TRUE(Finishes(release));
  EXPECT_TRUE(release.get().ok());
  ASSERT_TRUE(Finishes(failed));
  StatusOr<DeviceLoss> loss = failed.get();
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_TRUE(loss->tenant.empty());  // released: nothing taken from anyone
  EXPECT_EQ(StateOf(victim), "failed");
  EXPECT_TRUE(sched_->Allocations().empty());
  Reopen();
  EXPECT_EQ(StateOf(victim), "failed");
}

TEST_F(SchedulerSlowDetach, AnAttachThatFailsPartWayRollsBackWithoutBlockingOthers) {
  attacher_.RefuseAttachesAfter(1);
  auto allocated = Async([&] {
    uint64_t id = 0;
    return sched_->Allocate(TenantId("slow"), {2, 0, HZ_LOC_ANY}, &id);
  });
  LetGoAtEnd let_go(&attacher_);
  // The device the VM took leaves it again: the guest takes its time.
  ASSERT_TRUE(attacher_.WaitForSlowDetach());
  attacher_.RefuseAttachesAfter(-1);
  nlohmann::json rolling_back = sched_->Allocations();
  auto others = Async([&] {
    uint64_t id = 0;
    Status quick = sched_->Allocate(TenantId("quick"), {6, 0, HZ_LOC_ANY}, &id);
    return std::make_pair(quick, AllocationBdfs(*sched_, id));
  });
  const bool prompt = Finishes(others);
  attacher_.LetGo(Status::Ok());
  EXPECT_TRUE(prompt) << "another tenant waited for the slow guest";
  ASSERT_TRUE(Finishes(allocated));
  EXPECT_EQ(allocated.get().code(), StatusCode::kIoError);

  // Meanwhile the device leaving was not handed out.
  ASSERT_EQ(rolling_back.size(), 1u);
  ASSERT_TRUE(rolling_back[0].contains("releasing")) << rolling_back.dump();
  const std::string leaving = rolling_back[0]["releasing"][0];
  const auto [quick, quick_devices] = others.get();
  EXPECT_TRUE(quick.ok()) << quick.ToString();
  EXPECT_FALSE(quick_devices.count(leaving));
  // Then the allocation is gone, and with it its devices.
  EXPECT_FALSE(attacher_.Attached(leaving));
  EXPECT_EQ(StateOf(leaving), "free");
  EXPECT_EQ(sched_->Allocations().size(), 1u);
}

TEST_F(SchedulerSlowDetach, DevicesLeavingWhenTheServiceStoppedStayWithTheirAllocation) {
  uint64_t slow = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("slow"), {2, 0, HZ_LOC_ANY}, &slow).ok());
  auto release = Async([&] { return sched_->Release(slow); });
  LetGoAtEnd let_go(&attacher_);
  ASSERT_TRUE(attacher_.WaitForSlowDetach());
  // The state on disk now is what a crash here would leave.
  const std::string crashed = dir_.path() + "/crashed.json";
  std::filesystem::copy_file(options_.state_path, crashed);
  attacher_.LetGo(Status::Ok());
  ASSERT_TRUE(Finishes(release));

  options_.state_path = crashed;
  Reopen();
  nlohmann::json kept = AllocationJson(slow);
  ASSERT_TRUE(kept.is_object());
  EXPECT_EQ(Bdfs(slow).size(), 2u);
  EXPECT_NE(kept.value("detach_error", std::string()).find("stopped"), std::string::npos)
      << kept.dump();
  // What the operator does next: release it again.
  EXPECT_TRUE(sched_->Release(slow).ok());
  Reopen();
  EXPECT_TRUE(sched_->Allocations().empty());
}

}  // namespace
}  // namespace hz::scheduler
