// Topology-aware placement, release, failures and the durable form.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "hz/scheduler/allocator.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using testing::LoadFixture;

Cluster Hosts(const std::string& fixture, int n) {
  std::vector<HostInventory> hosts;
  for (int i = 0; i < n; ++i) {
    HostInventory inv = LoadFixture(fixture);
    inv.name += "-" + std::to_string(i);
    hosts.push_back(std::move(inv));
  }
  return Cluster(std::move(hosts));
}

std::vector<DeviceRef> Of(const Cluster& c, const Allocation& a, DeviceKind kind) {
  std::vector<DeviceRef> out;
  for (DeviceRef d : a.devices) {
    if (c.device(d).kind == kind) out.push_back(d);
  }
  return out;
}

TEST(SchedulerAllocator, FourGpusFillOneIslandWithRailAlignedNics) {
  Cluster c = Hosts("hgx8", 1);
  Allocator alloc(&c);
  Allocation a;
  ASSERT_TRUE(alloc.Allocate("t1", {4, 4, HZ_LOC_SAME_GROUP}, &a).ok());
  auto gpus = Of(c, a, DeviceKind::kGpu);
  auto nics = Of(c, a, DeviceKind::kNic);
  ASSERT_EQ(gpus.size(), 4u);
  ASSERT_EQ(nics.size(), 4u);
  std::set<int> islands, gpu_rails;
  for (DeviceRef g : gpus) {
    islands.insert(c.device(g).island);
    gpu_rails.insert(c.device(g).rail);
  }
  EXPECT_EQ(islands.size(), 1u);
  for (DeviceRef n : nics) {
    EXPECT_TRUE(gpu_rails.count(c.device(n).rail)) << c.device(n).bdf << " is off-rail";
    EXPECT_EQ(c.device(n).numa_node, c.device(gpus[0]).numa_node);
  }
}

