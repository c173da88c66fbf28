// The inter-host leg's algorithms and its measured cost model: Gloo's
// halving-doubling beside ring and bcube on three members (not a power of
// two) over loopback, and a calibration that every member agrees on.
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hz/cluster/inter_host.h"
#include "hz/common/half.h"
#include "redis_server.h"

namespace hz::cluster {
namespace {

constexpr uint32_t kMembers = 3;

class LegModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.Start()) << redis_.error();
    std::vector<std::future<StatusOr<std::unique_ptr<InterHostGroup>>>> forming;
    for (uint32_t r = 0; r < kMembers; ++r) {
      forming.push_back(std::async(std::launch::async, [this, r] {
        GlooGroupOptions o;
        o.store = *RedisAddress::Parse(redis_.address());
        o.key = "leg-test/";
        o.data_address = "127.0.0.1";
        o.rank = r;
        o.size = kMembers;
        o.timeout = std::chrono::milliseconds(10000);
        return ConnectGlooGroup(o);
      }));
    }
    for (auto& f : forming) {
      StatusOr<std::unique_ptr<InterHostGroup>> g = f.get();
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      groups_.push_back(std::move(*g));
    }
  }

  // Runs fn(member) on every member at once.
  template <typename F>
  void OnEach(F fn) {
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < kMembers; ++r) threads.emplace_back([&, r] { fn(r); });
    for (auto& t : threads) t.join();
  }

  test::RedisServer redis_;
  std::vector<std::unique_ptr<InterHostGroup>> groups_;
};

TEST_F(LegModelTest, EveryAlgorithmReducesExactlyOnThreeMembers) {
  for (InterHostAlgorithm a : kInterHostAlgorithms) {
    std::vector<std::vector<int32_t>> ints(kMembers);
    std::vector<std::vector<uint16_t>> halves(kMembers);
    std::vector<Status> st(kMembers * 2);
    OnEach([&](uint32_t r) {
      ints[r].assign(1000, static_cast<int32_t>(r + 1));
      halves[r].assign(1000, FloatToBf16(static_cast<float>(r + 1)));
      st[2 * r] =
          groups_[r]->AllReduce(ints[r].data(), 1000, InterHostType::kI32, InterHostOp::kSum, a);
      st[2 * r + 1] =
          groups_[r]->AllReduce(halves[r].data(), 1000, InterHostType::kBF16, InterHostOp::kMax, a);
    });
    for (uint32_t r = 0; r < kMembers; ++r) {
      ASSERT_TRUE(st[2 * r].ok()) << InterHostAlgorithmName(a) << st[2 * r].ToString();
      ASSERT_TRUE(st[2 * r + 1].ok()) << InterHostAlgorithmName(a) << st[2 * r + 1].ToString();
      for (int32_t v : ints[r]) ASSERT_EQ(v, 6) << InterHostAlgorithmName(a);
      for (uint16_t v : halves[r]) ASSERT_EQ(Bf16ToFloat(v), 3.0f) << InterHostAlgorithmName(a);
    }
  }
}

TEST_F(LegModelTest, CalibrationGivesEveryMemberTheSameModel) {
  std::vector<StatusOr<LegCostModel>> models(kMembers, Status::Aborted("not run"));
  OnEach([&](uint32_t r) { models[r] = CalibrateLeg(*groups_[r], 1 << 20); });
  for (uint32_t r = 0; r < kMembers; ++r)
    ASSERT_TRUE(models[r].ok()) << models[r].status().ToString();
  for (InterHostAlgorithm a : kInterHostAlgorithms) {
    for (uint32_t r = 1; r < kMembers; ++r) {
      EXPECT_EQ(models[r]->Seconds(a, 12345), models[0]->Seconds(a, 12345));
    }
    EXPECT_GT(models[0]->Seconds(a, 1 << 20), 0.0);
  }
  for (size_t bytes : {size_t{1}, size_t{1} << 16, size_t{64} << 20}) {
    EXPECT_EQ(models[0]->Best(bytes), models[1]->Best(bytes));
  }
}

TEST(LegCostModel, TheLowestLineWinsAndTiesGoToTheEarlierAlgorithm) {
  LegCostModel m;
  m.lines[0] = {100e-6, 1e-8};  // ring: slow to start, fast per byte
  m.lines[1] = {20e-6, 2e-8};   // bcube
  m.lines[2] = {20e-6, 2e-8};   // halving-doubling: the same as bcube
  EXPECT_EQ(m.Best(1024), InterHostAlgorithm::kBcube);
  EXPECT_EQ(m.Best(64 << 20), InterHostAlgorithm::kRing);
  // The lines cross at 8000 bytes.
  EXPECT_EQ(m.Best(7000), InterHostAlgorithm::kBcube);
  EXPECT_EQ(m.Best(9000), InterHostAlgorithm::kRing);
  EXPECT_DOUBLE_EQ(m.BytesPerSecond(InterHostAlgorithm::kRing), 1e8);
}

}  // namespace
}  // namespace hz::cluster
