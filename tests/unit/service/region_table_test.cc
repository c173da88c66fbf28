// RegionTable on its own: the overlap rules of SPEC §7.2.1 across and within
// regions, and the cost of registering and dropping large regions. All of a
// device's tenants share one connection thread, so registering or dropping a
// region of max_extents extents must not do work (here: heap allocations)
// per extent; this binary counts every allocation (alloc_counter.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "fakes.h"
#include "hz/service/region_table.h"

#include "alloc_counter.h"

namespace hz::service {
namespace {

constexpr uint32_t kRW = HZ_REGION_F_READ | HZ_REGION_F_WRITE;
constexpr uint32_t kManyExtents = 4096;
// Allocations a registration or teardown may make whatever its extent count
// (the region, its vectors, growth of the device's extent index).
constexpr uint64_t kFewAllocations = 64;

class RegionTableTest : public ::testing::Test {
 protected:
  RegionTableTest() {
    TenantSpec spec;
    spec.name = "t";
    tenant_ = std::make_shared<Tenant>(spec);
    limits_.max_device_extents = 4 * kManyExtents;
  }

  // `count` one-byte extents two bytes apart from gpa `first`, shuffled:
  // a guest's pages come in any order.
  std::vector<hz_extent> Scattered(uint64_t first, uint32_t count) const {
    std::vector<hz_extent> out;
    for (uint32_t i = 0; i < count; ++i) out.push_back({first + 2ull * i, 1});
    std::shuffle(out.begin(), out.end(), std::mt19937(count));
    return out;
  }

  uint32_t Register(RegionTable& t, const std::vector<hz_extent>& e, uint32_t* detail = nullptr) {
    uint64_t total = 0;
    for (const hz_extent& x : e) total += x.len;
    uint32_t id = 0, d = 0;
    uint32_t st = t.Register(ram_.map(), kRW, total, e, &id, &d);
    if (detail != nullptr) *detail = d;
    return st;
  }