TEST(SchedulerAllocator, SplitOffMovesDevicesToANewAllocationWithoutFreeingThem) {
  Cluster c = Hosts("hgx8", 1);
  Allocator alloc(&c);
  Allocation a, b;
  ASSERT_TRUE(alloc.Allocate("t1", {4, 2, HZ_LOC_SAME_GROUP}, &a).ok());
  ASSERT_TRUE(alloc.Allocate("t2", {1, 0, HZ_LOC_ANY}, &b).ok());
  const uint32_t free_gpus = alloc.TotalFree(DeviceKind::kGpu);
  const std::vector<DeviceRef> gpus = Of(c, a, DeviceKind::kGpu);
  const std::vector<DeviceRef> moved = {gpus[2], gpus[3], Of(c, a, DeviceKind::kNic)[0]};

  Allocation kept;
  ASSERT_TRUE(alloc.SplitOff(moved, &kept).ok());
  EXPECT_NE(kept.id, a.id);
  EXPECT_EQ(kept.tenant, "t1");
  EXPECT_EQ(kept.request.gpus, 2u);
  EXPECT_EQ(kept.request.nics, 1u);
  EXPECT_EQ(kept.request.locality, HZ_LOC_SAME_GROUP);
  for (DeviceRef d : moved) EXPECT_EQ(alloc.Owner(d), kept.id);
  EXPECT_EQ(alloc.Find(a.id)->devices.size(), 3u);
  EXPECT_EQ(alloc.TotalFree(DeviceKind::kGpu), free_gpus);

  // Devices of two allocations, or a free one, are refused and nothing moves.
  EXPECT_EQ(alloc.SplitOff({gpus[0], b.devices[0]}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.Owner(gpus[0]), a.id);
  // Moving what is left removes the allocation.
  ASSERT_TRUE(alloc.SplitOff(alloc.Find(a.id)->devices, nullptr).ok());
  EXPECT_EQ(alloc.Find(a.id), nullptr);
  EXPECT_EQ(alloc.TotalFree(DeviceKind::kGpu), free_gpus);
}

TEST(SchedulerAllocator, TwoGpusShareASwitchWithTheirNics) {
  Cluster c = Hosts("hgx8", 1);
  Allocator alloc(&c);
  Allocation a;
  ASSERT_TRUE(alloc.Allocate("t1", {2, 2, HZ_LOC_SAME_GROUP}, &a).ok());
  std::set<int> switches;
  for (DeviceRef d : a.devices) switches.insert(c.SwitchOf(d));
  EXPECT_EQ(switches.size(), 1u);
}

TEST(SchedulerAllocator, BestFitKeepsWholeIslandsFree) {
  Cluster c = Hosts("hgx8", 1);
  Allocator alloc(&c);
  Allocation a, b, big;
  ASSERT_TRUE(alloc.Allocate("t1", {1, 0, HZ_LOC_ANY}, &a).ok());
  ASSERT_TRUE(alloc.Allocate("t2", {2, 0, HZ_LOC_ANY}, &b).ok());
  // Both small requests went to the same island...
  EXPECT_EQ(c.device(a.devices[0]).island, c.device(b.devices[0]).island);
  // ...and the 2 GPUs share a switch, not the one the single GPU took.
  EXPECT_EQ(c.SwitchOf(b.devices[0]), c.SwitchOf(b.devices[1]));
  EXPECT_NE(c.SwitchOf(a.devices[0]), c.SwitchOf(b.devices[0]));
  // So a whole island is left for a 4-GPU request.
  ASSERT_TRUE(alloc.Allocate("t3", {4, 0, HZ_LOC_SAME_GROUP}, &big).ok());
  EXPECT_NE(c.device(big.devices[0]).island, c.device(a.devices[0]).island);
}

TEST(SchedulerAllocator, LocalityLimits) {
  Cluster c = Hosts("hgx8", 1);
  Allocator alloc(&c);
  Allocation a;
  EXPECT_EQ(alloc.Allocate("t", {5, 0, HZ_LOC_SAME_GROUP}, &a).code(), StatusCode::kLimit);
  EXPECT_EQ(alloc.Allocate("t", {9, 0, HZ_LOC_ANY}, &a).code(), StatusCode::kLimit);
  EXPECT_EQ(alloc.Allocate("t", {0, 0, HZ_LOC_ANY}, &a).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.Allocate("t", {1, 0, 7}, &a).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(alloc.Allocate("t", {8, 8, HZ_LOC_SAME_HOST}, &a).ok());
  EXPECT_EQ(a.devices.size(), 16u);
  EXPECT_EQ(alloc.TotalFree(DeviceKind::kGpu), 0u);
  ASSERT_TRUE(alloc.Release(a.id).ok());
  EXPECT_EQ(alloc.TotalFree(DeviceKind::kGpu), 8u);
  EXPECT_EQ(alloc.Release(a.id).code(), StatusCode::kNotFound);
}

TEST(SchedulerAllocator, NicOnlyRequestsFillOneSwitch) {
  Cluster c = Hosts("hgx8", 1);
  Allocator alloc(&c);
  Allocation a;
  ASSERT_TRUE(alloc.Allocate("t", {0, 2, HZ_LOC_SAME_GROUP}, &a).ok());
  ASSERT_EQ(a.devices.size(), 2u);
  EXPECT_EQ(c.SwitchOf(a.devices[0]), c.SwitchOf(a.devices[1]));
}

TEST(SchedulerAllocator, FailedDevicesAreNeverPlacedUntilRepaired) {
  Cluster c = Hosts("ws4", 1);
  Allocator alloc(&c);
  DeviceRef g{0, static_cast<uint32_t>(c.host(0).Find("0000:17:00.0"))};
  ASSERT_TRUE(alloc.SetFailed(g, true).ok());
  EXPECT_EQ(alloc.TotalFree(DeviceKind::kGpu), 3u);
  Allocation a;
  EXPECT_EQ(alloc.Allocate("t", {4, 0, HZ_LOC_ANY}, &a).code(), StatusCode::kLimit);
  ASSERT_TRUE(alloc.Allocate("t", {3, 0, HZ_LOC_ANY}, &a).ok());
  for (DeviceRef d : a.devices) EXPECT_NE(d, g);
  ASSERT_TRUE(alloc.SetFailed(g, false).ok());
  EXPECT_EQ(alloc.TotalFree(DeviceKind::kGpu), 1u);
}

TEST(SchedulerAllocator, AnySpansHostsSameHostDoesNot) {
  Cluster c = Hosts("hgx8", 3);
  Allocator alloc(&c);
  Allocation a;
  EXPECT_EQ(alloc.Allocate("t", {12, 0, HZ_LOC_SAME_HOST}, &a).code(), StatusCode::kLimit);
  ASSERT_TRUE(alloc.Allocate("t", {12, 12, HZ_LOC_ANY}, &a).ok());
  std::map<uint32_t, int> per_host;
  for (DeviceRef d : Of(c, a, DeviceKind::kGpu)) per_host[d.host]++;
  ASSERT_EQ(per_host.size(), 2u);  // one whole host and one island of another
  std::vector<int> counts;
  for (auto [h, n] : per_host) counts.push_back(n);
  std::sort(counts.begin(), counts.end());
  EXPECT_EQ(counts, (std::vector<int>{4, 8}));
  EXPECT_EQ(Of(c, a, DeviceKind::kNic).size(), 12u);
}

TEST(SchedulerAllocator, JsonRoundTripAndCorruption) {
  Cluster c = Hosts("hgx8", 2);
  Allocator alloc(&c);
  Allocation a, b;
  ASSERT_TRUE(alloc.Allocate("t1", {4, 2, HZ_LOC_SAME_GROUP}, &a).ok());
  ASSERT_TRUE(alloc.Allocate("t2", {2, 0, HZ_LOC_SAME_HOST}, &b).ok());
  ASSERT_TRUE(alloc.SetFailed({1, 0}, true).ok());
  nlohmann::json j;
  alloc.ToJson(&j);
  Allocator back(&c);
  ASSERT_TRUE(back.FromJson(j).ok());
  ASSERT_EQ(back.allocations().size(), 2u);
  EXPECT_EQ(back.Find(a.id)->devices, a.devices);
  EXPECT_EQ(back.Find(b.id)->tenant, "t2");
  EXPECT_TRUE(back.IsFailed({1, 0}));
  EXPECT_EQ(back.TotalFree(DeviceKind::kGpu), alloc.TotalFree(DeviceKind::kGpu));
  Allocation next;
  ASSERT_TRUE(back.Allocate("t3", {1, 0, HZ_LOC_ANY}, &next).ok());
  EXPECT_GT(next.id, b.id);  // ids never reused

  nlohmann::json twice = j;
  twice["allocations"][1]["devices"].push_back(j["allocations"][0]["devices"][0]);
  Status s = back.FromJson(twice);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("two allocations"), std::string::npos);
  nlohmann::json unknown = j;
  unknown["allocations"][0]["devices"][0]["bdf"] = "0000:ee:00.0";
  EXPECT_EQ(back.FromJson(unknown).code(), StatusCode::kCorruption);
  EXPECT_EQ(back.FromJson(nlohmann::json::array()).code(), StatusCode::kCorruption);
  EXPECT_EQ(back.FromJson(nlohmann::json{{"next_id", "x"}}).code(), StatusCode::kCorruption);
  // A rejected state leaves the previous one in place.
  EXPECT_EQ(back.allocations().size(), 3u);
}

// Random operation sequences keep the allocator's invariants.
TEST(SchedulerAllocator, RandomSequencesKeepInvariants) {
  for (Policy policy : {Policy::kTopologyAware, Policy::kFirstFit}) {
    Cluster c = Hosts("hgx8", 4);
    Allocator alloc(&c, policy);
    std::mt19937_64 rng(42);
    std::vector<uint64_t> live;
    for (int step = 0; step < 2000; ++step) {
      int op = static_cast<int>(rng() % 10);
      if (op < 6) {
        Request r{static_cast<uint32_t>(rng() % 9), static_cast<uint32_t>(rng() % 5),
                  static_cast<hz_locality>(rng() % 3)};
        if (r.gpus + r.nics == 0) r.gpus = 1;
        Allocation a;
        Status s = alloc.Allocate("t" + std::to_string(step % 7), r, &a);
        if (!s.ok()) {
          ASSERT_EQ(s.code(), StatusCode::kLimit);
          continue;
        }
        live.push_back(a.id);
        ASSERT_EQ(Of(c, a, DeviceKind::kGpu).size(), r.gpus);
        ASSERT_EQ(Of(c, a, DeviceKind::kNic).size(), r.nics);
        for (DeviceRef d : a.devices) ASSERT_FALSE(alloc.IsFailed(d));
        if (r.locality != HZ_LOC_ANY) {
          for (DeviceRef d : a.devices) ASSERT_EQ(d.host, a.devices[0].host);
        }
        if (r.locality == HZ_LOC_SAME_GROUP) {
          auto lead = Of(c, a, r.gpus > 0 ? DeviceKind::kGpu : DeviceKind::kNic);
          for (DeviceRef d : lead) ASSERT_EQ(c.PoolOf(d), c.PoolOf(lead[0]));
        }
      } else if (op < 9 && !live.empty()) {
        size_t k = rng() % live.size();
        if (alloc.Find(live[k])) {
          ASSERT_TRUE(alloc.Release(live[k]).ok());
        }
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        DeviceRef d{static_cast<uint32_t>(rng() % 4),
                    static_cast<uint32_t>(rng() % c.host(0).devices.size())};
        bool fail = !alloc.IsFailed(d);
        ASSERT_TRUE(alloc.SetFailed(d, fail).ok());
        if (fail && alloc.Owner(d) != 0) {
          ASSERT_TRUE(alloc.RemoveDevice(d).ok());
        }
      }
      // Recount everything the allocator caches.
      std::set<DeviceRef> owned;
      for (const auto& [id, a] : alloc.allocations()) {
        for (DeviceRef d : a.devices) {
          ASSERT_TRUE(owned.insert(d).second) << "device owned twice";
          ASSERT_EQ(alloc.Owner(d), id);
        }
      }
      for (uint32_t p = 0; p < c.pools().size(); ++p) {
        uint32_t free = 0;
        for (uint32_t i : c.pools()[p].devices) {
          DeviceRef d{c.pools()[p].host, i};
          if (!owned.count(d) && !alloc.IsFailed(d)) ++free;
        }
        ASSERT_EQ(alloc.FreeInPool(p), free);
      }
    }
  }
}

// Two GPUs in one IOMMU group (behind a PCIe-to-PCI bridge) cannot be
// isolated from each other: they go to one allocation or to none.
TEST(SchedulerAllocator, OneIommuGroupIsAllocatedWhole) {
  HostInventory inv = LoadFixture("hgx8");
  std::vector<uint32_t> gpus;
  for (uint32_t i = 0; i < inv.devices.size(); ++i) {
    if (inv.devices[i].kind == DeviceKind::kGpu) gpus.push_back(i);
  }
  ASSERT_GE(gpus.size(), 3u);
  inv.devices[gpus[1]].iommu_group = inv.devices[gpus[0]].iommu_group;
  Cluster c(std::vector<HostInventory>{inv});
  Allocator alloc(&c);
  for (size_t k = 2; k < gpus.size(); ++k) ASSERT_TRUE(alloc.SetFailed({0, gpus[k]}, true).ok());
  Allocation a;
  ASSERT_TRUE(alloc.Allocate("t", {1, 0, HZ_LOC_ANY}, &a).ok());
  EXPECT_EQ(a.devices, (std::vector<DeviceRef>{{0, gpus[0]}, {0, gpus[1]}}));
  ASSERT_TRUE(alloc.Release(a.id).ok());
  // Asked for by address, the other function comes along.
  ASSERT_TRUE(alloc.AllocateDevices("t", {1, 0, HZ_LOC_ANY}, {{0, gpus[1]}}, &a).ok());
  EXPECT_EQ(a.devices, (std::vector<DeviceRef>{{0, gpus[0]}, {0, gpus[1]}}));
  ASSERT_TRUE(alloc.Release(a.id).ok());
  // With one function failed, the other is refused.
  ASSERT_TRUE(alloc.SetFailed({0, gpus[1]}, true).ok());
  EXPECT_EQ(alloc.Allocate("t", {1, 0, HZ_LOC_ANY}, &a).code(), StatusCode::kLimit);
  Status s = alloc.AllocateDevices("t", {1, 0, HZ_LOC_ANY}, {{0, gpus[0]}}, &a);
  EXPECT_EQ(s.code(), StatusCode::kState);
  EXPECT_NE(s.message().find(inv.devices[gpus[1]].bdf), std::string::npos) << s.ToString();
  EXPECT_EQ(alloc.Owner({0, gpus[0]}), 0u);
}

}  // namespace
}  // namespace hz::scheduler
