#include <gtest/gtest.h>

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
  // Without an engine there are no engine series.
  EXPECT_EQ(text.find("hz_collective_algorithm_total"), std::string::npos);
}

TEST(ServiceMetricsTest, EngineStatsAppear) {
  Metrics m;
  BackendStats e;
  e.algorithms = {{"inline", 5}, {"blocked_parallel", 2}};
  e.ops = {{"allreduce", 7}};
  e.communicators = 4;
  MetricsSnapshot snap;
  snap.engine = &e;
  std::string text = m.Format(snap);
  EXPECT_TRUE(Has(text, "hz_collective_algorithm_total{algorithm=\"inline\"} 5"));
  EXPECT_TRUE(Has(text, "hz_collective_algorithm_total{algorithm=\"blocked_parallel\"} 2"));
  EXPECT_TRUE(Has(text, "hz_collective_ops_total{op=\"allreduce\"} 7"));
  EXPECT_TRUE(Has(text, "hz_communicators 4"));
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
    EXPECT_EQ(value.find_first_not_of("0123456789"), std::string::npos) << line;
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