  DeviceLimits limits_;
  std::shared_ptr<Tenant> tenant_;
  testing::GuestRam ram_{1 << 20};
};

TEST_F(RegionTableTest, OverlapsAcrossRegionsNameTheOffendingExtent) {
  RegionTable t(limits_, tenant_);
  const uint64_t b = ram_.base();
  ASSERT_EQ(Register(t, {{b + 100, 10}, {b + 300, 10}}), HZ_S_OK);
  uint32_t detail = 99;
  // Index 2 ends inside [b+300, b+310), the only overlap.
  EXPECT_EQ(Register(t, {{b + 500, 1}, {b + 110, 5}, {b + 295, 6}}, &detail), HZ_S_EINVAL);
  EXPECT_EQ(detail, 2u);
  // Touching is not overlapping.
  EXPECT_EQ(Register(t, {{b + 310, 5}, {b + 90, 10}, {b + 110, 190}}), HZ_S_OK);
  EXPECT_EQ(t.count(), 2u);
}

TEST_F(RegionTableTest, OverlapWithinARegionNamesTheLaterExtent) {
  RegionTable t(limits_, tenant_);
  const uint64_t b = ram_.base();
  uint32_t detail = 99;
  EXPECT_EQ(Register(t, {{b + 50, 10}, {b, 8}, {b + 55, 1}}, &detail), HZ_S_EINVAL);
  EXPECT_EQ(detail, 2u);
  EXPECT_EQ(t.count(), 0u);
  EXPECT_EQ(tenant_->usage().extents, 0u);
}

TEST_F(RegionTableTest, UnregisteredExtentsCanBeRegisteredAgain) {
  RegionTable t(limits_, tenant_);
  const uint64_t b = ram_.base();
  uint32_t id = 0, d = 0;
  ASSERT_EQ(t.Register(ram_.map(), kRW, 3, {{b + 4, 1}, {b, 2}}, &id, &d), HZ_S_OK);
  ASSERT_EQ(Register(t, {{b + 8, 1}}), HZ_S_OK);
  EXPECT_EQ(Register(t, {{b, 1}}), HZ_S_EINVAL);
  ASSERT_EQ(t.Unregister(id), HZ_S_OK);
  EXPECT_EQ(Register(t, {{b, 1}, {b + 4, 1}}), HZ_S_OK);
  EXPECT_EQ(Register(t, {{b + 8, 1}}), HZ_S_EINVAL) << "the other region is still there";
}

TEST_F(RegionTableTest, ManyScatteredRegionsKeepEveryExtentDisjoint) {
  RegionTable t(limits_, tenant_);
  const uint64_t b = ram_.base();
  // Four interleaved regions: region r holds the extents at b + 8k + 2r.
  for (uint64_t r = 0; r < 4; ++r) {
    std::vector<hz_extent> e;
    for (uint64_t k = 0; k < 1000; ++k) e.push_back({b + 8 * k + 2 * r, 1});
    std::shuffle(e.begin(), e.end(), std::mt19937(static_cast<uint32_t>(r)));
    ASSERT_EQ(Register(t, e), HZ_S_OK) << r;
  }
  uint32_t detail = 0;
  EXPECT_EQ(Register(t, {{b + 7999, 1}, {b + 4002, 2}}, &detail), HZ_S_EINVAL);
  EXPECT_EQ(detail, 1u);
  EXPECT_EQ(Register(t, {{b + 7999, 1}, {b + 4001, 1}}), HZ_S_OK);
  EXPECT_EQ(tenant_->usage().extents, 4002u);
}

TEST_F(RegionTableTest, RegisteringManyExtentsAllocatesPerRegionNotPerExtent) {
  RegionTable t(limits_, tenant_);
  for (uint32_t r = 0; r < 4; ++r) {
    const std::vector<hz_extent> e = Scattered(ram_.base() + 2ull * r * kManyExtents, kManyExtents);
    const uint64_t before = hz::testing::Allocations();
    ASSERT_EQ(Register(t, e), HZ_S_OK);
    EXPECT_LE(hz::testing::Allocations() - before, kFewAllocations) << "region " << r;
  }
}

TEST_F(RegionTableTest, RefusedOverlapAllocatesLittle) {
  RegionTable t(limits_, tenant_);
  const std::vector<hz_extent> e = Scattered(ram_.base(), kManyExtents);
  ASSERT_EQ(Register(t, e), HZ_S_OK);
  const uint64_t before = hz::testing::Allocations();
  EXPECT_EQ(Register(t, e), HZ_S_EINVAL);
  EXPECT_LE(hz::testing::Allocations() - before, kFewAllocations);
}

TEST_F(RegionTableTest, DroppingManyExtentsFreesPerRegionNotPerExtent) {
  RegionTable t(limits_, tenant_);
  uint32_t first = 0, d = 0;
  const std::vector<hz_extent> e = Scattered(ram_.base(), kManyExtents);
  ASSERT_EQ(t.Register(ram_.map(), kRW, kManyExtents, e, &first, &d), HZ_S_OK);
  for (uint32_t r = 1; r < 4; ++r) {
    ASSERT_EQ(Register(t, Scattered(ram_.base() + 2ull * r * kManyExtents, kManyExtents)), HZ_S_OK);
  }
  uint64_t before = hz::testing::Frees();
  ASSERT_EQ(t.Unregister(first), HZ_S_OK);
  EXPECT_LE(hz::testing::Frees() - before, kFewAllocations);
  EXPECT_EQ(Register(t, e), HZ_S_OK) << "its extents are free again";
  before = hz::testing::Frees();
  t.Clear();  // what a session's end does
  EXPECT_LE(hz::testing::Frees() - before, kFewAllocations);
  EXPECT_EQ(t.count(), 0u);
  EXPECT_EQ(tenant_->usage().extents, 0u);
  EXPECT_EQ(Register(t, e), HZ_S_OK);
}

// A registration prepared off the connection thread against one index
// goes live only on that index: a region that went meanwhile sends it back
// to be prepared again, and it changes nothing.
TEST_F(RegionTableTest, APreparedRegistrationIsCommittedOnlyOnTheIndexItWasCheckedAgainst) {
  RegionTable t(limits_, tenant_);
  const uint64_t b = ram_.base();
  uint32_t old = 0, d = 0;
  ASSERT_EQ(t.Register(ram_.map(), kRW, 4, {{b, 4}}, &old, &d), HZ_S_OK);
  RegionTable::Prepared p;
  std::thread worker([&] {  // any thread
    p = RegionTable::Prepare(limits_, ram_.map(), kRW, 8, {{b + 100, 8}}, t.index(), 77);
  });
  worker.join();
  ASSERT_EQ(p.status, HZ_S_OK);
  ASSERT_EQ(t.Unregister(old), HZ_S_OK);
  uint32_t status = 0, detail = 0;
  EXPECT_FALSE(t.Commit(p, &status, &detail)) << "the index changed since";
  EXPECT_EQ(t.count(), 0u);
  EXPECT_EQ(tenant_->usage().extents, 0u);

  p = RegionTable::Prepare(limits_, ram_.map(), kRW, 8, {{b + 100, 8}}, t.index(), t.NextId());
  ASSERT_TRUE(t.Commit(p, &status, &detail));
  EXPECT_EQ(status, HZ_S_OK);
  EXPECT_EQ(t.count(), 1u);
  EXPECT_EQ(tenant_->usage().extents, 1u);
  EXPECT_EQ(Register(t, {{b + 104, 1}}), HZ_S_EINVAL) << "its extents are in the index";
  EXPECT_EQ(Register(t, {{b, 4}}), HZ_S_OK) << "the old region's are not";
}

// Prepare finds what it can without the table (bad extents, overlaps), in
// SPEC order; the limits that count live regions are Commit's.
TEST_F(RegionTableTest, PrepareReportsOverlapsAndCommitTheLimits) {
  limits_.max_regions = 1;
  RegionTable t(limits_, tenant_);
  const uint64_t b = ram_.base();
  ASSERT_EQ(Register(t, {{b, 4}}), HZ_S_OK);
  RegionTable::Prepared overlap =
      RegionTable::Prepare(limits_, ram_.map(), kRW, 5, {{b + 10, 1}, {b + 2, 4}}, t.index(), 5);
  EXPECT_EQ(overlap.status, HZ_S_EINVAL);
  EXPECT_EQ(overlap.detail, 1u);
  RegionTable::Prepared fault =
      RegionTable::Prepare(limits_, ram_.map(), kRW, 1, {{b + (2u << 20), 1}}, t.index(), 6);
  EXPECT_EQ(fault.status, HZ_S_EFAULT);
  RegionTable::Prepared third =
      RegionTable::Prepare(limits_, ram_.map(), kRW, 1, {{b + 10, 1}}, t.index(), t.NextId());
  ASSERT_EQ(third.status, HZ_S_OK);
  uint32_t status = 0, detail = 0;
  ASSERT_TRUE(t.Commit(third, &status, &detail));
  EXPECT_EQ(status, HZ_S_ELIMIT);
  EXPECT_EQ(t.count(), 1u);
  EXPECT_EQ(Register(t, {{b + 10, 1}}), HZ_S_ELIMIT) << "nothing of it went live";
}

}  // namespace
}  // namespace hz::service
