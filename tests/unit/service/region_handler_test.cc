// REGION_REGISTER prepared off the connection thread (region_handler.h):
// the device answers it later, one registration of the VM at a time in
// arrival order, prepares it again when a region went meanwhile, and a
// session that ends drops it without a trace.
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <thread>

#include "device_fixture.h"

namespace hz::service {
namespace {

constexpr uint32_t kRW = HZ_REGION_F_READ | HZ_REGION_F_WRITE;

class RegionHandlerTest : public DeviceTest {
 protected:
  void AddBackends(DeviceEnv* env) override {
    env->background = [this](std::function<void()> fn) { jobs_.push_back(std::move(fn)); };
  }

  // Posts a REGION_REGISTER of ext and returns its chain (not yet answered).
  vdev::Chain PostRegister(const std::vector<hz_extent>& ext) {
    hz_region_register_args a{};
    a.num_extents = static_cast<uint32_t>(ext.size());
    a.flags = kRW;
    for (const auto& e : ext) a.total_len += e.len;
    vdev::Chain c = cb_.Make(testing::RequestBytes(HZ_OP_REGION_REGISTER, a, 2, ext.data(),
                                                   ext.size() * sizeof(hz_extent)),
                             64 + sizeof(hz_status));
    EXPECT_FALSE(Submit(0, c)) << "answered on the connection thread";
    return c;
  }

  // Runs the oldest background job on a thread of its own, then what it
  // posted back to the device's executor.
  void RunJob() {
    ASSERT_FALSE(jobs_.empty());
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    std::thread(job).join();
    ctx_.RunPosted();
  }

  static uint32_t IdOf(const vdev::Chain& c) {
    hz_region_register_result r;
    std::memcpy(&r, c.writable()[0].data, sizeof(r));
    return r.region_id;
  }

  uint32_t Unregister(uint32_t id) {
    hz_region_unregister_args a{};
    a.region_id = id;
    return Call(0, testing::RequestBytes(HZ_OP_REGION_UNREGISTER, a, 9)).status;
  }

  std::deque<std::function<void()>> jobs_;
};

TEST_F(RegionHandlerTest, ARegistrationIsPreparedInTheBackgroundAndAnsweredAfter) {
  Hello();
  const uint64_t b = ram_.base();
  vdev::Chain c = PostRegister({{b, 64}, {b + 128, 64}});
  ASSERT_EQ(jobs_.size(), 1u);
  EXPECT_EQ(dev_->Info().in_flight, 1u);
  RunJob();
  ASSERT_EQ(testing::StatusOf(c).status, HZ_S_OK);
  EXPECT_EQ(dev_->Info().regions, 1u);
  EXPECT_EQ(dev_->Info().in_flight, 0u);
  EXPECT_EQ(Unregister(IdOf(c)), HZ_S_OK);
}

TEST_F(RegionHandlerTest, RegistrationsOfAVmArePreparedOneAtATimeInOrder) {
  Hello();
  const uint64_t b = ram_.base();
  vdev::Chain first = PostRegister({{b, 64}});
  vdev::Chain second = PostRegister({{b + 32, 64}});  // overlaps the first
  ASSERT_EQ(jobs_.size(), 1u) << "the second waits for the first";
  RunJob();
  EXPECT_EQ(testing::StatusOf(first).status, HZ_S_OK);
  ASSERT_EQ(jobs_.size(), 1u);
  RunJob();
  EXPECT_EQ(testing::StatusOf(second).status, HZ_S_EINVAL) << "checked against the first";
  EXPECT_EQ(dev_->Info().regions, 1u);
}

TEST_F(RegionHandlerTest, ARegionGoneWhileOneWasPreparedMakesItPreparedAgain) {
  Hello();
  const uint64_t b = ram_.base();
  vdev::Chain old = PostRegister({{b, 64}});
  RunJob();
  ASSERT_EQ(testing::StatusOf(old).status, HZ_S_OK);
  vdev::Chain next = PostRegister({{b + 256, 64}});
  ASSERT_EQ(Unregister(IdOf(old)), HZ_S_OK);  // while next is prepared
  const size_t answered = queues_[0]->used.size();
  RunJob();
  EXPECT_EQ(queues_[0]->used.size(), answered) << "not answered yet";
  ASSERT_EQ(jobs_.size(), 1u) << "prepared again against the index without the old region";
  RunJob();
  ASSERT_EQ(testing::StatusOf(next).status, HZ_S_OK);
  EXPECT_EQ(dev_->Info().regions, 1u);
  vdev::Chain reuse = PostRegister({{b, 64}});
  RunJob();
  EXPECT_EQ(testing::StatusOf(reuse).status, HZ_S_OK) << "the old region's extents are free";
}

TEST_F(RegionHandlerTest, ANewSessionAnswersWaitingRegistrationsAndDropsThePreparedOne) {
  Hello();
  const uint64_t b = ram_.base();
  vdev::Chain being_prepared = PostRegister({{b, 64}});
  vdev::Chain waiting = PostRegister({{b + 256, 64}});
  Hello();
  EXPECT_EQ(testing::StatusOf(being_prepared).status, HZ_S_EABORTED);
  EXPECT_EQ(testing::StatusOf(being_prepared).detail, 2u) << "the session ended (SPEC §2.7.1)";
  EXPECT_EQ(testing::StatusOf(waiting).status, HZ_S_EABORTED);
  RunJob();  // comes back to a session that no longer wants it
  EXPECT_TRUE(jobs_.empty());
  EXPECT_EQ(dev_->Info().regions, 0u);
  EXPECT_EQ(tenant_->usage().regions, 0u);
  vdev::Chain again = PostRegister({{b, 64}});
  RunJob();
  EXPECT_EQ(testing::StatusOf(again).status, HZ_S_OK) << "nothing of the old session is left";
}

TEST_F(RegionHandlerTest, ADeviceGoneBeforeItsRegistrationCameBackTouchesNothing) {
  Hello();
  PostRegister({{ram_.base(), 64}});
  std::function<void()> job = std::move(jobs_.front());
  jobs_.clear();
  dev_->OnDisconnect();
  dev_.reset();
  std::thread(job).join();
  ctx_.RunPosted();
  EXPECT_EQ(tenant_->usage().regions, 0u);
}

}  // namespace
}  // namespace hz::service
