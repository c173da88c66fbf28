// The host's conditions on an injected clock: the energy schedule and its
// file, congestion levels with hysteresis, who is told what, and energy slack.
#include "host_conditions.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <map>

#include "hz/common/file.h"

namespace hz::service {
namespace {

using json = nlohmann::json;
constexpr uint64_t kS = 1'000'000'000;

struct Told {
  std::string tenant;
  uint16_t topic;
  uint16_t kind;
  uint8_t level;
  uint8_t sources;
};
struct ShareCall {
  std::string tenant;
  uint32_t percent;
  uint64_t seconds;
};

class HostConditionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hz_conditions_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Make();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Make() {
    ConditionHooks hooks;
    hooks.unix_now = [this] { return now_; };
    hooks.publish = [this](const std::string& t, const events::EventSpec& spec) {
      told_.push_back({t, spec.topic, spec.kind, spec.payload[0], spec.payload[1]});
    };
    hooks.set_share = [this](const std::string& t, uint32_t pct, uint64_t s) {
      shares_.push_back({t, pct, s});
    };
    c_ = std::make_unique<HostConditions>(dir_, 10, hooks);
  }
  std::string path() const { return dir_ + "/energy.json"; }
  // One window: [start, end) at level, with sources.
  static json Window(uint64_t start, uint64_t end, json level, json sources = json::array()) {
    return json{{"start_s", start}, {"end_s", end}, {"level", level}, {"sources", sources}};
  }
  CommandResult Schedule(std::vector<json> windows) {
    json req = json::object();
    req["windows"] = json(windows);
    CommandResult r = c_->ScheduleCommand(req);
    if (!r.ok()) last_error_ = r.status().ToString();
    return r;
  }
  // A congestion sample: `pct` percent of a 10 s window spent waiting.
  ConditionInputs Inputs(uint64_t pct) {
    ConditionInputs in;
    in.host_tenants = {"a", "b"};
    in.host_memory.tenants = {"a"};
    in.host_memory.waiting = {pct * kS / 10, 10 * kS};
    return in;
  }

  std::string dir_;
  std::string last_error_;
  uint64_t now_ = 1'000'000;
  std::vector<Told> told_;
  std::vector<ShareCall> shares_;
  std::unique_ptr<HostConditions> c_;
};

TEST_F(HostConditionsTest, ScheduleLevelsAreToldToEveryTenantOnTheHostAtEachChange) {
  ASSERT_TRUE(Schedule({Window(now_ + 100, now_ + 200, "constrained", {"price"}),
                        Window(now_ + 150, now_ + 160, 2, {"power", "carbon"})})
                  .ok())
      << last_error_;
  c_->Update(Inputs(0));
  EXPECT_TRUE(told_.empty());  // normal, as everyone was told (nothing)
  now_ += 100;
  c_->Update(Inputs(0));
  ASSERT_EQ(told_.size(), 2u);
  for (const Told& t : told_) {
    EXPECT_EQ(t.topic, HZ_TOPIC_ENERGY);
    EXPECT_EQ(t.level, 1);
    EXPECT_EQ(t.sources, events::kEnergySourcePrice);
  }
  EXPECT_EQ(told_[0].tenant, "a");
  EXPECT_EQ(told_[1].tenant, "b");
  told_.clear();
  c_->Update(Inputs(0));
  EXPECT_TRUE(told_.empty());  // no change, no event
  now_ += 50;                  // the overlapping critical window wins
  c_->Update(Inputs(0));
  ASSERT_EQ(told_.size(), 2u);
  EXPECT_EQ(told_[0].level, 2);
  EXPECT_EQ(told_[0].sources, events::kEnergySourcePowerBudget | events::kEnergySourceCarbon);
  told_.clear();
  now_ += 100;  // after every window: normal again
  c_->Update(Inputs(0));
  ASSERT_EQ(told_.size(), 2u);
  EXPECT_EQ(told_[0].level, 0);
  EXPECT_EQ(told_[0].sources, 0);
}

TEST_F(HostConditionsTest, ATenantArrivingDuringAWindowIsToldTheLevel) {
  ASSERT_TRUE(Schedule({Window(now_, now_ + 100, 1)}).ok()) << last_error_;
  ConditionInputs in = Inputs(0);
  in.host_tenants = {"a"};
  c_->Update(in);
  ASSERT_EQ(told_.size(), 1u);
  in.host_tenants = {"a", "c"};
  c_->Update(in);
  ASSERT_EQ(told_.size(), 2u);
  EXPECT_EQ(told_[1].tenant, "c");
  EXPECT_EQ(told_[1].level, 1);
}

TEST_F(HostConditionsTest, TheScheduleSurvivesARestartAndACorruptFileIsRefused) {
  ASSERT_TRUE(Schedule({Window(now_, now_ + 100, 1)}).ok()) << last_error_;
  Make();
  ASSERT_TRUE(c_->Load().ok());
  json st = *c_->StatusCommand({});
  EXPECT_EQ(st["level"], "constrained");
  EXPECT_EQ(st["windows"].size(), 1u);
  std::ofstream(path()) << "{\"windows\": [";
  Make();
  Status s = c_->Load();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(path()), std::string::npos);
  StatusOr<std::string> kept = ReadFile(path());  // left exactly as it was
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "{\"windows\": [");
}

