// The Scheduler facade: allocation with vfio and attach, crash-safe state,
// failures with events and what they took, the devices of reservations.
#include "hz/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "hz/common/file.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

namespace fs = std::filesystem;
namespace ev = hz::events;
using testing::AllocationBdfs;
using testing::CopyFixtureSysfs;
using testing::FixtureToml;
using testing::ReadText;
using testing::RecordingSink;
using testing::TempDir;

struct Call {
  bool attach;
  std::string domain;
  std::string bdf;
};

class FakeAttacher : public DomainAttacher {
 public:
  Status Attach(const std::string& domain, const std::string& bdf) override {
    if (fail_after >= 0 && attaches++ >= fail_after) return Status::IoError("injected");
    calls.push_back({true, domain, bdf});
    return Status::Ok();
  }
  Status Detach(const std::string& domain, const std::string& bdf) override {
    calls.push_back({false, domain, bdf});
    return fail_detach ? Status::IoError("injected detach") : Status::Ok();
  }
  std::vector<Call> calls;
  int fail_after = -1;
  int attaches = 0;
  bool fail_detach = false;
};

class SchedulerFacade : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.sysfs_root = CopyFixtureSysfs("hgx8", dir_.path());
    options_.provider_file = FixtureToml("hgx8");
    options_.state_path = dir_.path() + "/scheduler.json";
    // One test keeps the fsyncs; the others skip them to stay fast on busy
    // disks (the rename that makes changes atomic is the same).
    options_.sync = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) ==
                    "AllocateBindsAttachesAndPersists";
    Reopen();
  }
  void Reopen() {
    sched_.reset();
    Status s = Scheduler::Open(options_, &attacher_, &sink_, &sched_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::set<std::string> Bdfs(uint64_t id) { return AllocationBdfs(*sched_, id); }
  TempDir dir_;
  SchedulerOptions options_;
  FakeAttacher attacher_;
  RecordingSink sink_;
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(SchedulerFacade, AllocateBindsAttachesAndPersists) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {4, 4, HZ_LOC_SAME_GROUP}, &id).ok());
  std::set<std::string> bdfs = Bdfs(id);
  ASSERT_EQ(bdfs.size(), 8u);
  ASSERT_EQ(attacher_.calls.size(), 8u);
  for (const Call& c : attacher_.calls) {
    EXPECT_TRUE(c.attach);
    EXPECT_EQ(c.domain, "vm-acme");
    EXPECT_TRUE(bdfs.count(c.bdf));
  }
  // Every device went through driver_override and drivers_probe.
  const std::string probes = ReadText(options_.sysfs_root + "/bus/pci/drivers_probe");
  for (const std::string& b : bdfs) EXPECT_NE(probes.find(b), std::string::npos) << b;
  EXPECT_TRUE(fs::exists(options_.state_path));
  EXPECT_FALSE(fs::exists(options_.state_path + ".tmp"));

  // A restart remembers the allocation and never hands its devices out again.
  Reopen();
  EXPECT_EQ(Bdfs(id), bdfs);
  uint64_t id2 = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {4, 4, HZ_LOC_SAME_GROUP}, &id2).ok());
  EXPECT_NE(id2, id);
  for (const std::string& b : Bdfs(id2)) EXPECT_FALSE(bdfs.count(b)) << b;
  EXPECT_EQ(sched_->Allocate(TenantId("acme"), {1, 0, HZ_LOC_ANY}, &id2).code(),
            StatusCode::kLimit);
}

