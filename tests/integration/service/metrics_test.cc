// GET /metrics of a running harmonaized after some traffic: the exposition
// is what Prometheus accepts (promtool check metrics), and carries the
// families operators build dashboards, alerts and bills on.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

// The body of an HTTP response.
std::string Body(const std::string& response) {
  size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

bool HasFamily(const std::string& text, const std::string& name, const std::string& type) {
  return text.find("# HELP " + name + " ") != std::string::npos &&
         text.find("# TYPE " + name + " " + type + "\n") != std::string::npos;
}

bool HasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

// Runs promtool check metrics over text; its exit code and what it said.
int Promtool(const std::string& dir, const std::string& text, std::string* out) {
  const std::string in = dir + "/scrape.txt";
  std::ofstream(in) << text;
  FILE* p =
      popen((std::string(HZ_PROMTOOL_PATH) + " check metrics < " + in + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) *out += buf;
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ServiceMetricsTest, ALiveScrapePassesPromtoolAndHasTheFamilies) {
  if (std::string(HZ_PROMTOOL_PATH).empty()) GTEST_SKIP() << "promtool not installed";
  ServiceProcess svc;
  int port = FreeTcpPort();
  ASSERT_TRUE(svc.Start({"--metrics-port", std::to_string(port)}));
  auto vms = svc.TenantWithVms("acme", 1);
  {
    HzClient c;
    ASSERT_TRUE(c.Connect(vms[0]));
    ASSERT_EQ(c.Hello(), HZ_S_OK);
    GuestBuffer b;
    ASSERT_EQ(c.Register(8192, 2, HZ_REGION_F_READ, &b), HZ_S_OK);
    hz_comm_uid uid{};
    ASSERT_EQ(c.NewUid(&uid), HZ_S_OK);
    EXPECT_EQ(c.Call(HZ_VQ_CONTROL, 0x7777, nullptr, 0).status, HZ_S_ENOTSUP);
  }
  const std::string text = Body(HttpGet(static_cast<uint16_t>(port), "/metrics"));
  ASSERT_FALSE(text.empty());

  std::string said;
  EXPECT_EQ(Promtool(svc.dir(), text, &said), 0) << said << "\n" << text;
  EXPECT_EQ(said.find("problem"), std::string::npos) << said;

  for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
           {"hz_build_info", "gauge"},
           {"hz_requests_total", "counter"},
           {"hz_request_bytes_total", "counter"},
           {"hz_request_duration_seconds", "histogram"},
           {"hz_tenant_requests_total", "counter"},
           {"hz_tenant_request_bytes_total", "counter"},
           {"hz_vdev_turn_seconds_total", "counter"},
           {"hz_vdev_turns_total", "counter"},
           {"hz_checkpoint_saves_total", "counter"},
           {"hz_checkpoint_persisted_bytes_total", "counter"},
           {"hz_checkpoint_persist_failures_total", "counter"},
           {"hz_provider_decisions_total", "counter"},
           {"hz_provider_offers_total", "counter"},
           {"hz_provider_devices_lost_total", "counter"},
           {"hz_provider_health_polls_total", "counter"},
           {"hz_provider_assigned_devices", "gauge"},
           {"hz_vms_connected", "gauge"},
           {"hz_accept_failures_total", "counter"}}) {
    EXPECT_TRUE(HasFamily(text, name, type)) << name << "\n" << text;
  }
  EXPECT_NE(text.find("hz_build_info{version=\""), std::string::npos) << text;
  EXPECT_TRUE(HasLine(text, "hz_requests_total{opcode=\"HELLO\",status=\"OK\"} 1")) << text;
  // Series of an error not seen yet are there at zero, for increase().
  EXPECT_TRUE(HasLine(text, "hz_requests_total{opcode=\"ALLREDUCE\",status=\"ETIMEDOUT\"} 0"));
  // HELLO, REGION_REGISTER, COMM_UID, and the unknown opcode that failed.
  EXPECT_TRUE(HasLine(text, "hz_tenant_requests_total{outcome=\"ok\",tenant=\"acme\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, "hz_tenant_requests_total{outcome=\"error\",tenant=\"acme\"} 1"));
  EXPECT_TRUE(HasLine(text, "hz_request_duration_seconds_count{family=\"session\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "hz_request_duration_seconds_count{family=\"region\"} 1"));
  EXPECT_TRUE(HasLine(text, "hz_request_duration_seconds_count{family=\"unknown\"} 1"));
  EXPECT_TRUE(
      HasLine(text, "hz_request_duration_seconds_bucket{family=\"session\",le=\"+Inf\"} 1"));
  EXPECT_TRUE(HasLine(text, "hz_checkpoint_saves_total{tenant=\"acme\"} 0")) << text;

  // A removed tenant's series go with it.
  std::string out;
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "vm unbind --socket " + vms[0], &out), 0) << out;
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant remove acme", &out), 0) << out;
  const std::string after = Body(HttpGet(static_cast<uint16_t>(port), "/metrics"));
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.find("tenant=\"acme\""), std::string::npos) << after;
  EXPECT_TRUE(HasLine(after, "hz_requests_total{opcode=\"HELLO\",status=\"OK\"} 1"));
}

}  // namespace
}  // namespace hz::testing
