#include "hz/experiment/comm_model.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

namespace hz::experiment {
namespace {

std::string ReadTestdata(const std::string& name) {
  std::ifstream in(std::string(HZ_EXPERIMENT_TESTDATA) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, Figure> ByKey(const FittedFigures& figures) {
  return {figures.begin(), figures.end()};
}

TEST(AllReduce, RingFactorIsNcclTestsBusFactor) {
  EXPECT_EQ(RingFactor(1), 0);
  EXPECT_DOUBLE_EQ(RingFactor(2), 1.0);
  EXPECT_DOUBLE_EQ(RingFactor(4), 1.5);
  EXPECT_DOUBLE_EQ(RingFactor(8), 1.75);
}

TEST(AllReduce, IsAlphaPlusBusBytesOverBandwidth) {
  const Engine e{1e-5, 0.5, 0, 1};
  // 8 ranks on one host: 1.75 x 1 GB at 100 GB/s x 0.5.
  EXPECT_DOUBLE_EQ(AllReduceSeconds(1e9, 8, 1, 100, 50, e), 1e-5 + 1.75 / 50);
  EXPECT_EQ(AllReduceSeconds(1e9, 1, 1, 100, 50, e), 0);
}

TEST(AllReduce, MoreRanksHostsAndBytesCostMore) {
  const Engine e{2e-5, 0.8, 5e-5, 0.9};
  const double base = AllReduceSeconds(64e6, 4, 1, 50, 50, e);
  EXPECT_GT(AllReduceSeconds(128e6, 4, 1, 50, 50, e), base);
  EXPECT_GT(AllReduceSeconds(64e6, 8, 1, 50, 50, e), base);
  EXPECT_GT(AllReduceSeconds(64e6, 8, 2, 50, 50, e), AllReduceSeconds(64e6, 4, 1, 50, 50, e));
  EXPECT_GT(AllReduceSeconds(64e6, 16, 4, 50, 50, e), AllReduceSeconds(64e6, 8, 2, 50, 50, e));
  EXPECT_GT(AllReduceSeconds(64e6, 4, 1, 25, 50, e), base);  // a slower link
}

TEST(Engines, ProviderTakesTheMeasuredRatiosAndNeverBeatsTheLink) {
  Model m;
  m.provider_added_latency_s.value = 3e-5;
  m.provider_busbw_ratio.value = 1.1;
  const Engine s = StandardEngine(m), p = ProviderEngine(m);
  EXPECT_DOUBLE_EQ(p.alpha_s, s.alpha_s + 3e-5);
  EXPECT_DOUBLE_EQ(p.efficiency, s.efficiency * 1.1);
  m.provider_busbw_ratio.value = 5;
  EXPECT_EQ(ProviderEngine(m).efficiency, 1);
}

TEST(JobClasses, ByGpuCount) {
  EXPECT_EQ(ClassFor(1).gpus, 1u);
  EXPECT_EQ(ClassFor(3).gpus, 2u);
  EXPECT_EQ(ClassFor(8).gpus, 8u);
  for (const JobClass& c : JobClasses()) EXPECT_GT(c.params, 0) << c.model;
}

TEST(Iteration, OneGpuOnlyComputes) {
  Model m;
  const Iteration it = IterationTime(m, 1, 1, 0, 0, 1, StandardEngine(m));
  EXPECT_GT(it.compute_s, 0);
  EXPECT_EQ(it.comm_share(), 0);
}

TEST(Iteration, SlowerLinksCostMoreAndOnlyInCommunication) {
  Model m;
  const Engine e = StandardEngine(m);
  // Pairs on NVLink (450 GB/s) against pairs through the host bridge.
  const Iteration fast = IterationTime(m, 8, 2, 1.0 / 450, 22, 1, e);
  const Iteration slow = IterationTime(m, 8, 2, 1.0 / 22, 22, 1, e);
  EXPECT_EQ(fast.compute_s, slow.compute_s);
  EXPECT_GT(slow.tensor_s, fast.tensor_s);
  EXPECT_EQ(slow.gradient_s, fast.gradient_s);
  EXPECT_GT(fast.gradient_s, 0);  // four replicas of a pair
  // Two GPUs are one tensor-parallel pair: no gradient all-reduce.
  EXPECT_EQ(IterationTime(m, 2, 2, 1.0 / 450, 450, 1, e).gradient_s, 0);
}

TEST(Iteration, NeighboursShareOnlyPcieLinks) {
  EXPECT_EQ(SharedGBs(450, 2), 450);
  EXPECT_DOUBLE_EQ(SharedGBs(30, 0.5), 20);
  EXPECT_EQ(SharedGBs(30, 0), 30);
}

TEST(Fit, RecoversAlphaAndBandwidthOfALine) {
  std::vector<std::pair<double, double>> points;
  for (double x : {1e4, 1e6, 1e8}) points.push_back({x, 3e-5 + x / 4e9});
  AlphaBeta ab;
  ASSERT_TRUE(FitAlphaBeta(points, &ab).ok());
  EXPECT_NEAR(ab.alpha_s, 3e-5, 1e-9);
  EXPECT_NEAR(ab.bus_gbs, 4, 1e-6);
  EXPECT_TRUE(FitAlphaBeta({{1e6, 1e-3}}, &ab).IsInvalidArgument());
  // Time falling with size: no positive bandwidth.
  EXPECT_TRUE(FitAlphaBeta({{1e4, 1e-2}, {1e6, 1e-3}}, &ab).IsInvalidArgument());
  // The two smallest sizes, noisy, put the latency below zero: it is what
  // the smallest call takes beyond its transfer at the fitted 4 GB/s.
  ASSERT_TRUE(
      FitAlphaBeta({{1e3, 2.0e-6}, {2e3, 4.5e-6}, {1e7, 2.6e-3}, {1e8, 25.1e-3}}, &ab).ok());
  EXPECT_NEAR(ab.bus_gbs, 4, 1e-6);
  EXPECT_NEAR(ab.alpha_s, 2.0e-6 - 1e3 / 4e9, 1e-12);
}

TEST(Fit, ServiceAllReduceAgainstOpenMpi) {
  FittedFigures figures;
  std::vector<std::string> skipped;
  FitServiceAllReduce(ReadTestdata("service_allreduce_bench.jsonl"), &figures, &skipped);
  EXPECT_TRUE(skipped.empty());
  auto f = ByKey(figures);
  // The sample: the service 60 us + x / 10 GB/s, Open MPI 40 us + x / 2 GB/s.
  EXPECT_NEAR(f["provider_added_latency_s"].value, 20e-6, 1e-12);
  EXPECT_NEAR(f["provider_busbw_ratio"].value, 5.0, 1e-6);
  EXPECT_NE(f["provider_busbw_ratio"].source.find("service_allreduce_bench"), std::string::npos);
}

TEST(Fit, ClusterAllReduceAgainstTheLink) {
  FittedFigures figures;
  std::vector<std::string> skipped;
  FitClusterAllReduce(ReadTestdata("cluster_allreduce_bench.jsonl"), &figures, &skipped);
  EXPECT_TRUE(skipped.empty());
  auto f = ByKey(figures);
  // The sample at 1000 Mb/s (0.125 GB/s): the device 2 ms + x / 0.1 GB/s,
  // Gloo 4 ms + x / 0.05 GB/s; its lossy line is left out.
  EXPECT_NEAR(f["provider_net_alpha_ratio"].value, 0.5, 1e-6);
  EXPECT_NEAR(f["provider_net_efficiency"].value, 0.8, 1e-6);
  EXPECT_NEAR(f["standard_net_efficiency"].value, 0.4, 1e-6);
}

TEST(Fit, NothingToFitIsSkippedNotInvented) {
  FittedFigures figures;
  std::vector<std::string> skipped;
  FitServiceAllReduce("{\"bench\":\"service_allreduce\",\"error\":\"job failed\"}\n", &figures,
                      &skipped);
  FitClusterAllReduce("", &figures, &skipped);
  EXPECT_TRUE(figures.empty());
  EXPECT_EQ(skipped.size(), 5u);
}

TEST(Fit, FiguresApplyAsCalibration) {
  FittedFigures figures;
  std::vector<std::string> skipped;
  FitServiceAllReduce(ReadTestdata("service_allreduce_bench.jsonl"), &figures, &skipped);
  FitClusterAllReduce(ReadTestdata("cluster_allreduce_bench.jsonl"), &figures, &skipped);
  std::string json = "{";
  for (const auto& [key, f] : figures) {
    json += (json.size() > 1 ? ",\"" : "\"") + key + "\": {\"value\": " + std::to_string(f.value) +
            ", \"source\": \"" + f.source + "\"}";
  }
  json += "}";
  Model m;
  std::vector<std::string> applied;
  ASSERT_TRUE(ApplyCalibration(json, &m, &applied).ok()) << json;
  EXPECT_EQ(applied.size(), 5u);
  EXPECT_NEAR(m.provider_busbw_ratio.value, 5.0, 1e-5);
  EXPECT_NEAR(m.standard_net_efficiency.value, 0.4, 1e-5);
  EXPECT_NE(m.standard_net_efficiency.source.find("cluster_allreduce_bench"), std::string::npos);
}

}  // namespace
}  // namespace hz::experiment
