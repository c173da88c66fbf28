// Placement across the hosts of a cluster: the record each host publishes
// (and what a malformed one gets), and the plan any host makes from them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hz/scheduler/cluster_placement.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using json = nlohmann::json;
using testing::LoadFixture;

// A host named `name` of the fixture with its first `taken` GPUs allocated.
PlacementRecord Host(const std::string& name, const std::string& fixture, uint32_t taken = 0) {
  PlacementRecord r;
  r.host = LoadFixture(fixture);
  r.host.name = name;
  for (const Device& d : r.host.devices) {
    const bool take = d.kind == DeviceKind::kGpu && taken > 0;
    taken -= take ? 1 : 0;
    r.free.push_back(!take);
  }
  return r;
}

uint32_t Gpus(const std::vector<HostPart>& parts) {
  uint32_t n = 0;
  for (const HostPart& p : parts) n += p.request.gpus;
  return n;
}

TEST(ClusterPlacement, ARecordSurvivesTheStoreWithWhatPlacementNeeds) {
  PlacementRecord r = Host("h0", "hgx8", 3);
  r.cordoned = true;
  r.any_tenant = false;
  r.tenants = {"acme"};
  // Through text, as another host reads it.
  StatusOr<PlacementRecord> back =
      ParsePlacementRecord("h0", json::parse(PlacementRecordJson(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->host.devices.size(), r.host.devices.size());
  for (size_t i = 0; i < r.host.devices.size(); ++i) {
    const Device &a = r.host.devices[i], &b = back->host.devices[i];
    EXPECT_EQ(a.bdf, b.bdf);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.numa_node, b.numa_node);
    EXPECT_EQ(a.switch_bdf, b.switch_bdf);
    EXPECT_EQ(a.island, b.island);
    EXPECT_EQ(a.rail, b.rail);
  }
  EXPECT_EQ(back->free, r.free);
  EXPECT_TRUE(back->cordoned);
  EXPECT_FALSE(back->any_tenant);
  EXPECT_EQ(back->tenants, r.tenants);
}

TEST(ClusterPlacement, WhatIsNotARecordIsRefusedByName) {
  const json good = PlacementRecordJson(Host("h1", "ws4"));
  auto with = [&](auto change) {
    json j = good;
    change(j);
    return ParsePlacementRecord("h1", j).status();
  };
  EXPECT_TRUE(with([](json&) {}).ok());
  const std::vector<std::pair<const char*, Status>> bad = {
      {"not an object", ParsePlacementRecord("h1", json::array()).status()},
      {"no device list", with([](json& j) { j.erase("devices"); })},
      {"cordoned", with([](json& j) { j.erase("cordoned"); })},
      {"listed twice", with([](json& j) { j["devices"].push_back(j["devices"][0]); })},
      {"kind", with([](json& j) { j["devices"][0]["kind"] = "fpga"; })},
      {"free must be set", with([](json& j) { j["devices"][0].erase("free"); })},
      {"PCI address", with([](json& j) { j["devices"][0]["bdf"] = "../../x"; })},
      {"small integers", with([](json& j) { j["devices"][0]["numa"] = -5; })},
      {"small integers", with([](json& j) { j["devices"][0]["rail"] = "x"; })},
      {"tenants", with([](json& j) { j["tenants"] = "acme"; })},
  };
  for (const auto& [what, s] : bad) {
    EXPECT_TRUE(s.IsInvalidArgument()) << what << ": " << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("h1"), std::string::npos) << s.ToString();
  }
  json many = good;
  many["devices"] = json::array();
  for (size_t i = 0; i <= kMaxPlacementDevices; ++i) many["devices"].push_back(good["devices"][0]);
  EXPECT_TRUE(ParsePlacementRecord("h1", many).status().IsInvalidArgument());
}

TEST(ClusterPlacement, OneHostThatHoldsItIsPreferredToSeveral) {
  // h0 (a workstation) has 1 GPU free, h1 (another) 4 on separate root
  // ports, h2 (an HGX) 8 in two NVLink islands of 4.
  const std::vector<PlacementRecord> hosts = {Host("h0", "ws4", 3), Host("h1", "ws4"),
                                              Host("h2", "hgx8")};
  auto only_host = [&](uint32_t gpus) {
    StatusOr<std::vector<HostPart>> p = PlanAcrossHosts(hosts, "acme", {gpus, 0, HZ_LOC_ANY});
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p.ok() ? p->size() : 0, 1u);
    EXPECT_EQ(p.ok() && !p->empty() ? (*p)[0].request.gpus : 0, gpus);
    return p.ok() && !p->empty() ? (*p)[0].host : std::string();
  };
  EXPECT_EQ(only_host(1), "h0");  // the best fit keeps the emptier hosts whole
  EXPECT_EQ(only_host(4), "h2");  // where all four share an island
  EXPECT_EQ(only_host(8), "h2");
}