TEST_F(HostConditionsTest, BadWindowsAreRefusedAndTheScheduleKept) {
  ASSERT_TRUE(Schedule({Window(now_, now_ + 100, 1)}).ok()) << last_error_;
  json negative = Window(5, 6, 1);
  negative["start_s"] = -5;
  json extra = Window(5, 6, 1);
  extra["extra"] = 1;
  for (const json& bad : {Window(5, 5, 1), Window(5, 6, 3), Window(5, 6, "low"),
                          Window(5, 6, 1, {"wind"}), negative, extra}) {
    CommandResult r = Schedule({bad});
    EXPECT_FALSE(r.ok()) << bad.dump();
  }
  EXPECT_EQ((*c_->StatusCommand({}))["level"], "constrained");
  Make();
  ASSERT_TRUE(c_->Load().ok());
  EXPECT_EQ((*c_->StatusCommand({}))["level"], "constrained");
}

TEST_F(HostConditionsTest, CongestionLevelsFollowSection85WithHysteresis) {
  c_->Update(Inputs(40));  // none: u < 50 %
  EXPECT_TRUE(told_.empty());
  now_ += 10;
  c_->Update(Inputs(60));  // light, told only to the tenant with communicators
  ASSERT_EQ(told_.size(), 1u);
  EXPECT_EQ(told_[0].tenant, "a");
  EXPECT_EQ(told_[0].topic, HZ_TOPIC_CONGESTION);
  EXPECT_EQ(told_[0].level, events::kCongestionLight);
  now_ += 3;
  c_->Update(Inputs(99));  // severe, but light is kept for 10 s
  c_->Update(Inputs(10));
  EXPECT_EQ(told_.size(), 1u);
  now_ += 7;
  c_->Update(Inputs(96));
  ASSERT_EQ(told_.size(), 2u);
  EXPECT_EQ(told_[1].level, events::kCongestionSevere);
  now_ += 10;
  c_->Update(Inputs(85));
  ASSERT_EQ(told_.size(), 3u);
  EXPECT_EQ(told_[2].level, events::kCongestionModerate);
}

