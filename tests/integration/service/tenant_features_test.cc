// The operator's per-tenant feature allowance (SPEC §4.2): HELLO grants only
// what the tenant is allowed, opcodes of the others complete ENOTSUP, a
// session keeps what its HELLO granted until its next HELLO, and the
// allowance is kept across restarts.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

constexpr uint64_t kEveryFeature = (1ull << (HZ_F_INLINE_DATA + 1)) - 1;
constexpr uint64_t kCollectives = 1ull << HZ_F_COLLECTIVES;
constexpr uint64_t kCheckpoint = 1ull << HZ_F_CHECKPOINT;
constexpr uint64_t kEvents = 1ull << HZ_F_EVENTS;

// HELLO asking for `features`; the granted bits, or ~0 when it failed.
uint64_t HelloGrants(HzClient& c, uint64_t features) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR;
  a.version_minor = HZ_VERSION_MINOR;
  a.driver_features = features;
  Reply r = c.Call(HZ_VQ_CONTROL, HZ_OP_HELLO, a);
  if (r.status != HZ_S_OK || r.result.size() < sizeof(hz_hello_result)) return ~0ull;
  hz_hello_result res;
  std::memcpy(&res, r.result.data(), sizeof(res));
  return res.device_features;
}

bool ConnectTo(HzClient& c, const std::string& socket) {
  for (int i = 0; i < 500; ++i) {  // a previous front-end may still be letting go
    if (c.Connect(socket)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

uint32_t CkptPolicy(HzClient& c) {
  hz_ckpt_policy_args p{};
  p.stream = 1;
  p.retention = 1;
  p.tier = HZ_TIER_HOST_MEMORY;
  p.stall_budget_ms = 1000;
  return c.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_POLICY, p).status;
}

nlohmann::json FeaturesOf(ServiceProcess& svc, const std::string& name) {
  nlohmann::json r = svc.Control({{"cmd", "tenant.list"}});
  for (const nlohmann::json& t : r.value("result", nlohmann::json::array())) {
    if (t.value("name", "") == name) return t.value("features", nlohmann::json());
  }
  return {};
}

TEST(ServiceTenantFeaturesTest, HelloGrantsOnlyWhatTheTenantIsAllowedAndItIsKept) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> socks = svc.TenantWithVms("t", 1);
  ASSERT_EQ(socks.size(), 1u);
  // By default a tenant may be granted everything the device offers.
  EXPECT_EQ(FeaturesOf(svc, "t").size(), 8u) << FeaturesOf(svc, "t").dump();  // SPEC §4.1
  uint64_t offered = 0;
  {
    HzClient c;
    ASSERT_TRUE(ConnectTo(c, socks[0]));
    offered = HelloGrants(c, kEveryFeature);
    ASSERT_NE(offered, ~0ull);
    ASSERT_EQ(offered & (kCollectives | kCheckpoint | kEvents),
              kCollectives | kCheckpoint | kEvents)
        << "the service without configuration offers these";

    // Narrowed while the session is open: it keeps what its HELLO granted...
    std::string out;
    ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant features t --features collectives,events", &out), 0)
        << out;
    EXPECT_EQ(CkptPolicy(c), HZ_S_OK);
    // ...until its next HELLO.
    EXPECT_EQ(HelloGrants(c, kEveryFeature), kCollectives | kEvents);
    EXPECT_EQ(CkptPolicy(c), HZ_S_ENOTSUP);
    hz_event_subscribe_args sub{};
    sub.topics = HZ_TOPIC_ALL;
    sub.from_seq = HZ_SEQ_CURSOR;
    EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_EVENT_SUBSCRIBE, sub).status, HZ_S_OK);
    // Never more than the driver asks for.
    EXPECT_EQ(HelloGrants(c, kCheckpoint | kEvents), kEvents);
  }
  EXPECT_EQ(FeaturesOf(svc, "t"), nlohmann::json({"collectives", "events"}));

  // The allowance survives a restart of the service.
  ASSERT_EQ(svc.Terminate(), 0);
  ASSERT_TRUE(svc.Start());
  EXPECT_EQ(FeaturesOf(svc, "t"), nlohmann::json({"collectives", "events"}));
  {
    HzClient c;
    ASSERT_TRUE(ConnectTo(c, socks[0]));
    EXPECT_EQ(HelloGrants(c, kEveryFeature), kCollectives | kEvents);
    EXPECT_EQ(CkptPolicy(c), HZ_S_ENOTSUP);
  }
  // Given back, from the next HELLO.
  std::string out;
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant features t --features all", &out), 0) << out;
  HzClient c;
  ASSERT_TRUE(ConnectTo(c, socks[0]));
  EXPECT_EQ(HelloGrants(c, kEveryFeature), offered);
  EXPECT_EQ(CkptPolicy(c), HZ_S_OK);
}

TEST(ServiceTenantFeaturesTest, CreateTakesAnAllowanceAndRefusesUnknownNames) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::string out;
  EXPECT_NE(svc.Hzctl(HZ_HZCTL_PATH, "tenant create bad --features collectives,teleport", &out), 0);
  EXPECT_NE(out.find("teleport"), std::string::npos) << out;
  EXPECT_TRUE(FeaturesOf(svc, "bad").is_null()) << "not created";
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant create few --features checkpoint", &out), 0) << out;
  EXPECT_EQ(FeaturesOf(svc, "few"), nlohmann::json({"checkpoint"}));
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant create nothing --features none", &out), 0) << out;
  EXPECT_EQ(FeaturesOf(svc, "nothing"), nlohmann::json::array());
  EXPECT_NE(svc.Hzctl(HZ_HZCTL_PATH, "tenant features ghost --features all", &out), 0);
  EXPECT_NE(svc.Hzctl(HZ_HZCTL_PATH, "tenant features few --features warp", &out), 0);
  EXPECT_EQ(FeaturesOf(svc, "few"), nlohmann::json({"checkpoint"})) << "unchanged";
  // The human table shows it too.
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant list", &out), 0) << out;
  EXPECT_NE(out.find("FEATURES"), std::string::npos) << out;
  // A tenant without features still says HELLO; every feature opcode is ENOTSUP.
  auto bound = svc.Control(
      {{"cmd", "vm.bind"}, {"tenant", "nothing"}, {"socket", svc.dir() + "/nothing.sock"}});
  ASSERT_TRUE(bound.value("ok", false)) << bound.dump();
  HzClient c;
  ASSERT_TRUE(ConnectTo(c, svc.dir() + "/nothing.sock"));
  EXPECT_EQ(HelloGrants(c, kEveryFeature), 0u);
  EXPECT_EQ(CkptPolicy(c), HZ_S_ENOTSUP);
  hz_comm_uid uid{};
  EXPECT_EQ(c.NewUid(&uid), HZ_S_ENOTSUP);
}

}  // namespace
}  // namespace hz::testing