TEST_F(SchedulerFacade, TenantWithoutVmIsRejectedAndRolledBack) {
  uint64_t id = 0;
  Status s = sched_->Allocate(TenantId("nobody"), {2, 0, HZ_LOC_ANY}, &id);
  EXPECT_EQ(s.code(), StatusCode::kState);
  EXPECT_TRUE(sched_->Allocations().empty());
  Reopen();
  EXPECT_TRUE(sched_->Allocations().empty());
  EXPECT_EQ(sched_->Allocate(TenantId("bad/name"), {1, 0, HZ_LOC_ANY}, &id).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SchedulerFacade, AttachFailureRollsBack) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  attacher_.fail_after = 2;
  uint64_t id = 0;
  Status s = sched_->Allocate(TenantId("acme"), {4, 0, HZ_LOC_SAME_GROUP}, &id);
  ASSERT_EQ(s.code(), StatusCode::kIoError);
  // The two attached devices were detached again, nothing stays allocated.
  int attached = 0, detached = 0;
  for (const Call& c : attacher_.calls) (c.attach ? attached : detached)++;
  EXPECT_EQ(attached, 2);
  EXPECT_EQ(detached, 2);
  EXPECT_TRUE(sched_->Allocations().empty());
  Reopen();
  EXPECT_TRUE(sched_->Allocations().empty());
}

TEST_F(SchedulerFacade, ReleaseDetachesAndFrees) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {2, 2, HZ_LOC_SAME_GROUP}, &id).ok());
  attacher_.calls.clear();
  attacher_.fail_detach = true;
  EXPECT_FALSE(sched_->Release(id).ok());  // may still be attached: kept
  EXPECT_EQ(sched_->Allocations().size(), 1u);
  attacher_.fail_detach = false;
  attacher_.calls.clear();
  ASSERT_TRUE(sched_->Release(id).ok());
  EXPECT_EQ(attacher_.calls.size(), 4u);
  for (const Call& c : attacher_.calls) EXPECT_FALSE(c.attach);
  EXPECT_TRUE(sched_->Allocations().empty());
  EXPECT_EQ(sched_->Release(id).code(), StatusCode::kNotFound);
  for (const auto& d : sched_->Inventory()) EXPECT_EQ(d["state"], "free");
}

TEST_F(SchedulerFacade, FailureDetachesPublishesAndSurvivesRestart) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {4, 2, HZ_LOC_SAME_GROUP}, &id).ok());
  TopologySummary before;
  ASSERT_TRUE(sched_->Summary(TenantId("acme"), &before).ok());
  const std::string victim = sched_->cluster().device(before.devices[2]).bdf;
  TenantId tenant;
  uint32_t index = 0;
  ASSERT_TRUE(sched_->TenantIndex(victim, &tenant, &index).ok());
  EXPECT_EQ(tenant, TenantId("acme"));
  EXPECT_EQ(index, 2u);
  attacher_.calls.clear();
  ASSERT_TRUE(sched_->MarkFailed(victim, 3).ok());
  ASSERT_EQ(attacher_.calls.size(), 1u);
  EXPECT_FALSE(attacher_.calls[0].attach);
  EXPECT_EQ(attacher_.calls[0].bdf, victim);
  ASSERT_EQ(sink_.events.size(), 2u);
  EXPECT_EQ(sink_.events[0].tenant, TenantId("acme"));
  EXPECT_EQ(sink_.events[0].spec.topic, HZ_TOPIC_FAILURE);
  EXPECT_EQ(sink_.events[0].spec.kind, ev::kFailureDeviceFailed);
  ev::FailurePayload p;
  std::memcpy(&p, sink_.events[0].spec.payload.data(), sizeof(p));
  EXPECT_EQ(p.device_index, 2u);
  EXPECT_EQ(p.errors, 2u);  // power-of-two bucket of 3
  EXPECT_EQ(sink_.events[1].spec.topic, HZ_TOPIC_CAPACITY);
  EXPECT_EQ(Bdfs(id).size(), 5u);
  EXPECT_FALSE(Bdfs(id).count(victim));

  Reopen();
  EXPECT_EQ(Bdfs(id).size(), 5u);
  for (const auto& d : sched_->Inventory()) {
    if (d["bdf"] == victim) {
      EXPECT_EQ(d["state"], "failed");
    }
  }
  // Failing it again, or a free device, publishes nothing more.
  sink_.events.clear();
  EXPECT_TRUE(sched_->MarkFailed(victim, 1).ok());
  EXPECT_TRUE(sched_->MarkFailed("0000:bd:00.0", 1).ok());
  EXPECT_TRUE(sink_.events.empty());
  EXPECT_EQ(sched_->MarkFailed("0000:ee:00.0", 1).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(sched_->Repair(victim).ok());
  ASSERT_TRUE(sched_->Repair("0000:bd:00.0").ok());
  for (const auto& d : sched_->Inventory()) EXPECT_NE(d["state"], "failed");
}

