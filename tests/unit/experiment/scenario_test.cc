#include "hz/experiment/scenario.h"

#include <gtest/gtest.h>

#include "cohort_util.h"
#include "hz/experiment/cohort.h"
#include "hz/scheduler/synthetic_cluster.h"

namespace hz::experiment {
namespace {

using testing::MechanismsOf;

constexpr const char* kScenario = R"({
  "hosts": 3, "gpus_per_host": 2,
  "jobs": [{"arrival_s": 0, "duration_s": 60, "gpus": 2},
           {"arrival_s": 4, "duration_s": 30.4, "gpus": 1}],
  "events": [{"time_s": 25, "kind": "gpu_failure", "job": 0},
             {"time_s": 12.5, "kind": "maintenance", "job": 1}],
  "model": {"restart_s": 5, "ckpt_gb_per_gpu": {"value": 1, "source": "measured"}}
})";

TEST(Scenario, ReadsJobsEventsAndTheModel) {
  Scenario s;
  Model m;
  ASSERT_TRUE(ParseScenario(kScenario, &s, &m).ok());
  EXPECT_EQ(s.hosts, 3);
  EXPECT_EQ(s.gpus_per_host, 2);
  ASSERT_EQ(s.jobs.size(), 2u);
  EXPECT_EQ(s.jobs[1].arrival_s, 4u);
  EXPECT_EQ(s.jobs[1].duration_s, 30u);
  EXPECT_EQ(s.jobs[0].gpus, 2u);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].kind, Outage::kGpuFailure);
  EXPECT_EQ(s.events[1].kind, Outage::kMaintenance);
  EXPECT_EQ(s.events[1].time, 12.5);
  EXPECT_EQ(s.events[1].job, 1u);
  EXPECT_EQ(m.restart_s.value, 5);
  EXPECT_EQ(m.ckpt_gb_per_gpu.source, "measured");
  EXPECT_EQ(s.calibrated, (std::vector<std::string>{"ckpt_gb_per_gpu", "restart_s"}));
}

TEST(Scenario, EventsAndModelMayBeLeftOut) {
  Scenario s;
  Model m;
  const double restart = m.restart_s.value;
  ASSERT_TRUE(ParseScenario(R"({"hosts": 1, "gpus_per_host": 8,
                                "jobs": [{"arrival_s": 0, "duration_s": 9, "gpus": 8}]})",
                            &s, &m)
                  .ok());
  EXPECT_TRUE(s.events.empty());
  EXPECT_EQ(m.restart_s.value, restart);
}

TEST(Scenario, BadInputChangesNothing) {
  const char* job = R"("jobs": [{"arrival_s": 0, "duration_s": 9, "gpus": 2}])";
  const std::string head = R"({"hosts": 2, "gpus_per_host": 2, )";
  for (const std::string& bad : {
           std::string("[]"),
           std::string("{not json"),
           head + job + R"(, "extra": 1})",
           head + R"("jobs": []})",
           head + R"("jobs": [{"arrival_s": 0, "duration_s": 9, "gpus": 4}]})",
           head + R"("jobs": [{"arrival_s": 0, "duration_s": 0, "gpus": 1}]})",
           head + R"("jobs": [{"arrival_s": 0, "duration_s": 9, "gpus": 1, "qos": 1}]})",
           head + job + R"(, "events": [{"time_s": 1, "kind": "gpu_failure", "job": 1}]})",
           head + job + R"(, "events": [{"time_s": 1, "kind": "meteor", "job": 0}]})",
           head + job + R"(, "events": [{"time_s": -1, "kind": "maintenance", "job": 0}]})",
           head + job + R"(, "model": {"restart_s": 0}})",
           head + job + R"(, "model": {"warp_speed": 9}})",
           std::string(R"({"hosts": 0, "gpus_per_host": 2, )") + job + "}",
       }) {
    Scenario s;
    s.hosts = 77;
    Model m;
    const double restart = m.restart_s.value;
    EXPECT_TRUE(ParseScenario(bad, &s, &m).IsInvalidArgument()) << bad;
    EXPECT_EQ(s.hosts, 77) << bad;
    EXPECT_EQ(m.restart_s.value, restart) << bad;
  }
}

// One 2-GPU job of 60 s on two 2-GPU hosts; 1 GB checkpoints written at
// 10 GB/s every 10 s (0.1 s stalls), restored at 1 GB/s after a 5 s restart.
class FixedEventsTest : public ::testing::Test {
 protected:
  FixedEventsTest() {
    m_.ckpt_gb_per_gpu.value = 1;
    m_.tenant_write_fsync_gbps.value = 10;
    m_.standard_ckpt_interval_s.value = 10;
    m_.restart_s.value = 5;
    m_.restore_gbps.value = 1;
    m_.peer_copy_gbps.value = 1;
    m_.repair_s.value = 1000;
    m_.maintenance_s.value = 1000;
    jobs_.push_back({0, 60, 2, false});
  }
  scheduler::Cluster cluster_ = scheduler::UniformCluster(2, 2);
  Model m_;
  std::vector<TraceJob> jobs_;
};

