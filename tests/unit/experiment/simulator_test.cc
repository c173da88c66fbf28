#include "hz/experiment/simulator.h"

#include <gtest/gtest.h>

#include "cohort_util.h"
#include "hz/experiment/cohort.h"
#include "hz/scheduler/synthetic_cluster.h"

namespace hz::experiment {
namespace {

using testing::MechanismsOf;

// A model in which nothing happens to the infrastructure; tests switch on
// what they look at.
Model Quiet() {
  Model m;
  m.gpu_failures_per_gpu_hour.value = 0;
  m.host_failures_per_host_hour.value = 0;
  m.maintenance_per_host_hour.value = 0;
  m.preemptions_per_job_hour.value = 0;
  return m;
}

// Long jobs, so that every outage finds work to lose.
std::vector<TraceJob> LongJobs(size_t n) {
  std::vector<TraceJob> jobs = SyntheticTrace(n, 5).jobs;
  for (TraceJob& j : jobs) j.duration_s = 2 * 86400;
  return jobs;
}

// A busy cluster of day-long jobs arriving `squeeze` times faster than the
// synthetic trace's pace, each on `gpus` GPUs (0: the trace's count).
std::vector<TraceJob> BusyJobs(size_t n, uint64_t squeeze, uint32_t gpus = 0) {
  std::vector<TraceJob> jobs = SyntheticTrace(n, 4).jobs;
  for (TraceJob& j : jobs) {
    j.arrival_s /= squeeze;
    j.duration_s = 86400;
    if (gpus != 0) j.gpus = gpus;
  }
  return jobs;
}

// Maintenance often enough that notices find jobs running.
Model Maintained() {
  Model m = Quiet();
  m.maintenance_per_host_hour.value = 2e-3;
  return m;
}

class SimulatorTest : public ::testing::Test {
 protected:
  scheduler::Cluster cluster_ = scheduler::UniformCluster(16, 8);
};

TEST_F(SimulatorTest, TheSameSeedGivesTheSameRun) {
  Model m;
  m.maintenance_per_host_hour.value = 2e-3;
  // Long jobs, so that maintenance notices find them running.
  std::vector<TraceJob> jobs = SyntheticTrace(300, 2).jobs;
  for (TraceJob& j : jobs) j.duration_s *= 10;
  const RunResult a = Simulate(cluster_, jobs, m, MechanismsOf("cooperative"), 9);
  const RunResult b = Simulate(cluster_, jobs, m, MechanismsOf("cooperative"), 9);
  EXPECT_EQ(a.jct_s, b.jct_s);
  EXPECT_EQ(a.lost_gpu_h, b.lost_gpu_h);
  EXPECT_EQ(a.interruptions, b.interruptions);
  // The negotiation engine's decisions repeat too.
  EXPECT_GT(a.offers_made, 0u);
  EXPECT_EQ(a.offers_made, b.offers_made);
  EXPECT_EQ(a.offers_accepted, b.offers_accepted);
  EXPECT_EQ(a.reservations_honoured, b.reservations_honoured);
  EXPECT_EQ(a.reservation_fallbacks, b.reservation_fallbacks);
}

TEST_F(SimulatorTest, WithoutOutagesEveryJobRunsOnceAndNothingIsLost) {
  const std::vector<TraceJob> jobs = SyntheticTrace(300, 3).jobs;
  for (const char* cohort : {"standard", "cooperative"}) {
    const RunResult r = Simulate(cluster_, jobs, Quiet(), MechanismsOf(cohort), 1);
    EXPECT_EQ(r.jobs, jobs.size()) << cohort;
    EXPECT_EQ(r.interruptions, 0u) << cohort;
    EXPECT_EQ(r.lost_gpu_h, 0) << cohort;
    EXPECT_GT(r.utilisation, 0) << cohort;
    EXPECT_LE(r.utilisation, 1) << cohort;
    // A job takes at least its own duration.
    for (size_t i = 0; i < r.jct_s.size(); ++i) EXPECT_GE(r.jct_s[i], 1) << cohort;
  }
}

TEST_F(SimulatorTest, ASaveOnNoticeKeepsTheWorkAMaintenanceWouldCost) {
  Model m = Quiet();
  m.maintenance_per_host_hour.value = 2e-3;
  const std::vector<TraceJob> jobs = LongJobs(100);
  const RunResult standard = Simulate(cluster_, jobs, m, MechanismsOf("standard"), 4);
  const RunResult jit = Simulate(cluster_, jobs, m, MechanismsOf("only_jit_notice"), 4);
  ASSERT_GT(standard.interruptions, 0u);
  EXPECT_GT(standard.lost_gpu_h, 0);
  // The tenant's own save (2 s for 4 GB at 2 GB/s) fits in the 15-minute
  // notice: nothing is recomputed.
  EXPECT_GT(jit.interruptions, 0u);
  EXPECT_EQ(jit.lost_gpu_h, 0);
}

TEST_F(SimulatorTest, WarnedFailuresAreSavedOnlyWhenTheTenantIsTold) {
  Model m = Quiet();
  m.gpu_failures_per_gpu_hour.value = 2e-4;
  m.predictable_failure_share.value = 1;  // every failure is warned of
  const std::vector<TraceJob> jobs = LongJobs(100);
  const RunResult told = Simulate(cluster_, jobs, m, MechanismsOf("events_coarse"), 6);
  const RunResult untold = Simulate(cluster_, jobs, m, MechanismsOf("events_none"), 6);
  ASSERT_GT(untold.interruptions, 0u);
  EXPECT_GT(untold.lost_gpu_h, 0);
  EXPECT_EQ(told.lost_gpu_h, 0);
}

TEST_F(SimulatorTest, ProviderCheckpointsLoseLessToUnannouncedGpuFailures) {
  Model m = Quiet();
  m.gpu_failures_per_gpu_hour.value = 2e-3;
  m.predictable_failure_share.value = 0;
  const std::vector<TraceJob> jobs = LongJobs(100);
  const RunResult standard = Simulate(cluster_, jobs, m, MechanismsOf("standard"), 8);
  const RunResult provider = Simulate(cluster_, jobs, m, MechanismsOf("only_provider_ckpt"), 8);
  ASSERT_GT(standard.interruptions, 0u);
  // Young's interval for a 0.16 s stall is minutes, against the standard 30,
  // and the snapshot in host memory outlives the GPUs at once.
  EXPECT_LT(provider.lost_gpu_h, standard.lost_gpu_h);
}

// The policy's tier decides what a host failure leaves: a local-disk
// checkpoint is out of reach with its host, a peer-host one is not, and the
// standard tenant's own storage is off the host anyway.
TEST_F(SimulatorTest, OnlyThePeerHostTierKeepsProviderCheckpointsThroughAHostFailure) {
  Model m = Quiet();
  m.host_failures_per_host_hour.value = 1e-2;
  const std::vector<TraceJob> jobs = LongJobs(100);
  Mechanisms peer = MechanismsOf("only_provider_ckpt");
  peer.peer_replicas = true;
  const RunResult standard = Simulate(cluster_, jobs, m, MechanismsOf("standard"), 8);
  const RunResult local = Simulate(cluster_, jobs, m, MechanismsOf("only_provider_ckpt"), 8);
  const RunResult replicated = Simulate(cluster_, jobs, m, peer, 8);
  ASSERT_GT(standard.interruptions, 0u);
  EXPECT_GT(local.lost_gpu_h, standard.lost_gpu_h);
  EXPECT_LT(replicated.lost_gpu_h, standard.lost_gpu_h);
}

// Reclaims are announced 30 s ahead on the bus: a tenant that hears and
// saves on notice loses nothing to them, and leaving ahead of a reclaim
// does not bring the next one forward.
TEST_F(SimulatorTest, ASpotReclaimHeardOnTheBusIsSavedAheadOfIt) {
  Model m = Quiet();
  m.preemptions_per_job_hour.value = 0.5;
  std::vector<TraceJob> jobs = LongJobs(60);
  for (TraceJob& j : jobs) j.preemptible = true;
  const RunResult standard = Simulate(cluster_, jobs, m, MechanismsOf("standard"), 3);
  const RunResult told = Simulate(cluster_, jobs, m, MechanismsOf("cooperative"), 3);
  const RunResult untold = Simulate(cluster_, jobs, m, MechanismsOf("events_none"), 3);
  ASSERT_GT(standard.interruptions, 0u);
  EXPECT_GT(standard.lost_gpu_h, 0);
  EXPECT_GT(untold.lost_gpu_h, 0);
  EXPECT_EQ(told.lost_gpu_h, 0);
  // The same reclaim draws, consumed by running time: about as many.
  EXPECT_LT(told.interruptions, standard.interruptions * 5 / 4);
  EXPECT_GT(told.interruptions, standard.interruptions * 3 / 4);
}

TEST_F(SimulatorTest, AReservationRestartsAMovedJobWithoutQueueing) {
  const Model m = Maintained();
  // A busy cluster: a moved job without a reservation queues behind the
  // jobs that arrived before it moved.
  const std::vector<TraceJob> jobs = BusyJobs(400, 20);
  Mechanisms jit = MechanismsOf("only_jit_notice");
  Mechanisms reserved = jit;
  reserved.reservations = true;
  const RunResult a = Simulate(cluster_, jobs, m, jit, 2);
  const RunResult b = Simulate(cluster_, jobs, m, reserved, 2);
  ASSERT_GT(a.interruptions, 0u);
  EXPECT_LT(b.recovery_mean_s, a.recovery_mean_s);
  // The negotiation engine offered, the tenants accepted, and moved jobs
  // restarted on what they had reserved.
  EXPECT_EQ(a.offers_made, 0u);
  EXPECT_GT(b.reservations_honoured, 0u);
  EXPECT_GE(b.offers_made, b.offers_accepted);
  EXPECT_GE(b.offers_accepted, b.reservations_honoured);
  // The offer is the provider's, made at the notice: it serves a tenant that
  // does not save on notice as well.
  const RunResult standard = Simulate(cluster_, jobs, m, MechanismsOf("standard"), 2);
  const RunResult only = Simulate(cluster_, jobs, m, MechanismsOf("only_reservations"), 2);
  ASSERT_GT(standard.interruptions, 0u);
  EXPECT_GT(only.reservations_honoured, 0u);
  EXPECT_LT(only.recovery_mean_s, standard.recovery_mean_s);
}

// One 8-GPU job alone on one host: its collectives' cost is all that
// differs between the tenant's own library and the provider's.
TEST_F(SimulatorTest, TheProvidersCollectivesPriceAMultiGpuJobAsMeasured) {
  const scheduler::Cluster one = scheduler::UniformCluster(1, 8);
  const std::vector<TraceJob> eight = {{0, 3600, 8, false}};
  const std::vector<TraceJob> single = {{0, 3600, 1, false}};
  Model m = Quiet();
  m.provider_added_latency_s.value = 1e-9;
  m.provider_busbw_ratio.value = 1;
  const double own = Simulate(one, eight, m, MechanismsOf("standard"), 1).jct_s.at(0);
  // As fast as the tenant's own library: the same time.
  EXPECT_NEAR(Simulate(one, eight, m, MechanismsOf("only_topology"), 1).jct_s.at(0), own,
              1e-6 * own);
  // Half the bus bandwidth and a slower call: longer.
  Model slow = m;
  slow.provider_busbw_ratio.value = 0.5;
  EXPECT_GT(Simulate(one, eight, slow, MechanismsOf("only_topology"), 1).jct_s.at(0), own);
  Model late = m;
  late.provider_added_latency_s.value = 1e-3;
  EXPECT_GT(Simulate(one, eight, late, MechanismsOf("only_topology"), 1).jct_s.at(0), own);
  // A job on one GPU does not communicate.
  EXPECT_EQ(Simulate(one, single, slow, MechanismsOf("only_topology"), 1).jct_s.at(0),
            Simulate(one, single, m, MechanismsOf("standard"), 1).jct_s.at(0));
}

TEST_F(SimulatorTest, ATenantToldNothingLetsTheOffersLapseAndQueues) {
  const RunResult r =
      Simulate(cluster_, BusyJobs(400, 20), Maintained(), MechanismsOf("events_none"), 2);
  EXPECT_GT(r.offers_made, 0u);
  EXPECT_EQ(r.offers_accepted, 0u);
  EXPECT_EQ(r.reservations_honoured, 0u);
  EXPECT_GT(r.reservation_fallbacks, 0u);
}

TEST_F(SimulatorTest, WithoutCapacityForAReplacementTheMovedJobQueues) {
  // Whole-host jobs, many more than hosts: the queue takes every host that
  // frees, so the engine finds none to offer while jobs wait.
  const RunResult r =
      Simulate(cluster_, BusyJobs(200, 100, 8), Maintained(), MechanismsOf("only_reservations"), 2);
  ASSERT_GT(r.interruptions, 0u);
  EXPECT_GT(r.reservation_fallbacks, 0u);
  EXPECT_LT(r.offers_made, r.reservation_fallbacks);
}

}  // namespace
}  // namespace hz::experiment