TEST_F(SchedulerFacade, HealthMonitorFailureIsNotPublishedTwice) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {2, 2, HZ_LOC_SAME_GROUP}, &id).ok());
  auto assignments = sched_->Assignments();
  ASSERT_EQ(assignments.size(), 4u);
  const auto& [tenant, bdf, index] = assignments[3];
  EXPECT_EQ(tenant, TenantId("acme"));
  EXPECT_EQ(index, 3u);
  attacher_.calls.clear();
  ASSERT_TRUE(sched_->DeviceLost(TenantId("acme"), 3).ok());
  ASSERT_EQ(attacher_.calls.size(), 1u);
  EXPECT_EQ(attacher_.calls[0].bdf, bdf);
  // Only the allocation change: the monitor published the FAILURE itself.
  ASSERT_EQ(sink_.events.size(), 1u);
  EXPECT_EQ(sink_.events[0].spec.topic, HZ_TOPIC_CAPACITY);
  EXPECT_EQ(sched_->DeviceLost(TenantId("acme"), 3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sched_->Assignments().size(), 3u);
}

TEST_F(SchedulerFacade, DegradedDeviceStaysAttached) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {1, 0, HZ_LOC_ANY}, &id).ok());
  const std::string bdf = *Bdfs(id).begin();
  attacher_.calls.clear();
  ASSERT_TRUE(sched_->MarkDegraded(bdf, 1).ok());
  EXPECT_TRUE(attacher_.calls.empty());
  ASSERT_EQ(sink_.events.size(), 1u);
  EXPECT_EQ(sink_.events[0].spec.kind, ev::kFailureDeviceDegraded);
  EXPECT_EQ(Bdfs(id).size(), 1u);
}

TEST_F(SchedulerFacade, OperatorViews) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {2, 0, HZ_LOC_SAME_GROUP}, &id).ok());
  nlohmann::json inv = sched_->Inventory();
  ASSERT_EQ(inv.size(), 16u);
  int allocated = 0;
  for (const auto& d : inv) {
    EXPECT_TRUE(d.contains("serial"));
    EXPECT_TRUE(d.contains("switch"));
    if (d["state"] == "allocated") {
      ++allocated;
      EXPECT_EQ(d["tenant"], "acme");
      EXPECT_EQ(d["allocation"], id);
    }
  }
  EXPECT_EQ(allocated, 2);
  nlohmann::json al = sched_->Allocations();
  ASSERT_EQ(al.size(), 1u);
  EXPECT_EQ(al[0]["gpus"], 2);
  EXPECT_EQ(al[0]["locality"], HZ_LOC_SAME_GROUP);
}

TEST_F(SchedulerFacade, CorruptStateIsRefused) {
  sched_.reset();
  ASSERT_TRUE(WriteFileAtomic(options_.state_path, "{not json").ok());
  std::unique_ptr<Scheduler> s;
  EXPECT_EQ(Scheduler::Open(options_, &attacher_, &sink_, &s).code(), StatusCode::kCorruption);
  ASSERT_TRUE(WriteFileAtomic(options_.state_path,
                              R"({"version":1,"allocator":{"next_id":1,"failed":[],)"
                              R"("allocations":[{"id":1,"tenant":"a","gpus":1,"nics":0,)"
                              R"("locality":0,"devices":[{"host":"elsewhere","bdf":)"
                              R"("0000:1a:00.0"}]}]},"tenants":{},"reservations":[]})")
                  .ok());
  Status st = Scheduler::Open(options_, &attacher_, &sink_, &s);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("elsewhere"), std::string::npos);
  options_.state_path.clear();
  EXPECT_FALSE(Scheduler::Open(options_, &attacher_, &sink_, &s).ok());
}

