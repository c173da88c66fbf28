// TOPOLOGY_GET summaries: canonical form, groups and classes, permutation.
#include <gtest/gtest.h>

#include <set>

#include "hz/scheduler/topology_summary.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using testing::LoadFixture;

DeviceRef Ref(const Cluster& c, uint32_t host, const std::string& bdf) {
  int i = c.host(host).Find(bdf);
  EXPECT_GE(i, 0) << bdf;
  return {host, static_cast<uint32_t>(i)};
}

SummaryView View(const TopologySummary& s) {
  SummaryView v;
  Status st = ParseTopologySummary(s.bytes, &v);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return v;
}

class SchedulerSummary : public ::testing::Test {
 protected:
  Cluster hgx_{std::vector<HostInventory>{LoadFixture("hgx8")}};
  Cluster ws_{std::vector<HostInventory>{LoadFixture("ws4")}};
};

TEST_F(SchedulerSummary, IslandWithRailNicsIsOneUltraGroup) {
  std::vector<DeviceRef> d;
  for (const char* b : {"0000:1a:00.0", "0000:1b:00.0", "0000:3b:00.0", "0000:3c:00.0",
                        "0000:1c:00.0", "0000:1d:00.0", "0000:3d:00.0", "0000:3e:00.0"}) {
    d.push_back(Ref(hgx_, 0, b));
  }
  TopologySummary s = BuildTopologySummary(hgx_, d, 7);
  ASSERT_EQ(s.bytes.size(), 16u + 8u * 1 + 8u * 8);
  SummaryView v = View(s);
  EXPECT_EQ(v.header.version, 1u);
  EXPECT_EQ(v.header.num_devices, 8);
  EXPECT_EQ(v.header.num_groups, 1);
  EXPECT_EQ(v.header.num_hosts, 1);
  EXPECT_EQ(v.header.cross_group_bw, HZ_BW_NONE);
  EXPECT_EQ(v.header.cross_host_bw, HZ_BW_NONE);
  EXPECT_EQ(v.groups[0].gpus, 4);
  EXPECT_EQ(v.groups[0].nics, 4);
  EXPECT_EQ(v.groups[0].intra_bw, HZ_BW_ULTRA);
  // Indices: the group's GPUs first, then its NICs.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v.devices[i].kind, i < 4 ? HZ_DEV_GPU : HZ_DEV_NIC);
  // The private map covers exactly the allocation.
  EXPECT_EQ(std::set<DeviceRef>(s.devices.begin(), s.devices.end()),
            std::set<DeviceRef>(d.begin(), d.end()));
}

TEST_F(SchedulerSummary, GroupsAndClasses) {
  // One GPU from each island plus a GPU and NIC under one switch.
  std::vector<DeviceRef> d{Ref(hgx_, 0, "0000:1a:00.0"), Ref(hgx_, 0, "0000:9a:00.0"),
                           Ref(hgx_, 0, "0000:9b:00.0"), Ref(hgx_, 0, "0000:bd:00.0")};
  SummaryView v = View(BuildTopologySummary(hgx_, d, 1));
  ASSERT_EQ(v.header.num_groups, 3);
  // Decreasing signatures: (2 GPUs, ULTRA), (1 GPU), (1 NIC).
  EXPECT_EQ(v.groups[0].gpus, 2);
  EXPECT_EQ(v.groups[0].intra_bw, HZ_BW_ULTRA);
  EXPECT_EQ(v.groups[1].gpus, 1);
  EXPECT_EQ(v.groups[1].intra_bw, HZ_BW_NONE);
  EXPECT_EQ(v.groups[2].nics, 1);
  EXPECT_EQ(v.header.cross_group_bw, HZ_BW_MEDIUM);

  // Two GPUs and two NICs under one switch, no NVLink between... the GPUs of
  // one switch are in one island, so take a GPU and its switch's NIC.
  std::vector<DeviceRef> e{Ref(hgx_, 0, "0000:1a:00.0"), Ref(hgx_, 0, "0000:1c:00.0")};
  SummaryView w = View(BuildTopologySummary(hgx_, e, 1));
  ASSERT_EQ(w.header.num_groups, 1);
  EXPECT_EQ(w.groups[0].intra_bw, HZ_BW_HIGH);
}

