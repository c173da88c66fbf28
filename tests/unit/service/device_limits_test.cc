// What one VM's device bounds for its tenant and for the service: extents a
// tenant may register, and answers that must not reach a ring the front-end
// took back.
#include <gtest/gtest.h>

#include <cstring>

#include "device_fixture.h"

namespace hz::service {
namespace {

using testing::HeaderOnly;
using testing::RequestBytes;
using testing::StatusOf;

// Every registered extent costs daemon memory, so a tenant's extents are
// counted against its quota like its regions and bytes.
TEST_F(DeviceTest, ExtentsCountAgainstTheTenantsQuota) {
  TenantSpec spec = tenant_->spec();
  spec.limits.max_extents = 4;
  tenant_ = std::make_shared<Tenant>(spec);
  Recreate();
  Hello();
  const uint64_t b = ram_.base();
  uint32_t id = 0;
  ASSERT_EQ(Register({{b, 64}, {b + 4096, 64}, {b + 8192, 64}}, HZ_REGION_F_READ, &id), HZ_S_OK);
  EXPECT_EQ(Register({{b + 3 * 4096, 64}, {b + 4 * 4096, 64}}, HZ_REGION_F_READ, &id), HZ_S_ELIMIT)
      << "a fifth extent exceeds the tenant's quota of 4";
  EXPECT_EQ(tenant_->usage().extents, 3u);
  uint32_t last = 0;
  ASSERT_EQ(Register({{b + 3 * 4096, 64}}, HZ_REGION_F_READ, &last), HZ_S_OK);
  EXPECT_EQ(tenant_->usage().extents, 4u);
  hz_region_unregister_args u{};
  u.region_id = id;
  ASSERT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 1)).status, HZ_S_OK);
  EXPECT_EQ(tenant_->usage().extents, 1u) << "unregistering returns the extents";

  // Another tenant's device is not affected by this tenant's quota.
  TenantSpec other_spec = spec;
  other_spec.name = "t2";
  other_spec.limits.max_extents = 8;
  auto other = std::make_shared<Tenant>(other_spec);
  RegionTable table(limits_, other);
  std::vector<hz_extent> five;
  for (uint64_t i = 0; i < 5; ++i) five.push_back({b + i * 4096, 64});
  uint32_t detail = 0;
  EXPECT_EQ(table.Register(ram_.map(), HZ_REGION_F_READ, 5 * 64, five, &id, &detail), HZ_S_OK);
  EXPECT_EQ(other->usage().extents, 5u);
  EXPECT_EQ(tenant_->usage().extents, 1u);
}

TEST_F(DeviceTest, ExtentsAreBoundedPerDevice) {
  limits_.max_device_extents = 3;
  Recreate();
  Hello();
  const uint64_t b = ram_.base();
  uint32_t id = 0;
  ASSERT_EQ(Register({{b, 64}, {b + 4096, 64}}, HZ_REGION_F_READ, &id), HZ_S_OK);
  EXPECT_EQ(Register({{b + 2 * 4096, 64}, {b + 3 * 4096, 64}}, HZ_REGION_F_READ, &id), HZ_S_ELIMIT);
  EXPECT_EQ(tenant_->usage().regions, 1u) << "a refused region reserves nothing";
  EXPECT_EQ(Register({{b + 2 * 4096, 64}}, HZ_REGION_F_READ, &id), HZ_S_OK);
}

// The front-end took the control ring back (and started a new one) while a
// rank was joining: the late answer belongs to a ring that is gone, so
// nothing is written into the old buffer, and the membership, which the
// guest will never learn of, is left again instead of lingering as a handle.
TEST_F(DeviceTest, CommInitAnsweredAfterItsRingStoppedWritesNothingAndLeaves) {
  Hello();
  Call(0, HeaderOnly(HZ_OP_COMM_UID, 3));
  hz_comm_init_args a{};
  std::memcpy(&a.uid, last_.writable()[0].data, sizeof(a.uid));
  a.nranks = 2;
  a.rank = 0;
  vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_COMM_INIT, a, 42), 64);
  ASSERT_FALSE(Submit(0, c));
  dev_->OnQueueStopped(0);
  dev_->OnQueueStarted(*queues_[0]);
  const size_t used = queues_[0]->used.size();
  ASSERT_EQ(backend_.inits.size(), 1u);
  backend_.inits[0].done(Status::Ok(), std::make_shared<testing::FakeMember>(0, 2, 7));
  ctx_.RunPosted();
  EXPECT_EQ(queues_[0]->used.size(), used) << "answered into a ring that is gone";
  std::vector<uint8_t> zero(c.writable()[0].len, 0);
  EXPECT_EQ(std::memcmp(c.writable()[0].data, zero.data(), zero.size()), 0)
      << "the stopped ring's buffer was written";
  EXPECT_TRUE(dev_->Info().comms.empty()) << "a handle the guest never learns of";
  EXPECT_EQ(backend_.destroyed.size(), 1u) << "the membership was not left";
  EXPECT_EQ(dev_->in_flight(), 0u);
}

}  // namespace
}  // namespace hz::service
