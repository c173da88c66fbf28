// Allocations spread over several hosts (hz/service/spread_allocations.h):
// the plan's parts placed by each host, all or nothing, kept on disk and
// released as one. The hosts are fakes that answer like the control API.
#include <gtest/gtest.h>

#include <map>

#include "hz/common/file.h"
#include "hz/service/spread_allocations.h"
#include "test_util.h"

namespace hz::service {
namespace {

using json = nlohmann::json;
using scheduler::testing::LoadFixture;
using scheduler::testing::TempDir;

// A host with a 4-GPU workstation: it places GPUs by count, like its
// scheduler would, and answers as its control API does.
struct FakeHost {
  std::string name;
  uint32_t free_gpus = 4;
  std::map<uint64_t, uint32_t> allocations;  // id -> GPUs
  uint64_t next_id = 1;
  bool refuses = false;   // answers every alloc with kLimit
  bool reachable = true;  // false: the call times out

  scheduler::PlacementRecord Record() const {
    scheduler::PlacementRecord r;
    r.host = LoadFixture("ws4");
    r.host.name = name;
    uint32_t taken = 4 - free_gpus;
    for (const scheduler::Device& d : r.host.devices) {
      const bool take = d.kind == scheduler::DeviceKind::kGpu && taken > 0;
      taken -= take ? 1 : 0;
      r.free.push_back(!take);
    }
    return r;
  }

  json Answer(const json& req) {
    auto error = [](const std::string& why, StatusCode c) {
      return json{{"ok", false}, {"error", why}, {"status", static_cast<int>(c)}};
    };
    if (req["cmd"] == "alloc") {
      EXPECT_EQ(req.value("this_host_only", false), true);  // a part never spreads again
      const uint32_t gpus = req["gpus"].get<uint32_t>();
      if (refuses || gpus > free_gpus) return error("no room", StatusCode::kLimit);
      free_gpus -= gpus;
      allocations[next_id] = gpus;
      return {{"ok", true}, {"result", {{"id", next_id++}, {"devices", json::array()}}}};
    }
    auto it = allocations.find(req["allocation"].get<uint64_t>());
    if (it == allocations.end()) return error("no allocation", StatusCode::kNotFound);
    free_gpus += it->second;
    allocations.erase(it);
    return {{"ok", true}, {"result", json::object()}};
  }
};

FakeHost Named(const std::string& name) {
  FakeHost h;
  h.name = name;
  return h;
}

class SpreadAllocationsTest : public ::testing::Test {
 protected:
  std::unique_ptr<SpreadAllocations> Open() {
    SpreadHooks hooks;
    hooks.self = "a";
    hooks.local_record = [this] { return hosts_["a"].Record(); };
    hooks.run_here = [this](const json& req) -> CommandResult {
      json answer = hosts_["a"].Answer(req);
      if (answer["ok"]) return answer["result"];
      return Status(static_cast<StatusCode>(answer["status"].get<int>()),
                    answer["error"].get<std::string>());
    };
    hooks.call = [this](const std::string& host, const json& req) -> StatusOr<json> {
      if (!hosts_[host].reachable) return Status::TimedOut("no answer");
      return hosts_[host].Answer(req);
    };
    auto s = std::make_unique<SpreadAllocations>(dir_.path() + "/spread.json", hooks, false);
    EXPECT_TRUE(s->Load().ok());
    s->SetHosts({Info("a", true), Info("b", false)});
    return s;
  }

  cluster::HostInfo Info(const std::string& name, bool self) {
    cluster::HostInfo h{name, "10.0.0.1", json::object(), 1000, self};
    h.attributes["placement"] = scheduler::PlacementRecordJson(hosts_[name].Record());
    return h;
  }

  TempDir dir_;
  std::map<std::string, FakeHost> hosts_ = {{"a", Named("a")}, {"b", Named("b")}};
};

TEST_F(SpreadAllocationsTest, WhatNoHostHoldsIsPlacedInPartsAndReleasedAsOne) {
  auto spread = Open();
  CommandResult r = spread->Allocate("acme", {6, 0, HZ_LOC_ANY});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)["parts"].size(), 2u);
  EXPECT_EQ(hosts_["a"].free_gpus + hosts_["b"].free_gpus, 2u);
  EXPECT_EQ((*r)["parts"][0]["host"], "a");  // this host first among equals
  // Kept across a restart.
  const uint64_t id = (*r)["spread"];
  auto again = Open();
  ASSERT_EQ(again->List().size(), 1u);
  EXPECT_EQ(again->List()[0]["spread"], id);
  EXPECT_EQ(again->List()[0]["parts"].size(), 2u);
  ASSERT_TRUE(again->Release(id).ok());
  EXPECT_TRUE(hosts_["a"].allocations.empty());
  EXPECT_TRUE(hosts_["b"].allocations.empty());
  EXPECT_TRUE(Open()->List().empty());
  EXPECT_TRUE(again->Release(id).status().IsNotFound());
}

TEST_F(SpreadAllocationsTest, APartThatFailsLeavesNothingPlaced) {
  auto spread = Open();
  hosts_["b"].refuses = true;  // its record said it had room: it took devices since
  CommandResult r = spread->Allocate("acme", {6, 0, HZ_LOC_ANY});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsLimit()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("host b"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(hosts_["a"].allocations.empty());  // a's part was released again
  EXPECT_EQ(hosts_["a"].free_gpus, 4u);
  EXPECT_TRUE(spread->List().empty());
  // More than the cluster has: refused before anything is placed.
  CommandResult nine = spread->Allocate("acme", {9, 0, HZ_LOC_ANY});
  EXPECT_TRUE(nine.status().IsLimit()) << nine.status().ToString();
}

TEST_F(SpreadAllocationsTest, AHostOutOfReachKeepsItsPartUntilItCanBeReleased) {
  auto spread = Open();
  CommandResult r = spread->Allocate("acme", {6, 0, HZ_LOC_ANY});
  ASSERT_TRUE(r.ok());
  hosts_["b"].reachable = false;
  CommandResult released = spread->Release((*r)["spread"]);
  ASSERT_FALSE(released.ok());
  EXPECT_TRUE(released.status().IsTimedOut()) << released.status().ToString();
  ASSERT_EQ(spread->List().size(), 1u);
  ASSERT_EQ(spread->List()[0]["parts"].size(), 1u);
  EXPECT_EQ(spread->List()[0]["parts"][0]["host"], "b");
  hosts_["b"].reachable = true;
  EXPECT_TRUE(spread->Release((*r)["spread"]).ok());
  EXPECT_TRUE(hosts_["b"].allocations.empty());
}

TEST_F(SpreadAllocationsTest, AMalformedRecordIsCountedAndItsHostGetsNothing) {
  auto spread = Open();
  cluster::HostInfo junk = Info("b", false);
  junk.attributes["placement"]["devices"] = "all of them";
  spread->SetHosts({Info("a", true), junk});
  EXPECT_EQ(spread->malformed_records(), 1u);
  EXPECT_TRUE(spread->Allocate("acme", {6, 0, HZ_LOC_ANY}).status().IsLimit());
  EXPECT_TRUE(hosts_["b"].allocations.empty());
}

TEST_F(SpreadAllocationsTest, AFileThatIsNotOursIsRefused) {
  ASSERT_TRUE(WriteFileAtomic(dir_.path() + "/spread.json",
                              "{\"next_id\": 1, \"allocations\": [{}]}", false)
                  .ok());
  SpreadAllocations s(dir_.path() + "/spread.json", {}, false);
  EXPECT_TRUE(s.Load().IsCorruption());
}

}  // namespace
}  // namespace hz::service
