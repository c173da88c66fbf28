#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "hz/service/device_state.h"
#include "hz/service/metrics.h"
#include "hz/service/request.h"

namespace hz::service {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(ServiceMetricsTest, CountsByOpcodeAndStatus) {
  Metrics m;
  m.CountRequest(HZ_OP_ALLREDUCE, HZ_S_OK);
  m.CountRequest(HZ_OP_ALLREDUCE, HZ_S_OK);
  m.CountRequest(HZ_OP_HELLO, HZ_S_EVERSION);
  m.CountRequest(0x7777, HZ_S_ENOTSUP);
  m.CountRequest(HZ_OP_HELLO, 999);  // out-of-range status lands in the last slot
  m.AddBytes(HZ_OP_ALLREDUCE, 4096);
  EXPECT_EQ(m.requests(HZ_OP_ALLREDUCE, HZ_S_OK), 2u);
  MetricsSnapshot snap;
  snap.vms_connected = 3;
  snap.regions = 7;
  std::string text = m.Format(snap);
  EXPECT_TRUE(Has(text, "hz_requests_total{opcode=\"ALLREDUCE\",status=\"OK\"} 2"));
  EXPECT_TRUE(Has(text, "hz_requests_total{opcode=\"HELLO\",status=\"EVERSION\"} 1"));
  EXPECT_TRUE(Has(text, "hz_requests_total{opcode=\"UNKNOWN\",status=\"ENOTSUP\"} 1"));
  EXPECT_TRUE(Has(text, "hz_requests_total{opcode=\"HELLO\",status=\"UNKNOWN\"} 1"));
  EXPECT_TRUE(Has(text, "hz_request_bytes_total{opcode=\"ALLREDUCE\"} 4096"));
  EXPECT_TRUE(Has(text, "hz_vms_connected 3"));
  EXPECT_TRUE(Has(text, "hz_regions 7"));
  EXPECT_TRUE(Has(text, "# TYPE hz_requests_total counter"));
  EXPECT_TRUE(Has(text, "# TYPE hz_vms_connected gauge"));
  // Errors not seen yet are exported at zero, so increase() sees the first.
  EXPECT_TRUE(Has(text, "hz_requests_total{opcode=\"ALLREDUCE\",status=\"EABORTED\"} 0"));
  EXPECT_TRUE(Has(text, "hz_request_bytes_total{opcode=\"BROADCAST\"} 0"));
  // Without an engine there are no engine series.
  EXPECT_EQ(text.find("hz_collective_algorithm_total"), std::string::npos);
}

TEST(ServiceMetricsTest, EngineStatsAppear) {
  Metrics m;
  BackendStats e;
  e.algorithms = {{"inline", 5}, {"blocked_parallel", 2}};
  e.ops = {{"allreduce", 7}};
  e.communicators = 4;
  e.streamed = 3;
  e.worker_polls = 9;
  e.worker_polled_tasks = 6;
  MetricsSnapshot snap;
  snap.engine = &e;
  std::string text = m.Format(snap);
  EXPECT_TRUE(Has(text, "hz_collective_algorithm_total{algorithm=\"inline\"} 5"));
  EXPECT_TRUE(Has(text, "hz_collective_algorithm_total{algorithm=\"blocked_parallel\"} 2"));
  EXPECT_TRUE(Has(text, "hz_collective_ops_total{op=\"allreduce\"} 7"));
  EXPECT_TRUE(Has(text, "hz_communicators 4"));
  EXPECT_TRUE(Has(text, "hz_collective_streamed_total 3"));
  EXPECT_TRUE(Has(text, "hz_collective_worker_polls_total 9"));
  EXPECT_TRUE(Has(text, "hz_collective_worker_polled_tasks_total 6"));
}

TEST(ServiceMetricsTest, LatencyByOpcodeFamily) {
  Metrics m;
  m.ObserveLatency(HZ_OP_ALLREDUCE, std::chrono::microseconds(30));
  m.ObserveLatency(HZ_OP_BARRIER, std::chrono::milliseconds(2));
  m.ObserveLatency(HZ_OP_CKPT_SAVE, std::chrono::seconds(60));
  m.ObserveLatency(0x7777, std::chrono::microseconds(1));
  std::string text = m.Format({});
  EXPECT_TRUE(Has(text, "# TYPE hz_request_duration_seconds histogram"));
  EXPECT_TRUE(Has(text, "hz_request_duration_seconds_count{family=\"collective\"} 2"));
  EXPECT_TRUE(
      Has(text, "hz_request_duration_seconds_bucket{family=\"collective\",le=\"5e-05\"} 1"));
  EXPECT_TRUE(
      Has(text, "hz_request_duration_seconds_bucket{family=\"collective\",le=\"0.001\"} 1"));
  EXPECT_TRUE(
      Has(text, "hz_request_duration_seconds_bucket{family=\"collective\",le=\"0.0025\"} 2"));
  EXPECT_TRUE(Has(text, "hz_request_duration_seconds_bucket{family=\"checkpoint\",le=\"30\"} 0"));
  EXPECT_TRUE(Has(text, "hz_request_duration_seconds_bucket{family=\"checkpoint\",le=\"+Inf\"} 1"));
  EXPECT_TRUE(Has(text, "hz_request_duration_seconds_sum{family=\"checkpoint\"} 60"));
  EXPECT_TRUE(Has(text, "hz_request_duration_seconds_count{family=\"unknown\"} 1"));
  // Families without requests yet are there at zero.
  EXPECT_TRUE(Has(text, "hz_request_duration_seconds_count{family=\"event\"} 0"));
  EXPECT_STREQ(OpcodeFamilyName(HZ_OP_EVENT_ACK), "event");
  EXPECT_STREQ(OpcodeFamilyName(HZ_OP_HELLO), "session");
}

TEST(ServiceMetricsTest, TenantSeriesFollowTheTenants) {
  Metrics m;
  RequestCounters dev(&m, "acme");
  const auto now = std::chrono::steady_clock::now();
  dev.Count(HZ_OP_ALLREDUCE, HZ_S_OK, now);
  dev.Count(HZ_OP_ALLREDUCE, HZ_S_OK, now);
  dev.Count(HZ_OP_HELLO, HZ_S_EVERSION, now);
  dev.AddBytes(HZ_OP_ALLREDUCE, 4096);
  MetricsSnapshot snap;
  snap.tenant_names = {"acme", "idle"};
  std::string text = m.Format(snap);
  EXPECT_TRUE(Has(text, "hz_tenant_requests_total{outcome=\"ok\",tenant=\"acme\"} 2")) << text;
  EXPECT_TRUE(Has(text, "hz_tenant_requests_total{outcome=\"error\",tenant=\"acme\"} 1"));
  EXPECT_TRUE(Has(text, "hz_tenant_request_bytes_total{tenant=\"acme\"} 4096"));
  // A tenant without requests yet has its series at zero.
  EXPECT_TRUE(Has(text, "hz_tenant_requests_total{outcome=\"error\",tenant=\"idle\"} 0"));
  EXPECT_TRUE(Has(text, "hz_request_bytes_total{opcode=\"ALLREDUCE\"} 4096"));

  // acme is removed: its series go, and a new acme starts from zero.
  snap.tenant_names = {"idle"};
  text = m.Format(snap);
  EXPECT_EQ(text.find("tenant=\"acme\""), std::string::npos) << text;
  snap.tenant_names = {"acme", "idle"};
  text = m.Format(snap);
  EXPECT_TRUE(Has(text, "hz_tenant_requests_total{outcome=\"ok\",tenant=\"acme\"} 0")) << text;
  // The service-wide counters keep what they counted.
  EXPECT_TRUE(Has(text, "hz_requests_total{opcode=\"ALLREDUCE\",status=\"OK\"} 2"));
}

TEST(ServiceMetricsTest, TurnChargesAppearForEachTenant) {
  Metrics m;
  MetricsSnapshot snap;
  snap.tenant_names = {"acme", "idle"};
  snap.tenant_turns["acme"] = {1500000000, 42};
  snap.tenant_turns["gone"] = {7, 1};  // charged before it was removed
  std::string text = m.Format(snap);
  EXPECT_TRUE(Has(text, "hz_vdev_turn_seconds_total{tenant=\"acme\"} 1.5")) << text;
  EXPECT_TRUE(Has(text, "hz_vdev_turns_total{tenant=\"acme\"} 42"));
  // A tenant that ran no turn yet is there at zero; a removed one is not.
  EXPECT_TRUE(Has(text, "hz_vdev_turn_seconds_total{tenant=\"idle\"} 0"));
  EXPECT_TRUE(Has(text, "hz_vdev_turns_total{tenant=\"idle\"} 0"));
  EXPECT_EQ(text.find("tenant=\"gone\""), std::string::npos) << text;
}

// Every line is a comment or "name{labels} value" with a numeric value.
TEST(ServiceMetricsTest, ExpositionIsWellFormed) {
  Metrics m;
  for (uint32_t s = 0; s < HZ_S_MAX; ++s) m.CountRequest(HZ_OP_BARRIER, s);
  BackendStats e;
  e.algorithms = {{"we\"ird", 1}};
  MetricsSnapshot snap;
  snap.engine = &e;
  std::string text = m.Format(snap);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ASSERT_NE(nl, std::string::npos);
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("# ", 0) == 0) continue;
    size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    std::string value = line.substr(sp + 1);
    ASSERT_FALSE(value.empty());
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    EXPECT_EQ(*end, '\0') << line;
  }
  EXPECT_NE(text.find("algorithm=\"we\\\"ird\""), std::string::npos);
}

TEST(ServiceMetricsTest, Names) {
  EXPECT_STREQ(OpcodeName(HZ_OP_REDUCE_SCATTER), "REDUCE_SCATTER");
  EXPECT_STREQ(OpcodeName(0xffff), "UNKNOWN");
  EXPECT_STREQ(StatusName(HZ_S_EQUEUE), "EQUEUE");
  EXPECT_STREQ(StatusName(HZ_S_MAX), "UNKNOWN");
}

}  // namespace
}  // namespace hz::service