TEST_F(HostConditionsTest, EachResourceIsToldToTheTenantsThatUseItWithItsOwnLevel) {
  ConditionInputs in = Inputs(0);                     // host memory: none, for a
  in.storage = {{85 * kS / 10, 10 * kS}, {"b"}};      // moderate, for b (checkpoints here)
  in.fabric = {{99 * kS / 10, 10 * kS}, {"a", "c"}};  // severe, for a and c (across hosts)
  ConditionInputs quiet = in;
  quiet.storage.waiting = quiet.fabric.waiting = {0, 10 * kS};
  c_->Update(quiet);  // none anywhere: nobody is told
  EXPECT_TRUE(told_.empty());
  now_ += 10;
  c_->Update(in);
  ASSERT_EQ(told_.size(), 3u);
  std::map<std::pair<std::string, uint16_t>, uint8_t> got;
  for (const Told& t : told_) {
    EXPECT_EQ(t.topic, HZ_TOPIC_CONGESTION);
    got[{t.tenant, t.kind}] = t.level;
  }
  using Key = std::pair<std::string, uint16_t>;
  EXPECT_EQ(
      got, (std::map<Key, uint8_t>{{{"a", events::kCongestionFabric}, events::kCongestionSevere},
                                   {{"b", events::kCongestionStorage}, events::kCongestionModerate},
                                   {{"c", events::kCongestionFabric}, events::kCongestionSevere}}));
  // The operator sees every resource.
  CommandResult status = c_->StatusCommand(json::object());
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["congestion"]["storage"]["level"], events::kCongestionModerate);
  EXPECT_EQ((*status)["congestion"]["fabric"]["waiting_ms"], 9900);
  EXPECT_EQ((*status)["congestion"]["host_memory"]["level"], events::kCongestionNone);
}

TEST_F(HostConditionsTest, NoMeasurementIsNoCongestion) {
  ConditionInputs in = Inputs(0);
  in.host_memory.waiting = {};
  c_->Update(in);
  EXPECT_TRUE(told_.empty());
}

TEST_F(HostConditionsTest, SlackStatusesFollowTheSpec) {
  hz_energy_slack_result r{};
  auto declare = [&](uint32_t pct, uint64_t duration) {
    hz_energy_slack_args a{};
    a.slowdown_pct = pct;
    a.duration_s = duration;
    return c_->DeclareSlack(TenantId("a"), a, &r);
  };
  EXPECT_TRUE(declare(91, 60).IsInvalidArgument());
  EXPECT_TRUE(declare(50, 0).IsInvalidArgument());
  EXPECT_TRUE(declare(50, HZ_ENERGY_SLACK_MAX_S + 1).IsInvalidArgument());
  EXPECT_TRUE(declare(0, 60).IsInvalidArgument());
  ASSERT_TRUE(declare(30, 60).ok());
  EXPECT_EQ(r.expires_s, now_ + 60);
  ASSERT_TRUE(declare(0, 0).ok());
  EXPECT_EQ(r.expires_s, 0u);
}

TEST_F(HostConditionsTest, SlackIsHonouredOnlyWhileConstrainedAndOnlyForItsTime) {
  ASSERT_TRUE(Schedule({Window(now_ + 100, now_ + 1000, 1)}).ok());
  hz_energy_slack_args a{};
  a.slowdown_pct = 40;
  a.duration_s = 300;
  hz_energy_slack_result r{};
  ASSERT_TRUE(c_->DeclareSlack(TenantId("a"), a, &r).ok());
  c_->Update(Inputs(0));
  EXPECT_TRUE(shares_.empty());  // normal: nobody is slowed
  now_ += 100;
  c_->Update(Inputs(0));
  ASSERT_EQ(shares_.size(), 1u);  // constrained: 60 % for the 200 s declared still
  EXPECT_EQ(shares_[0].tenant, "a");
  EXPECT_EQ(shares_[0].percent, 60u);
  EXPECT_EQ(shares_[0].seconds, 200u);
  now_ += 200;  // the declaration is over, the cap is not
  c_->Update(Inputs(0));
  ASSERT_EQ(shares_.size(), 2u);
  EXPECT_EQ(shares_[1].percent, 100u);
  now_ += 10;
  c_->Update(Inputs(0));
  EXPECT_EQ(shares_.size(), 2u);
  EXPECT_TRUE((*c_->StatusCommand({}))["slack"].empty());
}

