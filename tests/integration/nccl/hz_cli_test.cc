// The hz command against a real harmonaized: human and JSON output, the
// self-test, a checkpoint round trip, and its exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "hz_test/run_command.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

using Result = CommandResult;

// Runs hz with the given arguments; stdout in out, stderr folded in when asked.
Result Hz(const std::string& args, bool with_stderr = false) {
  return RunCommand(std::string(HZ_CLI_PATH) + " " + args, with_stderr);
}

class HzCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(svc_.Start());
    auto vms = svc_.TenantWithVms("cli", 1);
    ASSERT_EQ(vms.size(), 1u);
    dev_ = "--device vhost-user:" + vms[0];
  }
  ServiceProcess svc_;
  std::string dev_;
};

TEST_F(HzCliTest, StatusInTextAndJson) {
  Result text = Hz(dev_ + " status");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("vhost-user"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("collectives"), std::string::npos) << text.out;

  Result js = Hz(dev_ + " --json status");
  ASSERT_EQ(js.code, 0);
  auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["transport"], "vhost-user");
  EXPECT_EQ(j["version"].get<std::string>().substr(0, 2), "1.");
  EXPECT_GT(j["request_queues"].get<int>(), 0);
  EXPECT_GT(j["session_id"].get<uint64_t>(), 0u);
}

TEST_F(HzCliTest, SelftestPasses) {
  Result text = Hz(dev_ + " selftest");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("selftest passed"), std::string::npos) << text.out;

  Result js = Hz(dev_ + " --json selftest");
  ASSERT_EQ(js.code, 0) << js.out;
  auto j = nlohmann::json::parse(js.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_GE(j["checks"].size(), 7u);
  for (const auto& c : j["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
}

TEST_F(HzCliTest, TopologyAnswersOrSaysNotSupported) {
  Result js = Hz(dev_ + " --json topology");
  auto j = nlohmann::json::parse(js.out);
  if (js.code == 4) {
    EXPECT_NE(j["error"].get<std::string>().find("not"), std::string::npos) << js.out;
  } else {
    ASSERT_EQ(js.code, 0) << js.out;
    EXPECT_TRUE(j["groups"].is_array());
    EXPECT_TRUE(j["devices"].is_array());
  }
}

TEST_F(HzCliTest, CheckpointSaveListRestoreRoundTrip) {
  std::string in = svc_.dir() + "/ckpt-in.bin", out = svc_.dir() + "/ckpt-out.bin";
  std::string data;
  for (int i = 0; i < 10000; ++i) data += static_cast<char>(i * 31 + 7);
  std::ofstream(in, std::ios::binary) << data;

  Result save = Hz(dev_ + " --json checkpoint save --stream 3 --step 12 " + in, true);
  if (save.code == 4) {
    // The device did not grant HZ_F_CHECKPOINT: the error must say so.
    EXPECT_NE(save.out.find("not supported"), std::string::npos) << save.out;
    GTEST_SKIP() << "checkpoints not offered by this harmonaized: " << save.out;
  }
  ASSERT_EQ(save.code, 0) << save.out;
  EXPECT_EQ(nlohmann::json::parse(save.out)["bytes"], data.size());

  Result list = Hz(dev_ + " --json checkpoint list --stream 3");
  ASSERT_EQ(list.code, 0) << list.out;
  auto l = nlohmann::json::parse(list.out)["checkpoints"];
  ASSERT_EQ(l.size(), 1u) << list.out;
  EXPECT_EQ(l[0]["step"], 12);

  Result restore = Hz(dev_ + " checkpoint restore --stream 3 " + out);
  ASSERT_EQ(restore.code, 0) << restore.out;
  std::ifstream f(out, std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, data);

  Result missing = Hz(dev_ + " checkpoint restore --stream 3 --step 99 " + out, true);
  EXPECT_EQ(missing.code, 1) << missing.out;
}

TEST_F(HzCliTest, EventsWithoutFollowEnds) {
  Result js = Hz(dev_ + " --json events --topics failure,checkpoint --wait-ms 100");
  EXPECT_TRUE(js.code == 0 || js.code == 4) << js.out;
  Result bad = Hz(dev_ + " events --topics nonsense", true);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("unknown topic"), std::string::npos) << bad.out;
}

TEST_F(HzCliTest, ExitCodesForUsageAndMissingDevice) {
  EXPECT_EQ(Hz("frobnicate").code, 2);
  EXPECT_EQ(Hz("").code, 2);
  Result help = Hz("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Exit codes"), std::string::npos);
  Result none = Hz("--device vhost-user:" + svc_.dir() + "/absent.sock --json status");
  EXPECT_EQ(none.code, 3);
  EXPECT_NE(nlohmann::json::parse(none.out)["error"].get<std::string>().find("absent.sock"),
            std::string::npos);
}

}  // namespace
}  // namespace hz::testing