TEST_F(SchedulerFacade, ReservationsTakeReservableDevicesAndGiveThemBack) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  // Pools: 2 GPU islands and 4 NIC switches.
  const std::vector<Pool>& pools = sched_->cluster().pools();
  ASSERT_EQ(pools.size(), 6u);
  uint32_t gpu_pool = 0;
  for (uint32_t p = 0; p < pools.size(); ++p) {
    if (pools[p].kind == DeviceKind::kGpu) {
      EXPECT_EQ(sched_->ReservableDevices(p), 4u);
      gpu_pool = p;
    }
  }
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {4, 0, HZ_LOC_SAME_GROUP}, &id).ok());
  // A direct allocation takes capacity away from negotiation.
  uint32_t total = 0;
  for (uint32_t p = 0; p < pools.size(); ++p) {
    total += pools[p].kind == DeviceKind::kGpu ? sched_->ReservableDevices(p) : 0;
  }
  EXPECT_EQ(total, 4u);
  // Find the pool that is still free and attach a reservation from it.
  for (uint32_t p = 0; p < pools.size(); ++p) {
    if (pools[p].kind == DeviceKind::kGpu && sched_->ReservableDevices(p) == 4) gpu_pool = p;
  }
  attacher_.calls.clear();
  ASSERT_TRUE(sched_->AttachReservation(TenantId("acme"), 77, {{gpu_pool, 3}}).ok());
  EXPECT_EQ(attacher_.calls.size(), 3u);
  EXPECT_EQ(sched_->DevicesHeld(TenantId("acme"), HZ_DEV_GPU), 7u);
  EXPECT_EQ(sched_->ReservableDevices(gpu_pool), 4u);  // reservation devices count as capacity
  EXPECT_EQ(sched_->AttachReservation(TenantId("acme"), 77, {{gpu_pool, 1}}).code(),
            StatusCode::kState);
  EXPECT_FALSE(
      sched_->AttachReservation(TenantId("acme"), 78, {{gpu_pool, 2}}).ok());  // only 1 left

  Reopen();  // the reservation survives a restart
  EXPECT_EQ(sched_->DevicesHeld(TenantId("acme"), HZ_DEV_GPU), 7u);
  StatusOr<ReservationDetach> detach = sched_->BeginDetachReservation(TenantId("acme"), 77, 2);
  ASSERT_TRUE(detach.ok());
  ASSERT_EQ(detach->pools.size(), 1u);
  EXPECT_EQ(detach->pools[0], (PoolDevices{gpu_pool, 2}));
  // Leaving, they are no longer the tenant's, nor yet anyone else's.
  EXPECT_EQ(sched_->DevicesHeld(TenantId("acme"), HZ_DEV_GPU), 5u);
  EXPECT_EQ(sched_->ReservableDevices(gpu_pool), 4u);
  EXPECT_EQ(sched_->AttachReservation(TenantId("other"), 79, {{gpu_pool, 2}}).code(),
            StatusCode::kTryAgain);
  // The rest of the reservation: two of them were already released.
  EXPECT_EQ(sched_->BeginDetachReservation(TenantId("acme"), 77, 2).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(sched_->FinishDetachReservation(*detach).ok());
  EXPECT_EQ(sched_->DevicesHeld(TenantId("acme"), HZ_DEV_GPU), 5u);
  EXPECT_EQ(sched_->BeginDetachReservation(TenantId("other"), 77, 1).status().code(),
            StatusCode::kState);
  EXPECT_EQ(sched_->BeginDetachReservation(TenantId("acme"), 77, 5).status().code(),
            StatusCode::kInvalidArgument);
  detach = sched_->BeginDetachReservation(TenantId("acme"), 77, 1);
  ASSERT_TRUE(detach.ok());
  ASSERT_TRUE(sched_->FinishDetachReservation(*detach).ok());
  EXPECT_EQ(sched_->BeginDetachReservation(TenantId("acme"), 77, 1).status().code(),
            StatusCode::kState);
}