TEST(ClusterPlacement, AmongEqualHostsTheFirstListedWins) {
  for (const char* first : {"a", "b"}) {
    const std::string second = std::string(first) == "a" ? "b" : "a";
    StatusOr<std::vector<HostPart>> p =
        PlanAcrossHosts({Host(first, "ws4"), Host(second, "ws4")}, "acme", {2, 0, HZ_LOC_ANY});
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->size(), 1u);
    EXPECT_EQ((*p)[0].host, first);
  }
}

TEST(ClusterPlacement, WhatNoHostHoldsSpreadsOverAsFewAsPossible) {
  // 10 GPUs: h2's 8 and 2 more, not all three hosts.
  const std::vector<PlacementRecord> hosts = {Host("h0", "ws4"), Host("h1", "ws4"),
                                              Host("h2", "hgx8")};
  StatusOr<std::vector<HostPart>> p = PlanAcrossHosts(hosts, "acme", {10, 4, HZ_LOC_ANY});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ(Gpus(*p), 10u);
  uint32_t nics = 0;
  for (const HostPart& part : *p) {
    nics += part.request.nics;
    EXPECT_EQ(part.request.locality, HZ_LOC_ANY);
    if (part.host == "h2") {
      EXPECT_EQ(part.request.gpus, 8u);
    }
  }
  // The NICs follow the GPUs; the workstation's part takes both its NIC ports,
  // which share one IOMMU group, where one was asked for.
  EXPECT_EQ(nics, 5u);
  // More than the cluster has free: refused, nothing planned.
  EXPECT_TRUE(PlanAcrossHosts(hosts, "acme", {17, 0, HZ_LOC_ANY}).status().IsLimit());
}

TEST(ClusterPlacement, SameHostAndSameGroupNeverSpread) {
  const std::vector<PlacementRecord> small = {Host("h0", "ws4"), Host("h1", "ws4")};
  EXPECT_TRUE(PlanAcrossHosts(small, "acme", {6, 0, HZ_LOC_SAME_HOST}).status().IsLimit());
  StatusOr<std::vector<HostPart>> any = PlanAcrossHosts(small, "acme", {6, 0, HZ_LOC_ANY});
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->size(), 2u);
  // hgx8's NVLink islands hold 4 GPUs each: 4 in one group fit on h2 only.
  const std::vector<PlacementRecord> mixed = {Host("h0", "ws4", 1), Host("h2", "hgx8")};
  StatusOr<std::vector<HostPart>> group = PlanAcrossHosts(mixed, "acme", {4, 0, HZ_LOC_SAME_GROUP});
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  ASSERT_EQ(group->size(), 1u);
  EXPECT_EQ((*group)[0].host, "h2");
  EXPECT_EQ((*group)[0].request.locality, HZ_LOC_SAME_GROUP);
  EXPECT_TRUE(PlanAcrossHosts(mixed, "acme", {5, 0, HZ_LOC_SAME_GROUP}).status().IsLimit());
}

TEST(ClusterPlacement, CordonedHostsAndHostsWithoutTheTenantsVmTakeNothing) {
  PlacementRecord cordoned = Host("h0", "hgx8");
  cordoned.cordoned = true;
  PlacementRecord eves_only = Host("h1", "hgx8");
  eves_only.any_tenant = false;
  eves_only.tenants = {"eve"};
  const std::vector<PlacementRecord> hosts = {cordoned, eves_only, Host("h2", "ws4")};
  StatusOr<std::vector<HostPart>> acme = PlanAcrossHosts(hosts, "acme", {4, 0, HZ_LOC_ANY});
  ASSERT_TRUE(acme.ok());
  ASSERT_EQ(acme->size(), 1u);
  EXPECT_EQ((*acme)[0].host, "h2");
  EXPECT_TRUE(PlanAcrossHosts(hosts, "acme", {5, 0, HZ_LOC_ANY}).status().IsLimit());
  StatusOr<std::vector<HostPart>> eve = PlanAcrossHosts(hosts, "eve", {8, 0, HZ_LOC_ANY});
  ASSERT_TRUE(eve.ok());
  ASSERT_EQ(eve->size(), 1u);
  EXPECT_EQ((*eve)[0].host, "h1");
}

}  // namespace
}  // namespace hz::scheduler
