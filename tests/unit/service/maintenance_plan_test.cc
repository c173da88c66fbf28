// The maintenance plan's rules (hz/service/maintenance_plan.h): when a maintenance
// may start, whose approval counts, and its file form.
#include "hz/service/maintenance_plan.h"

#include <gtest/gtest.h>

namespace hz::service {
namespace {

Maintenance& Told(MaintenancePlan& plan, std::vector<std::string> tenants, uint64_t at = 1000) {
  Maintenance& m = plan.Add("h1", {}, at, 600, 100);
  uint64_t seq = 10;
  for (const std::string& t : tenants) m.told.push_back({t, seq++, 0, 0});
  return m;
}

TEST(MaintenancePlan, StartsWhenEveryTenantToldApprovedOrAtItsTime) {
  MaintenancePlan plan;
  const uint64_t id = Told(plan, {"a", "b"}).id;
  EXPECT_TRUE(plan.Due(999).empty());
  ASSERT_NE(plan.Approve("a", 10, 200), nullptr);
  EXPECT_TRUE(plan.Due(999).empty());
  ASSERT_NE(plan.Approve("b", 11, 300), nullptr);
  EXPECT_EQ(plan.Due(999), std::vector<uint64_t>{id});

  MaintenancePlan timed;
  const uint64_t t = Told(timed, {"a"}).id;
  EXPECT_TRUE(timed.Due(999).empty());
  EXPECT_EQ(timed.Due(1000), std::vector<uint64_t>{t});
}

TEST(MaintenancePlan, AnApprovalCountsOnlyForTheTenantsOwnNotice) {
  MaintenancePlan plan;
  Told(plan, {"a", "b"});
  EXPECT_EQ(plan.Approve("a", 11, 200), nullptr);  // b's seq
  EXPECT_EQ(plan.Approve("c", 10, 200), nullptr);  // never told
  Maintenance* m = plan.Approve("a", 10, 200);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->FindTold("a")->approved_s, 200u);
  EXPECT_EQ(m->FindTold("b")->approved_s, 0u);
  m->state = MaintenanceState::kCancelled;
  EXPECT_EQ(plan.Approve("b", 11, 300), nullptr);  // no longer scheduled
  EXPECT_TRUE(plan.Due(5000).empty());
}

TEST(MaintenancePlan, CheckpointsCountOnlyForOpenMaintenancesOfTheTenant) {
  MaintenancePlan plan;
  const uint64_t open = Told(plan, {"a"}).id;
  const uint64_t closed = Told(plan, {"a"}).id;  // (Add may move the first)
  plan.Find(closed)->state = MaintenanceState::kCompleted;
  plan.NoteCheckpoint("a");
  plan.NoteCheckpoint("z");
  EXPECT_EQ(plan.Find(open)->told[0].checkpoints, 1u);
  EXPECT_EQ(plan.Find(closed)->told[0].checkpoints, 0u);
}

TEST(MaintenancePlan, RoundTripsThroughItsFileAndRefusesADamagedOne) {
  MaintenancePlan plan;
  Maintenance& m = Told(plan, {"a", "b"});
  m.vms = {"/run/vm1.sock"};
  plan.Approve("a", 10, 200);
  m.state = MaintenanceState::kStarted;
  m.started_s = 300;
  m.hook = "start: exit 0";
  StatusOr<MaintenancePlan> back = MaintenancePlan::FromJson(plan.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), plan.ToJson());
  EXPECT_TRUE(back->UnderWay("h1"));
  EXPECT_EQ(back->Add("h1", {}, 1, 1, 1).id, 2u);  // ids are not reused

  for (const char* bad : {"", "{", "[]", R"({"version":2,"next_id":1,"maintenances":[]})",
                          R"({"version":1,"next_id":1,"maintenances":[{"id":1}]})"}) {
    StatusOr<MaintenancePlan> p = MaintenancePlan::FromJson(bad);
    EXPECT_EQ(p.status().code(), StatusCode::kCorruption) << bad;
  }
  nlohmann::json j = plan.ToJson();
  j["maintenances"][0]["state"] = "paused";
  EXPECT_FALSE(MaintenancePlan::FromJson(j.dump()).ok());
  j = plan.ToJson();
  j["next_id"] = 1;  // an id at or beyond it
  EXPECT_FALSE(MaintenancePlan::FromJson(j.dump()).ok());
}

}  // namespace
}  // namespace hz::service
