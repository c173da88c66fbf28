// The provider's decision point against a fixture host, in process: while a
// decision scans (held inside a capacity query), the service's io_context,
// the metrics and other tenants' negotiation calls are served, and the
// decision's offers are booked once the scan ends.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "hz/service/provider.h"
#include "test_util.h"

namespace hz::service {
namespace {

namespace neg = hz::negotiation;
using hz::scheduler::testing::CopyFixtureSysfs;
using hz::scheduler::testing::FixtureToml;
using hz::scheduler::testing::TempDir;

constexpr auto kHang = std::chrono::seconds(20);  // only detects hangs

// The scheduler's resources, with a gate that holds capacity queries while
// it is closed.
class GatedResources : public neg::ResourceProvider {
 public:
  explicit GatedResources(neg::ResourceProvider* inner) : inner_(inner) {}

  std::vector<neg::Pool> Pools() const override { return inner_->Pools(); }
  uint32_t Capacity(uint32_t pool, uint64_t window) const override {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) {
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !closed_; });
    }
    return inner_->Capacity(pool, window);
  }
  Status Attach(const TenantId& tenant, uint64_t reservation_id,
                const std::vector<neg::PoolCount>& devices) override {
    return inner_->Attach(tenant, reservation_id, devices);
  }
  Status Detach(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                std::vector<neg::PoolCount>* detached) override {
    return inner_->Detach(tenant, reservation_id, count, detached);
  }
  uint32_t DevicesHeld(const TenantId& tenant, hz_device_kind kind) const override {
    return inner_->DevicesHeld(tenant, kind);
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = false;
    cv_.notify_all();
  }
  // True once a capacity query waits at the closed gate.
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kHang, [&] { return held_; });
  }

 private:
  neg::ResourceProvider* inner_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool closed_ = false;
  mutable bool held_ = false;
};

hz_neg_request OneGpuNow() {
  const uint64_t now = static_cast<uint64_t>(std::time(nullptr));
  hz_neg_request r{};
  r.kind = HZ_DEV_GPU;
  r.count = 1;
  r.locality = HZ_LOC_ANY;
  r.earliest_start_s = now;
  r.latest_start_s = now + 60;
  r.duration_s = 60;
  return r;
}

template <typename T>
bool Done(std::future<T>& f) {
  return f.wait_for(kHang) == std::future_status::ready;
}

TEST(ProviderDecision, CallsAndTheIoContextAreServedWhileADecisionScans) {
  TempDir dir;
  ServiceConfig config;
  config.state_dir = dir.path();
  config.scheduler.sysfs_root = CopyFixtureSysfs("hgx8", dir.path());
  config.scheduler.provider_file = FixtureToml("hgx8");
  config.scheduler.sync = false;
  config.scheduler.bind_vfio = false;
  config.scheduler.health_poll_ms = 0;
  config.negotiation.window_s = 10;
  config.negotiation.offer_ttl_s = 10;
  config.negotiation.decide_interval_ms = 20;

  GatedResources* gate = nullptr;
  auto view = [&gate](neg::ResourceProvider* inner) {
    auto g = std::make_unique<GatedResources>(inner);
    gate = g.get();
    return std::unique_ptr<neg::ResourceProvider>(std::move(g));
  };
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  Provider provider(config, io, nullptr, view);
  ASSERT_TRUE(provider.Start().ok());
  ASSERT_NE(gate, nullptr);
  std::thread io_thread([&io] { io.run(); });

  gate->Close();
  std::promise<neg::Decision> decided;
  ASSERT_TRUE(provider
                  .Submit(TenantId("acme"), 1, HZ_PRIO_HIGH, 0, OneGpuNow(),
                          [&decided](const neg::Decision& d) { decided.set_value(d); })
                  .ok());
  ASSERT_TRUE(gate->WaitHeld()) << "no decision point asked for capacity";

  // The decision is held inside its scan. Everything else goes on.
  std::promise<void> posted;
  boost::asio::post(io, [&posted] { posted.set_value(); });
  std::future<void> io_free = posted.get_future();
  std::future<nlohmann::json> metrics =
      std::async(std::launch::async, [&provider] { return provider.Counters(); });
  std::future<Status> other_tenant = std::async(std::launch::async, [&provider] {
    return provider.Submit(TenantId("beta"), 1, HZ_PRIO_HIGH, 0, OneGpuNow(),
                           [](const neg::Decision&) {});
  });
  const bool io_served = Done(io_free);
  const bool metrics_served = Done(metrics);
  const bool request_served = Done(other_tenant);
  gate->Open();
  EXPECT_TRUE(io_served) << "the io_context waited for a decision";
  EXPECT_TRUE(metrics_served) << "metrics waited for a decision";
  EXPECT_TRUE(request_served) << "NEG_REQUEST of another tenant waited for a decision";
  if (request_served) {
    EXPECT_TRUE(other_tenant.get().ok());
  }

  // The held decision ends and its offer is booked: it can be accepted.
  std::future<neg::Decision> answer = decided.get_future();
  ASSERT_TRUE(Done(answer));
  neg::Decision d = answer.get();
  ASSERT_FALSE(d.offers.empty());
  uint64_t reservation = 0;
  EXPECT_TRUE(provider.Accept(TenantId("acme"), d.offers[0].offer_id, &reservation).ok());
  EXPECT_NE(reservation, 0u);

  work.reset();
  io.stop();
  io_thread.join();
  provider.Stop();
}

}  // namespace
}  // namespace hz::service
