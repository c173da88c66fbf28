#include "hz/experiment/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace hz::experiment {
namespace {

namespace fs = std::filesystem;

class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hz-trace-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

constexpr const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";
constexpr const char* kNodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,V100\nn1,1,1,2,T4\n";

TEST_F(TraceFiles, ReadsWholeGpuTasksInArrivalOrderAndSkipsTheRest) {
  Write("openb_pod_list_default.csv",
        std::string(kPodHeader) +
            "p0,1,1,2,1000,,LS,Running,500,800,500\n"
            "p1,1,1,1,460,,BE,Running,100,200,100\n"  // a shared fraction counts as one GPU
            "p2,1,1,0,0,,LS,Running,0,50,0\n"         // no GPU
            "p3,1,1,16,1000,,LS,Running,0,50,0\n"     // more than a host
            "p4,1,1,1,1000,,LS,Running,60,,60\n"      // never ended
            "p5,1,1,x,1000,,LS,Running,60,90,60\n"    // malformed
            "p6,1,1,8,1000,,LS\n");                   // short row
  Write("openb_node_list_gpu_node.csv", kNodes);
  Trace t;
  ASSERT_TRUE(LoadAlibabaTrace(dir_.string(), &t).ok());
  EXPECT_EQ(t.source, "alibaba-gpu-v2023");
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].arrival_s, 100u);
  EXPECT_EQ(t.jobs[0].duration_s, 100u);
  EXPECT_EQ(t.jobs[0].gpus, 1u);
  EXPECT_TRUE(t.jobs[0].preemptible);
  EXPECT_EQ(t.jobs[1].gpus, 2u);
  EXPECT_FALSE(t.jobs[1].preemptible);
  EXPECT_EQ(t.node_gpus, (std::vector<uint32_t>{8, 2}));
}

TEST_F(TraceFiles, MissingOrUselessFilesAreErrorsThatNameTheFile) {
  Trace t;
  Status st = LoadAlibabaTrace(dir_.string(), &t);
  EXPECT_TRUE(st.IsNotFound());
  EXPECT_NE(st.ToString().find("openb_pod_list_default.csv"), std::string::npos);
  Write("openb_pod_list_default.csv", kPodHeader);
  Write("openb_node_list_gpu_node.csv", kNodes);
  EXPECT_TRUE(LoadAlibabaTrace(dir_.string(), &t).IsCorruption());
}

TEST(SyntheticTrace, IsTheSameForTheSameSeed) {
  const Trace a = SyntheticTrace(500, 7), b = SyntheticTrace(500, 7), c = SyntheticTrace(500, 8);
  ASSERT_EQ(a.jobs.size(), 500u);
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].arrival_s, b.jobs[i].arrival_s);
    EXPECT_EQ(a.jobs[i].gpus, b.jobs[i].gpus);
  }
  EXPECT_NE(a.jobs[100].arrival_s, c.jobs[100].arrival_s);
}

TEST(SteadyWorkload, OffersTheLoadAskedFor) {
  const Trace mix = SyntheticTrace(2000, 1);
  const size_t gpus = 400;
  const double window = 5 * 86400.0;
  for (double load : {0.3, 0.9}) {
    const Trace w = SteadyWorkload(mix, load, gpus, window, 3);
    double gpu_seconds = 0;
    for (const TraceJob& j : w.jobs) {
      gpu_seconds += static_cast<double>(j.gpus) * static_cast<double>(j.duration_s);
      EXPECT_LT(static_cast<double>(j.arrival_s), window);
    }
    const double offered = gpu_seconds / (static_cast<double>(gpus) * window);
    EXPECT_NEAR(offered, load, 0.15 * load) << "load " << load;
  }
  EXPECT_TRUE(SteadyWorkload(mix, 0, gpus, window, 3).jobs.empty());
}

}  // namespace
}  // namespace hz::experiment