TEST_F(HostConditionsTest, SlackDeclaredDuringACapAppliesAtOnceAndAWithdrawalEndsIt) {
  ASSERT_TRUE(Schedule({Window(now_, now_ + 1000, 2)}).ok());
  hz_energy_slack_args a{};
  a.slowdown_pct = 25;
  a.duration_s = 60;
  hz_energy_slack_result r{};
  ASSERT_TRUE(c_->DeclareSlack(TenantId("a"), a, &r).ok());
  ASSERT_EQ(shares_.size(), 1u);
  EXPECT_EQ(shares_[0].percent, 75u);
  EXPECT_EQ(shares_[0].seconds, 60u);
  a = {};
  ASSERT_TRUE(c_->DeclareSlack(TenantId("a"), a, &r).ok());
  ASSERT_EQ(shares_.size(), 2u);
  EXPECT_EQ(shares_[1].percent, 100u);
}

// A restart keeps what tenants declared and what each was told: the cap
// that ended and the congestion that cleared while the service was down are
// told, the level that held is not told twice, and the slack applies again.
TEST_F(HostConditionsTest, SlackAndWhatEachTenantWasToldSurviveARestart) {
  ASSERT_TRUE(Schedule({Window(now_, now_ + 100, 1)}).ok()) << last_error_;
  hz_energy_slack_args a{};
  a.slowdown_pct = 30;
  a.duration_s = 500;
  hz_energy_slack_result r{};
  ASSERT_TRUE(c_->DeclareSlack(TenantId("a"), a, &r).ok());
  c_->Update(Inputs(99));  // a: severe congestion; a and b: constrained
  ASSERT_EQ(told_.size(), 3u);
  told_.clear();
  shares_.clear();

  Make();
  ASSERT_TRUE(c_->Load().ok());
  c_->Update(Inputs(99));
  EXPECT_TRUE(told_.empty()) << "told again: " << told_[0].tenant << " " << told_[0].topic;
  ASSERT_EQ(shares_.size(), 1u);  // a fresh engine gets the share again
  EXPECT_EQ(shares_[0].tenant, "a");
  EXPECT_EQ(shares_[0].percent, 70u);
  EXPECT_EQ((*c_->StatusCommand({}))["slack"].size(), 1u);

  Make();
  now_ += 100;  // down while the window ended and the congestion cleared
  ASSERT_TRUE(c_->Load().ok());
  c_->Update(Inputs(0));
  std::map<std::pair<std::string, uint16_t>, uint8_t> got;
  for (const Told& t : told_) got[{t.tenant, t.topic}] = t.level;
  using Key = std::pair<std::string, uint16_t>;
  EXPECT_EQ(got, (std::map<Key, uint8_t>{{{"a", HZ_TOPIC_CONGESTION}, events::kCongestionNone},
                                         {{"a", HZ_TOPIC_ENERGY}, events::kEnergyNormal},
                                         {{"b", HZ_TOPIC_ENERGY}, events::kEnergyNormal}}));
}

TEST_F(HostConditionsTest, ACorruptStateFileIsRefusedAndASlackThatCannotBeKeptIsNotAnswered) {
  for (const char* bad : {"[1]",
                          "{\"slack\": {\"a\": {\"slowdown_pct\": 200, \"expires_s\": 1}},"
                          " \"told_energy\": {}, \"told_congestion\": {}}",
                          "{\"slack\": {\"../x\": {\"slowdown_pct\": 1, \"expires_s\": 1}}}"}) {
    std::ofstream(dir_ + "/conditions.json", std::ios::trunc) << bad;
    Make();
    Status s = c_->Load();
    EXPECT_TRUE(s.IsCorruption()) << bad << ": " << s.ToString();
    EXPECT_NE(s.message().find("conditions.json"), std::string::npos) << s.ToString();
  }
  std::filesystem::remove(dir_ + "/conditions.json");
  Make();
  ASSERT_TRUE(c_->Load().ok());
  std::filesystem::create_directory(dir_ + "/conditions.json");  // no file can replace it
  hz_energy_slack_args a{};
  a.slowdown_pct = 30;
  a.duration_s = 60;
  hz_energy_slack_result r{};
  EXPECT_FALSE(c_->DeclareSlack(TenantId("a"), a, &r).ok());
  EXPECT_TRUE((*c_->StatusCommand({}))["slack"].empty());
  EXPECT_TRUE(shares_.empty());
}

}  // namespace
}  // namespace hz::service