TEST_F(FixedEventsTest, AFailureLosesTheWorkSinceTheLastCheckpoint) {
  const std::vector<FixedEvent> events = {{25, Outage::kGpuFailure, 0}};
  const RunResult r = Simulate(cluster_, jobs_, m_, MechanismsOf("standard"), 0, &events);
  ASSERT_EQ(r.per_job.size(), 1u);
  // Checkpoints of 20 s of work by 20.2 s; 4.8 s more lost at 25 s.
  EXPECT_NEAR(r.per_job[0].lost_s, 4.8, 1e-9);
  EXPECT_EQ(r.per_job[0].interruptions, 1u);
  EXPECT_EQ(r.per_job[0].ckpt_interval_s, 10);
  // Back at 25 + 5 + 1 with 40 s left and four checkpoints on the way.
  EXPECT_NEAR(r.per_job[0].jct_s, 31 + 40 + 4 * 0.1, 1e-9);
}

TEST_F(FixedEventsTest, ASaveOnNoticeLosesNothing) {
  m_.early_maintenance_notice_s.value = 10;
  const std::vector<FixedEvent> events = {{25, Outage::kMaintenance, 0}};
  const RunResult standard = Simulate(cluster_, jobs_, m_, MechanismsOf("standard"), 0, &events);
  const RunResult cooperative =
      Simulate(cluster_, jobs_, m_, MechanismsOf("cooperative"), 0, &events);
  EXPECT_GT(standard.per_job[0].lost_s, 0);
  EXPECT_EQ(cooperative.per_job[0].lost_s, 0);
  EXPECT_EQ(cooperative.per_job[0].interruptions, 1u);
}

// One host: a job that leaves for a maintenance waits for the host to
// come back. Notice at 200 for 300, pushed (coarse deadline 300, exact).
class MaintenanceTest : public FixedEventsTest {
 protected:
  MaintenanceTest() {
    m_.early_maintenance_notice_s.value = 100;
    m_.maintenance_notice_s.value = 100;
    jobs_[0].duration_s = 600;
    jobs_[0].gpus = 1;  // no collectives: its speed is the same in every cohort
  }
  scheduler::Cluster one_host_ = scheduler::UniformCluster(1, 2);
  const std::vector<FixedEvent> events_ = {{300, Outage::kMaintenance, 0}};
};

TEST_F(MaintenanceTest, OnceEveryTenantToldApprovedItStartsAndEndsEarly) {
  const RunResult r = Simulate(one_host_, jobs_, m_, MechanismsOf("cooperative"), 0, &events_);
  ASSERT_EQ(r.per_job.size(), 1u);
  EXPECT_EQ(r.per_job[0].lost_s, 0);
  // Heard at 200 + d, saved by 200 + d + 0.008 (1 GB at 125 GB/s) and
  // approved as it left: the host is back 1000 s later, not at 1300. Then a
  // 5 s restart, a 1 s restore from the peer and the 400 - d s left.
  EXPECT_NEAR(r.per_job[0].jct_s, 200.008 + 1000 + 6 + 400, 1e-6);
}

TEST_F(MaintenanceTest, ATenantThatHasNotApprovedHoldsItToItsTime) {
  // Told early but not saving on notice: the job runs on, so its tenant
  // does not approve and the maintenance starts at 300.
  const RunResult r =
      Simulate(one_host_, jobs_, m_, MechanismsOf("only_pushed_notices"), 0, &events_);
  ASSERT_EQ(r.per_job.size(), 1u);
  EXPECT_EQ(r.per_job[0].interruptions, 1u);
  // Checkpoints every 10 s of work and 0.1 s: 290 s kept at 300.
  EXPECT_NEAR(r.per_job[0].lost_s, 300 - 29 * 0.1 - 290, 1e-6);
  EXPECT_GT(r.per_job[0].jct_s, 1300 + 5);
}

TEST_F(FixedEventsTest, AnEventAfterTheJobEndsHitsNothing) {
  const std::vector<FixedEvent> events = {{500, Outage::kHostFailure, 0}};
  const RunResult r = Simulate(cluster_, jobs_, m_, MechanismsOf("standard"), 0, &events);
  EXPECT_EQ(r.interruptions, 0u);
  EXPECT_NEAR(r.per_job[0].jct_s, 60 + 6 * 0.1, 1e-9);  // the last save at the very end too
}

}  // namespace
}  // namespace hz::experiment