TEST_F(SchedulerSummary, EquivalentAllocationsAreByteIdentical) {
  const std::vector<std::string> a{"0000:1a:00.0", "0000:1b:00.0", "0000:1c:00.0"};
  const std::vector<std::string> b{"0000:bb:00.0", "0000:bc:00.0", "0000:be:00.0"};
  std::vector<DeviceRef> da, db;
  for (const auto& x : a) da.push_back(Ref(hgx_, 0, x));
  for (const auto& x : b) db.push_back(Ref(hgx_, 0, x));
  // Different islands, switches, NUMA nodes, tenants and seeds; same shape.
  EXPECT_EQ(BuildTopologySummary(hgx_, da, 1).bytes, BuildTopologySummary(hgx_, db, 99).bytes);
  // Workstation: either NVLink pair gives the same bytes.
  std::vector<DeviceRef> p1{Ref(ws_, 0, "0000:17:00.0"), Ref(ws_, 0, "0000:31:00.0")};
  std::vector<DeviceRef> p2{Ref(ws_, 0, "0000:4a:00.0"), Ref(ws_, 0, "0000:63:00.0")};
  EXPECT_EQ(BuildTopologySummary(ws_, p1, 3).bytes, BuildTopologySummary(ws_, p2, 4).bytes);
  // Not equivalent: across the pairs there is no NVLink.
  std::vector<DeviceRef> p3{Ref(ws_, 0, "0000:17:00.0"), Ref(ws_, 0, "0000:4a:00.0")};
  EXPECT_NE(BuildTopologySummary(ws_, p1, 3).bytes, BuildTopologySummary(ws_, p3, 3).bytes);
}

TEST_F(SchedulerSummary, HostsAreOrderedCanonically) {
  std::vector<HostInventory> hosts{LoadFixture("ws4"), LoadFixture("hgx8"), LoadFixture("hgx8")};
  hosts[2].name = "other";
  Cluster c(std::move(hosts));
  // 1 GPU on the workstation, 4 on one hgx host, 2 on the other.
  std::vector<DeviceRef> d{Ref(c, 0, "0000:17:00.0"), Ref(c, 1, "0000:1a:00.0"),
                           Ref(c, 1, "0000:1b:00.0"), Ref(c, 1, "0000:3b:00.0"),
                           Ref(c, 1, "0000:3c:00.0"), Ref(c, 2, "0000:9a:00.0"),
                           Ref(c, 2, "0000:9b:00.0")};
  SummaryView v = View(BuildTopologySummary(c, d, 5));
  EXPECT_EQ(v.header.num_hosts, 3);
  EXPECT_EQ(v.header.cross_host_bw, HZ_BW_LOW);
  EXPECT_EQ(v.header.cross_group_bw, HZ_BW_NONE);  // no host has two groups
  ASSERT_EQ(v.header.num_groups, 3);
  EXPECT_EQ(v.groups[0].gpus, 4);
  EXPECT_EQ(v.groups[0].host, 0);
  EXPECT_EQ(v.groups[1].gpus, 2);
  EXPECT_EQ(v.groups[1].host, 1);
  EXPECT_EQ(v.groups[2].gpus, 1);
  EXPECT_EQ(v.groups[2].host, 2);
  // Listing the same devices in another order changes nothing.
  std::vector<DeviceRef> r(d.rbegin(), d.rend());
  EXPECT_EQ(BuildTopologySummary(c, d, 5).bytes, BuildTopologySummary(c, r, 5).bytes);
}

// In a cluster of hosts, each host knows its own devices and the others'
// shapes. The summary built that way on any host is the one built from the
// whole allocation, byte for byte, and its private map names this host's
// devices and only them.
TEST_F(SchedulerSummary, EachHostBuildsTheWholeSummaryFromTheOthersShapes) {
  std::vector<HostInventory> inventories{LoadFixture("ws4"), LoadFixture("hgx8"),
                                         LoadFixture("hgx8")};
  inventories[2].name = "other";
  Cluster whole(inventories);
  const std::vector<std::vector<std::string>> bdfs{
      {"0000:17:00.0", "0000:31:00.0"},                                  // an NVLink pair
      {"0000:1a:00.0", "0000:1b:00.0", "0000:9a:00.0", "0000:1c:00.0"},  // 2 groups, NICs
      {"0000:9a:00.0", "0000:9b:00.0"}};
  std::vector<DeviceRef> all;
  std::vector<Cluster> alone;
  std::vector<std::vector<DeviceRef>> local(3);
  std::vector<HostShape> shapes;
  for (uint32_t h = 0; h < 3; ++h) {
    alone.emplace_back(std::vector<HostInventory>{inventories[h]});
    for (const std::string& b : bdfs[h]) {
      all.push_back(Ref(whole, h, b));
      local[h].push_back(Ref(alone[h], 0, b));
    }
    shapes.push_back(ShapeOf(alone[h], local[h]));
  }
  EXPECT_EQ(shapes[1].groups.size(), 2u);
  EXPECT_NE(shapes[1].cross_group_bw, HZ_BW_NONE);
  const std::vector<uint8_t> expected = BuildTopologySummary(whole, all, 5).bytes;
  for (uint32_t h = 0; h < 3; ++h) {
    std::vector<HostShape> others;
    for (uint32_t o = 0; o < 3; ++o) {
      if (o != h) others.push_back(shapes[o]);
    }
    const TopologySummary s = BuildTopologySummary(alone[h], local[h], 5, others);
    EXPECT_EQ(s.bytes, expected) << "host " << h;
    std::set<DeviceRef> named;
    for (DeviceRef d : s.devices) {
      if (d != kOtherHostDevice) named.insert(d);
    }
    EXPECT_EQ(named, std::set<DeviceRef>(local[h].begin(), local[h].end()));
    // Another host's order of the others changes nothing.
    std::vector<HostShape> reversed(others.rbegin(), others.rend());
    EXPECT_EQ(BuildTopologySummary(alone[h], local[h], 5, reversed).bytes, expected);
  }
  SummaryView v = View(BuildTopologySummary(alone[0], local[0], 5, {shapes[1], shapes[2]}));
  EXPECT_EQ(v.header.num_hosts, 3);
  EXPECT_EQ(v.header.cross_host_bw, HZ_BW_LOW);
  EXPECT_EQ(v.header.num_devices, 8);
}