TEST_F(SchedulerFacade, FailureReportsWhatTheTenantLost) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {2, 0, HZ_LOC_SAME_GROUP}, &id).ok());
  const std::string victim = *Bdfs(id).begin();
  StatusOr<DeviceLoss> loss = sched_->MarkFailed(victim, 1);
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(loss->tenant, TenantId("acme"));
  EXPECT_EQ(loss->kind, DeviceKind::kGpu);
  EXPECT_EQ(loss->locality, HZ_LOC_SAME_GROUP);
  EXPECT_TRUE(loss->replaceable);  // six healthy GPUs are free
  // A device that failed before, or a free one, takes nothing from anyone.
  EXPECT_TRUE(sched_->MarkFailed(victim, 1)->tenant.empty());
}

ev::CapacityPayload CapacityOf(const testing::Published& e) {
  ev::CapacityPayload p{};
  std::memcpy(&p, e.spec.payload.data(), sizeof(p));
  return p;
}

// In a cluster, the summary covers the tenant's devices on the other hosts
// too; when they change, the tenant is told; nothing local names them.
TEST_F(SchedulerFacade, OtherHostsJoinTheSummaryAndTheirChangesAreTold) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {2, 0, HZ_LOC_SAME_GROUP}, &id).ok());
  const std::map<std::string, HostShape> local = sched_->LocalShapes();
  ASSERT_EQ(local.size(), 1u);
  ASSERT_EQ(local.at("acme").groups.size(), 1u);
  EXPECT_EQ(local.at("acme").groups[0].gpus, 2);

  // Another host holds 4 GPUs of the tenant in one NVLink island.
  HostShape four;
  four.groups.push_back({4, 0, HZ_BW_ULTRA});
  sink_.events.clear();
  ASSERT_TRUE(sched_->SetOtherHosts(TenantId("acme"), {four}).ok());
  TopologySummary s;
  ASSERT_TRUE(sched_->Summary(TenantId("acme"), &s).ok());
  SummaryView v;
  ASSERT_TRUE(ParseTopologySummary(s.bytes, &v).ok());
  EXPECT_EQ(v.header.num_hosts, 2);
  EXPECT_EQ(v.header.num_devices, 6);
  EXPECT_EQ(v.header.cross_host_bw, HZ_BW_LOW);
  EXPECT_EQ(v.groups[0].gpus, 4);  // the larger host comes first
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(s.devices[i], kOtherHostDevice);
  ASSERT_EQ(sink_.events.size(), 1u);
  EXPECT_EQ(sink_.events[0].spec.topic, HZ_TOPIC_CAPACITY);
  EXPECT_EQ(sink_.events[0].spec.kind, ev::kCapacityAllocationChanged);
  EXPECT_EQ(CapacityOf(sink_.events[0]).count, 4u);
  EXPECT_EQ(CapacityOf(sink_.events[0]).devices_now, 6u);

  // This host's devices moved to indices 4 and 5: the health monitor's
  // assignments follow, and only local devices are assigned.
  auto assigned = sched_->Assignments();
  ASSERT_EQ(assigned.size(), 2u);
  for (const auto& [tenant, bdf, index] : assigned) EXPECT_GE(index, 4u);
  EXPECT_EQ(sched_->DeviceLost(TenantId("acme"), 0).status().code(), StatusCode::kNotFound);

  // The same shapes again tell nothing; the host leaving tells the loss.
  sink_.events.clear();
  ASSERT_TRUE(sched_->SetOtherHosts(TenantId("acme"), {four}).ok());
  EXPECT_TRUE(sink_.events.empty());
  ASSERT_TRUE(sched_->SetOtherHosts(TenantId("acme"), {}).ok());
  ASSERT_EQ(sink_.events.size(), 1u);
  EXPECT_EQ(CapacityOf(sink_.events[0]).count, 4u);
  EXPECT_EQ(CapacityOf(sink_.events[0]).devices_now, 2u);
  ASSERT_TRUE(sched_->Summary(TenantId("acme"), &s).ok());
  ASSERT_TRUE(ParseTopologySummary(s.bytes, &v).ok());
  EXPECT_EQ(v.header.num_hosts, 1);
}

}  // namespace
}  // namespace hz::scheduler
