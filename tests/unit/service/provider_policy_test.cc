// The operator's negotiation policy as the service applies it: the per-tenant
// quota of open negotiations from [negotiation] and each tenant's weight,
// through Provider (the devices' ProviderBackend) on a fixture host.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <ctime>
#include <map>
#include <memory>
#include <string>

#include "hz/service/config.h"
#include "hz/service/provider.h"
#include "test_util.h"

namespace hz::service {
namespace {

namespace sc = hz::scheduler;
using sc::testing::CopyFixtureSysfs;
using sc::testing::FixtureToml;
using sc::testing::RecordingSink;
using sc::testing::TempDir;

class ProviderPolicy : public ::testing::Test {
 protected:
  void Start(uint32_t max_open) {
    ServiceConfig c;
    c.state_dir = dir_.path();
    c.scheduler.enabled = true;
    c.scheduler.sysfs_root = CopyFixtureSysfs("hgx8", dir_.path());
    c.scheduler.provider_file = FixtureToml("hgx8");
    c.scheduler.sync = false;
    c.scheduler.bind_vfio = false;
    c.scheduler.health_poll_ms = 0;
    c.negotiation.max_open_per_tenant = max_open;
    c.negotiation.decide_interval_ms = 0;  // no timer: the test calls DecisionPoint itself
    provider_ = std::make_unique<Provider>(c, io_, &sink_);
    Status s = provider_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
    if (provider_) provider_->Stop();
  }

  static uint64_t Now() { return static_cast<uint64_t>(std::time(nullptr)); }
  // GPUs starting in `in_s` seconds, for 10 minutes.
  static hz_neg_request Gpus(uint16_t count, uint64_t in_s = 0) {
    hz_neg_request r{};
    r.kind = HZ_DEV_GPU;
    r.count = count;
    r.locality = HZ_LOC_ANY;
    r.priority_class = HZ_PRIO_NORMAL;
    r.earliest_start_s = Now() + in_s;
    r.latest_start_s = Now() + in_s + 30;
    r.duration_s = 600;
    return r;
  }
  // Submits and keeps the decision in decisions_[tenant].
  Status Submit(const std::string& tenant, uint32_t weight, const hz_neg_request& r) {
    return provider_->Submit(
        TenantId(tenant), weight, HZ_PRIO_HIGH, 0, r,
        [this, tenant](const negotiation::Decision& d) { decisions_[tenant] = d; });
  }

  TempDir dir_;
  boost::asio::io_context io_;  // never run
  RecordingSink sink_;
  std::unique_ptr<Provider> provider_;
  std::map<std::string, negotiation::Decision> decisions_;
};

TEST_F(ProviderPolicy, OpenNegotiationsAreLimitedPerTenantAsConfigured) {
  Start(/*max_open=*/2);
  ASSERT_TRUE(Submit("a", 1, Gpus(1)).ok());
  ASSERT_TRUE(Submit("a", 1, Gpus(1)).ok());
  EXPECT_EQ(Submit("a", 1, Gpus(1)).code(), StatusCode::kLimit);
  EXPECT_TRUE(Submit("b", 1, Gpus(1)).ok());  // another tenant's quota is its own
}

TEST_F(ProviderPolicy, TheOperatorsWeightDecidesWhoIsServedFirst) {
  Start(64);
  // a and b each hold a reservation of one GPU for the same time, later on:
  // equal usage, so weight alone orders them.
  for (const char* t : {"a", "b"}) {
    ASSERT_TRUE(Submit(t, 1, Gpus(1, 3600)).ok());
  }
  provider_->DecisionPoint();
  for (const char* t : {"a", "b"}) {
    ASSERT_FALSE(decisions_[t].offers.empty()) << t;
    uint64_t res = 0;
    ASSERT_TRUE(provider_->Accept(TenantId(t), decisions_[t].offers[0].offer_id, &res).ok());
  }
  decisions_.clear();
  // Both ask for every GPU now; a asks first, but b's weight is 3.
  ASSERT_TRUE(Submit("a", 1, Gpus(8)).ok());
  ASSERT_TRUE(Submit("b", 3, Gpus(8)).ok());
  provider_->DecisionPoint();
  ASSERT_EQ(decisions_.size(), 2u);
  EXPECT_FALSE(decisions_["b"].offers.empty());
  EXPECT_TRUE(decisions_["a"].offers.empty() ||
              decisions_["a"].offers[0].start_s > decisions_["b"].offers[0].start_s);
}

}  // namespace
}  // namespace hz::service
