// A failed device end to end: scheduler, the real event bus and a tenant's
// delivery, and a replacement offer through the negotiation engine, joined as
// the service joins them (scheduler_resources.h).
#include <gtest/gtest.h>

#include <cstring>

#include "hz/events/event_bus.h"
#include "hz/negotiation/negotiation.h"
#include "hz/scheduler/scheduler.h"
#include "hz/service/scheduler_resources.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using service::ReplacementRequest;
using service::SchedulerResources;

namespace ev = hz::events;
using testing::CopyFixtureSysfs;
using testing::FixtureToml;
using testing::TempDir;

class RecordingAttacher : public DomainAttacher {
 public:
  Status Attach(const std::string& domain, const std::string& bdf) override {
    attached.insert(domain + "/" + bdf);
    return Status::Ok();
  }
  Status Detach(const std::string& domain, const std::string& bdf) override {
    attached.erase(domain + "/" + bdf);
    return Status::Ok();
  }
  std::set<std::string> attached;
};

TEST(SchedulerFailureFlow, TenantSeesOnlyAnIndexAndGetsAReplacementOffer) {
  TempDir dir;
  std::unique_ptr<ev::EventBus> bus;
  ev::BusOptions bo;
  bo.dir = dir.path() + "/events";
  bo.fsync = ev::FsyncPolicy::kNone;
  ASSERT_TRUE(ev::EventBus::Open(bo, &bus).ok());

  SchedulerOptions o;
  o.sysfs_root = CopyFixtureSysfs("hgx8", dir.path());
  o.provider_file = FixtureToml("hgx8");
  o.state_path = dir.path() + "/scheduler.json";
  o.sync = false;
  RecordingAttacher attacher;
  std::unique_ptr<Scheduler> sched;
  ASSERT_TRUE(Scheduler::Open(o, &attacher, bus.get(), &sched).ok());
  SchedulerResources resources(sched.get());
  negotiation::NegotiationEngine engine(negotiation::NegotiationOptions{}, &resources, bus.get());

  ASSERT_TRUE(sched->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched->Allocate(TenantId("acme"), {4, 4, HZ_LOC_SAME_GROUP}, &id).ok());
  EXPECT_EQ(attacher.attached.size(), 8u);

  std::unique_ptr<ev::Delivery> delivery;
  ASSERT_TRUE(bus->Connect(TenantId("acme"), "guest0", &delivery).ok());
  hz_event_subscribe_args args{};
  args.topics = HZ_TOPIC_ALL;
  args.from_seq = HZ_SEQ_CURSOR;
  hz_event_subscribe_result res{};
  ASSERT_TRUE(delivery->Subscribe(args, &res).ok());

  TopologySummary summary;
  ASSERT_TRUE(sched->Summary(TenantId("acme"), &summary).ok());
  const uint32_t lost_index = 1;
  const std::string bdf = sched->cluster().device(summary.devices[lost_index]).bdf;
  const uint64_t now = 1'700'000'000;
  StatusOr<DeviceLoss> loss = sched->MarkFailed(bdf, 1);
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(attacher.attached.size(), 7u);
  EXPECT_FALSE(attacher.attached.count("vm-acme/" + bdf));

  hz_event e{};
  ASSERT_TRUE(delivery->Next(&e));
  EXPECT_EQ(e.topic, HZ_TOPIC_FAILURE);
  EXPECT_EQ(e.kind, ev::kFailureDeviceFailed);
  uint32_t index = 0;
  std::memcpy(&index, e.payload, 4);
  EXPECT_EQ(index, lost_index);
  // Nothing in the record names the device.
  const std::string raw(reinterpret_cast<const char*>(&e), sizeof(e));
  EXPECT_EQ(raw.find(bdf), std::string::npos);
  EXPECT_EQ(raw.find(bdf.substr(5)), std::string::npos);
  ASSERT_TRUE(delivery->Next(&e));
  EXPECT_EQ(e.topic, HZ_TOPIC_CAPACITY);

  // The service opens a replacement negotiation for what the failure took; it
  // is decided at the next decision point and offered to the tenant, who
  // accepts it; the new GPU is attached when the reservation starts.
  uint64_t negotiation = 0;
  ASSERT_TRUE(
      engine.OfferReplacement(loss->tenant, ReplacementRequest(*loss, now), now, &negotiation)
          .ok());
  std::vector<negotiation::Decision> decisions = engine.Decide(now);
  ASSERT_EQ(decisions.size(), 1u);
  ASSERT_FALSE(decisions[0].offers.empty());
  bool offered = false;
  while (delivery->Next(&e)) {
    offered |= e.topic == HZ_TOPIC_NEGOTIATION && e.kind == ev::kNegotiationOfferMade;
  }
  EXPECT_TRUE(offered);
  uint64_t reservation = 0;
  ASSERT_TRUE(
      engine.Accept(TenantId("acme"), decisions[0].offers[0].offer_id, now, &reservation).ok());
  engine.Tick(decisions[0].offers[0].start_s);
  EXPECT_EQ(attacher.attached.size(), 8u);
  EXPECT_EQ(sched->DevicesHeld(TenantId("acme"), HZ_DEV_GPU), 4u);
  EXPECT_FALSE(attacher.attached.count("vm-acme/" + bdf));
}

}  // namespace
}  // namespace hz::scheduler