TEST_F(SchedulerSummary, OtherHostsThatWouldOverflowTheFormatAreLeftOut) {
  std::vector<DeviceRef> d{Ref(hgx_, 0, "0000:1a:00.0")};
  HostShape one;
  one.groups.push_back({1, 0, HZ_BW_NONE});
  HostShape huge;
  huge.groups.push_back({60000, 5535, HZ_BW_HIGH});  // with this host's device: 65536
  std::vector<HostShape> others(300, one);
  others.push_back(huge);
  SummaryView v = View(BuildTopologySummary(hgx_, d, 1, others));
  EXPECT_EQ(v.header.num_hosts, kMaxSummaryHosts);
  EXPECT_EQ(v.header.num_devices, kMaxSummaryHosts);
}

TEST_F(SchedulerSummary, PermutationIsPerTenantAndStable) {
  std::vector<DeviceRef> d;
  for (const char* b : {"0000:1a:00.0", "0000:1b:00.0", "0000:3b:00.0", "0000:3c:00.0"}) {
    d.push_back(Ref(hgx_, 0, b));
  }
  TopologySummary base = BuildTopologySummary(hgx_, d, 1234);
  EXPECT_EQ(BuildTopologySummary(hgx_, d, 1234).devices, base.devices);
  std::set<std::vector<DeviceRef>> orders;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    orders.insert(BuildTopologySummary(hgx_, d, seed).devices);
  }
  // 24 possible orders; 64 seeds should see most of them.
  EXPECT_GE(orders.size(), 12u);
  // Adding a device elsewhere keeps the relative order within the group.
  std::vector<DeviceRef> more = d;
  more.push_back(Ref(hgx_, 0, "0000:9a:00.0"));
  TopologySummary grown = BuildTopologySummary(hgx_, more, 1234);
  std::vector<DeviceRef> group0(grown.devices.begin(), grown.devices.begin() + 4);
  EXPECT_EQ(group0, base.devices);
  EXPECT_EQ(grown.IndexOf(Ref(hgx_, 0, "0000:9a:00.0")), 4u);
  EXPECT_EQ(grown.IndexOf(Ref(hgx_, 0, "0000:be:00.0")), kNoIndex);
}

TEST_F(SchedulerSummary, EmptyAllocation) {
  TopologySummary s = BuildTopologySummary(hgx_, {}, 1);
  ASSERT_EQ(s.bytes.size(), 16u);
  SummaryView v = View(s);
  EXPECT_EQ(v.header.num_devices, 0);
  EXPECT_EQ(v.header.num_hosts, 0);
}

TEST_F(SchedulerSummary, ParseRejectsMalformedBytes) {
  std::vector<DeviceRef> d{Ref(hgx_, 0, "0000:1a:00.0"), Ref(hgx_, 0, "0000:9a:00.0")};
  const std::vector<uint8_t> good = BuildTopologySummary(hgx_, d, 1).bytes;
  SummaryView v;
  ASSERT_TRUE(ParseTopologySummary(good, &v).ok());
  auto bad = [&](size_t at, uint8_t value) {
    std::vector<uint8_t> b = good;
    b[at] = value;
    return ParseTopologySummary(b, &v).ok();
  };
  EXPECT_FALSE(bad(0, 2));            // version
  EXPECT_FALSE(bad(4, 9));            // num_devices vs size
  EXPECT_FALSE(bad(12, 1));           // reserved
  EXPECT_FALSE(bad(16, 1));           // group number
  EXPECT_FALSE(bad(16 + 2, 2));       // group gpu count
  EXPECT_FALSE(bad(16 + 16 + 2, 7));  // device kind
  EXPECT_FALSE(bad(16 + 16 + 4, 5));  // device group
  std::vector<uint8_t> shorter(good.begin(), good.end() - 1);
  EXPECT_FALSE(ParseTopologySummary(shorter, &v).ok());
  EXPECT_FALSE(ParseTopologySummary({}, &v).ok());
}

}  // namespace
}  // namespace hz::scheduler
