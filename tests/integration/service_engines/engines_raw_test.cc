// Checkpoint requests at the wire level (what libharmonaize cannot send):
// slices outside a region, overlapping destinations, and regions made of
// several extents, which the service stages through bounce buffers.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hz_client.h"
#include "service_harness.h"

namespace {

using hz::testing::GuestBuffer;
using hz::testing::HzClient;
using hz::testing::Reply;
using hz::testing::ServiceProcess;

constexpr uint16_t kReq = HZ_VQ_REQUEST_BASE;

class ServiceEngineCkptWire : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(svc_.Start());
    auto socks = svc_.TenantWithVms("raw", 1);
    ASSERT_EQ(socks.size(), 1u);
    ASSERT_TRUE(c_.Connect(socks[0]));
    ASSERT_EQ(c_.Hello((1ull << HZ_F_CHECKPOINT) | (1ull << HZ_F_EVENTS)), HZ_S_OK);
    hz_ckpt_policy_args p{};
    p.stream = 9;
    p.retention = 2;
    p.tier = HZ_TIER_HOST_MEMORY;
    p.stall_budget_ms = 1000;
    ASSERT_EQ(c_.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_POLICY, p).status, HZ_S_OK);
  }

  Reply Save(uint64_t step, const std::vector<hz_slice>& slices) {
    hz_ckpt_save_args a{};
    a.stream = 9;
    a.num_slices = static_cast<uint32_t>(slices.size());
    a.step = step;
    return c_.Call(kReq, HZ_OP_CKPT_SAVE, &a, sizeof(a), slices.data(),
                   static_cast<uint32_t>(slices.size() * sizeof(hz_slice)), 64);
  }
  Reply Restore(uint64_t step, const std::vector<hz_slice>& slices) {
    hz_ckpt_restore_args a{};
    a.stream = 9;
    a.num_slices = static_cast<uint32_t>(slices.size());
    a.step = step;
    return c_.Call(kReq, HZ_OP_CKPT_RESTORE, &a, sizeof(a), slices.data(),
                   static_cast<uint32_t>(slices.size() * sizeof(hz_slice)), 64);
  }

  ServiceProcess svc_;
  HzClient c_;
};

TEST_F(ServiceEngineCkptWire, MultiExtentRegionsRoundTripByteExact) {
  GuestBuffer b;
  const uint64_t size = 3 * 65536 + 512;
  ASSERT_EQ(c_.Register(size, 3, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &b), HZ_S_OK);
  std::vector<uint8_t> want(size);
  for (uint64_t i = 0; i < size; ++i) want[i] = static_cast<uint8_t>(i * 31 + 7);
  b.Write(0, want.data(), size);
  // Two slices, each across extent boundaries.
  std::vector<hz_slice> s = {{b.region, 0, 0, 100000}, {b.region, 0, 100000, size - 100000}};
  Reply r = Save(1, s);
  ASSERT_EQ(r.status, HZ_S_OK);
  hz_ckpt_save_result sr;
  ASSERT_GE(r.result.size(), sizeof(sr));
  std::memcpy(&sr, r.result.data(), sizeof(sr));
  EXPECT_EQ(sr.step, 1u);
  EXPECT_EQ(sr.state, HZ_CKPT_DURABLE);  // host-memory tier

  std::vector<uint8_t> zero(size, 0);
  b.Write(0, zero.data(), size);
  r = Restore(1, s);
  ASSERT_EQ(r.status, HZ_S_OK);
  std::vector<uint8_t> got(size);
  b.Read(0, got.data(), size);
  EXPECT_EQ(got, want);
}

TEST_F(ServiceEngineCkptWire, SlicesOutsideARegionAndOverlapsAreRefused) {
  GuestBuffer b;
  ASSERT_EQ(c_.Register(65536, 1, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &b), HZ_S_OK);
  Reply r = Save(1, {{b.region, 0, 65536 - 100, 200}});
  EXPECT_EQ(r.status, HZ_S_EFAULT);
  r = Save(1, {{b.region, 0, 0, 100}, {b.region + 100, 0, 0, 100}});
  EXPECT_EQ(r.status, HZ_S_ENOENT);
  EXPECT_EQ(r.st.detail, 1u);
  r = Save(1, {{HZ_REGION_INLINE, 0, 0, 0}});
  EXPECT_EQ(r.status, HZ_S_EINVAL);

  ASSERT_EQ(Save(2, {{b.region, 0, 0, 4096}, {b.region, 0, 4096, 4096}}).status, HZ_S_OK);
  std::vector<uint8_t> marker(65536, 0xAB);
  b.Write(0, marker.data(), marker.size());
  // Destinations that overlap: EINVAL naming the later one; nothing written.
  r = Restore(2, {{b.region, 0, 0, 4096}, {b.region, 0, 2048, 4096}});
  EXPECT_EQ(r.status, HZ_S_EINVAL);
  EXPECT_EQ(r.st.detail, 1u);
  r = Restore(2, {{b.region, 0, 65536 - 10, 4096}, {b.region, 0, 0, 4096}});
  EXPECT_EQ(r.status, HZ_S_EFAULT);
  std::vector<uint8_t> got(65536);
  b.Read(0, got.data(), got.size());
  EXPECT_EQ(got, marker);
}

TEST_F(ServiceEngineCkptWire, SaveIsARequestQueueOperation) {
  GuestBuffer b;
  ASSERT_EQ(c_.Register(4096, 1, HZ_REGION_F_READ, &b), HZ_S_OK);
  hz_ckpt_save_args a{};
  a.stream = 9;
  a.num_slices = 1;
  a.step = 1;
  hz_slice s{b.region, 0, 0, 4096};
  Reply r = c_.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_SAVE, &a, sizeof(a), &s, sizeof(s), 64);
  EXPECT_EQ(r.status, HZ_S_EQUEUE);
  a.flags = 1;
  r = c_.Call(kReq, HZ_OP_CKPT_SAVE, &a, sizeof(a), &s, sizeof(s), 64);
  EXPECT_EQ(r.status, HZ_S_ENOTSUP);
}

}  // namespace
