// The event log when the process runs out of file descriptors: a publish may
// fail, but every publish that succeeded must still be in the log after a
// restart, in order.
#include <gtest/gtest.h>

#include <vector>

#include "hz/events/event_bus.h"
#include "hz_test/descriptor_exhaustion.h"
#include "test_util.h"

namespace hz::events {
namespace {

struct Published {
  uint64_t seq;
  uint16_t kind;
};

TEST(EventsLogExhaustion, EveryAcknowledgedPublishSurvivesARestart) {
  testing::TempDir dir;
  BusOptions o;
  o.dir = dir.path();
  o.fsync = FsyncPolicy::kAlways;
  std::unique_ptr<EventBus> bus;
  ASSERT_TRUE(EventBus::Open(o, &bus).ok());
  const TenantId tenant("t1");

  std::vector<Published> acked;
  uint16_t kind = 0;
  auto publish = [&] {
    EventSpec spec;
    spec.topic = HZ_TOPIC_CAPACITY;
    spec.kind = ++kind;
    uint64_t seq = 0;
    if (bus->Publish(tenant, spec, &seq).ok()) acked.push_back({seq, spec.kind});
  };
  publish();
  publish();
  {
    hz::testing::DescriptorExhaustion exhausted;
    for (int i = 0; i < 3; ++i) publish();
  }
  publish();
  publish();
  ASSERT_GE(acked.size(), 4u);

  bus.reset();
  ASSERT_TRUE(EventBus::Open(o, &bus).ok());
  std::unique_ptr<Delivery> d;
  ASSERT_TRUE(bus->Connect(tenant, "reader", &d).ok());
  hz_event_subscribe_result r{};
  ASSERT_TRUE(d->Subscribe({HZ_TOPIC_ALL, 1}, &r).ok());
  std::vector<hz_event> got;
  hz_event ev;
  while (d->Next(&ev)) got.push_back(ev);

  for (const Published& p : acked) {
    bool found = false;
    for (const hz_event& e : got) found = found || (e.seq == p.seq && e.kind == p.kind);
    EXPECT_TRUE(found) << "acknowledged event seq " << p.seq << " (kind " << p.kind
                       << ") is not in the log after a restart";
  }
}

}  // namespace
}  // namespace hz::events
