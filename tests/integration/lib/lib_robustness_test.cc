// What a tenant process sees when things go wrong: invalid arguments caught
// before the device, operations the device did not grant, and a host
// service that dies or stops under it. Never a hang or a crash.
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace {

using hz::testing::ServiceProcess;

class LibRobustness : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(svc_.Start());
    socks_ = svc_.TenantWithVms("robust", 1);
    ASSERT_EQ(socks_.size(), 1u);
    ASSERT_EQ(hz_open(("vhost-user:" + socks_[0]).c_str(), &dev_), HZ_OK);
  }
  void TearDown() override { hz_close(dev_); }

  ServiceProcess svc_;
  std::vector<std::string> socks_;
  hz_device_t* dev_ = nullptr;
};

TEST_F(LibRobustness, OpenReportsMissingDevices) {
  hz_device_t* d = nullptr;
  EXPECT_EQ(hz_open("vhost-user:/nonexistent/dir/hz.sock", &d), HZ_ENODEV);
  EXPECT_EQ(hz_open("/dev/null", &d), HZ_ENODEV);  // not a HarmonAIze device
  EXPECT_EQ(d, nullptr);
  EXPECT_STRNE(hz_strerror(HZ_ENODEV), hz_strerror(HZ_EINVAL));
}

TEST_F(LibRobustness, DeviceInfoDescribesTheSession) {
  hz_device_info info;
  ASSERT_EQ(hz_device_get_info(dev_, &info), HZ_OK);
  EXPECT_STREQ(info.transport, "vhost-user");
  EXPECT_EQ(info.version_major, HZ_VERSION_MAJOR);
  EXPECT_TRUE(info.features & (1ull << HZ_F_COLLECTIVES));
  EXPECT_GT(info.num_request_queues, 0u);
}

TEST_F(LibRobustness, InvalidArgumentsNeverReachTheDevice) {
  hz_uid_t uid;
  ASSERT_EQ(hz_comm_get_uid(dev_, &uid), HZ_OK);
  hz_comm_t* c = nullptr;
  EXPECT_EQ(hz_comm_init(dev_, &uid, 2, 2, nullptr, &c), HZ_EINVAL);  // rank >= nranks
  EXPECT_EQ(hz_comm_init(dev_, &uid, 0, 0, nullptr, &c), HZ_EINVAL);
  ASSERT_EQ(hz_comm_init(dev_, &uid, 1, 0, nullptr, &c), HZ_OK);
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(hz_allreduce(c, x, x, 4, static_cast<hz_dtype>(42), HZ_SUM), HZ_EINVAL);
  EXPECT_EQ(hz_allreduce(c, x, x, 4, HZ_FP32, static_cast<hz_redop>(9)), HZ_EINVAL);
  EXPECT_EQ(hz_allreduce(c, nullptr, x, 4, HZ_FP32, HZ_SUM), HZ_EINVAL);
  EXPECT_EQ(hz_broadcast(c, x, x, 4, HZ_FP32, 5), HZ_EINVAL);  // root out of range
  EXPECT_EQ(hz_send(c, x, 4, HZ_FP32, 0), HZ_EINVAL);          // to itself
  // The communicator still works after all of that.
  EXPECT_EQ(hz_allreduce(c, x, x, 4, HZ_FP32, HZ_SUM), HZ_OK);
  EXPECT_EQ(x[3], 4.0f);
  EXPECT_EQ(hz_comm_destroy(c), HZ_OK);
  EXPECT_EQ(hz_mem_free(dev_, x), HZ_ENOENT);
  EXPECT_EQ(hz_mem_alloc(dev_, 0, nullptr), HZ_EINVAL);
}

TEST_F(LibRobustness, UngrantedOperationsReturnNotSupported) {
  hz_device_info info;
  ASSERT_EQ(hz_device_get_info(dev_, &info), HZ_OK);
  void* p = nullptr;
  ASSERT_EQ(hz_mem_alloc(dev_, 4096, &p), HZ_OK);
  hz_buf slice{p, 4096};
  hz_ckpt_info ci;
  if (!(info.features & (1ull << HZ_F_CHECKPOINT))) {
    EXPECT_EQ(hz_ckpt_save(dev_, 1, 1, &slice, 1, nullptr, 0, &ci), HZ_ENOTSUP);
  }
  if (!(info.features & (1ull << HZ_F_EVENTS))) {
    EXPECT_EQ(hz_event_subscribe(dev_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_ENOTSUP);
  }
  if (!(info.features & (1ull << HZ_F_TOPOLOGY))) {
    hz_topology* t = nullptr;
    EXPECT_EQ(hz_topology_get(dev_, &t), HZ_ENOTSUP);
  }
  if (!(info.features & (1ull << HZ_F_HINTS))) {
    uint32_t s = 0;
    EXPECT_EQ(hz_hint_declare(dev_, 8, 64, 8, &s), HZ_ENOTSUP);
  }
  EXPECT_EQ(hz_mem_free(dev_, p), HZ_OK);
}

// hz_test_wait tells a wait that expired (the request still runs) from an
// operation that completed with HZ_ETIMEDOUT (a peer never posted), and
// leaves the request to be freed in both cases.
TEST_F(LibRobustness, TestWaitTellsAnExpiredWaitFromATimedOutOperation) {
  // The peer is a second VM of the tenant (one device's control queue would
  // serialise the two joins).
  // Binding the fixture's socket again is a no-op; the second is new.
  const std::vector<std::string> both = svc_.TenantWithVms("robust", 2);
  ASSERT_EQ(both.size(), 2u);
  ASSERT_EQ(both[0], socks_[0]);
  hz_device_t* other = nullptr;
  ASSERT_EQ(hz_open(("vhost-user:" + both[1]).c_str(), &other), HZ_OK);
  hz_uid_t uid;
  ASSERT_EQ(hz_comm_get_uid(dev_, &uid), HZ_OK);
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  hz_comm_t* peer = nullptr;
  int peer_rc = HZ_EINVAL;
  std::thread joiner([&] { peer_rc = hz_comm_init(other, &uid, 2, 1, &cfg, &peer); });
  hz_comm_t* c = nullptr;
  const int rc0 = hz_comm_init(dev_, &uid, 2, 0, &cfg, &c);
  joiner.join();
  ASSERT_EQ(rc0, HZ_OK);
  ASSERT_EQ(peer_rc, HZ_OK);
  float x[4] = {1, 2, 3, 4};
  hz_request_t* req = nullptr;
  ASSERT_EQ(hz_allreduce_async(c, x, x, 4, HZ_FP32, HZ_SUM, &req), HZ_OK);  // the peer never posts
  EXPECT_EQ(hz_test_wait(req, 10), HZ_EPENDING);
  int rc = HZ_EPENDING;
  for (int i = 0; i < 200 && rc == HZ_EPENDING; ++i) rc = hz_test_wait(req, 50);
  EXPECT_EQ(rc, HZ_ETIMEDOUT);
  EXPECT_EQ(hz_test(req), HZ_ETIMEDOUT);  // still the caller's to free
  hz_request_free(req);
  hz_comm_destroy(c);
  hz_comm_destroy(peer);
  hz_close(other);
}

TEST_F(LibRobustness, ServiceStopGivesClearErrorsNotHangs) {
  hz_uid_t uid;
  ASSERT_EQ(hz_comm_get_uid(dev_, &uid), HZ_OK);
  hz_comm_t* c = nullptr;
  ASSERT_EQ(hz_comm_init(dev_, &uid, 1, 0, nullptr, &c), HZ_OK);
  ASSERT_EQ(svc_.Terminate(), 0);
  float x[4] = {1, 2, 3, 4};
  int rc = hz_allreduce(c, x, x, 4, HZ_FP32, HZ_SUM);
  EXPECT_TRUE(rc == HZ_ENODEV || rc == HZ_ETRANSPORT || rc == HZ_ESHUTDOWN) << hz_strerror(rc);
  rc = hz_comm_get_uid(dev_, &uid);
  EXPECT_TRUE(rc == HZ_ENODEV || rc == HZ_ETRANSPORT || rc == HZ_ESHUTDOWN) << hz_strerror(rc);
  hz_comm_destroy(c);  // releases the handle whatever the device says
}

TEST_F(LibRobustness, ServiceKilledGivesClearErrorsNotHangs) {
  hz_uid_t uid;
  ASSERT_EQ(hz_comm_get_uid(dev_, &uid), HZ_OK);
  ASSERT_EQ(kill(svc_.pid(), SIGKILL), 0);
  svc_.Wait();
  int rc = hz_comm_get_uid(dev_, &uid);
  EXPECT_TRUE(rc == HZ_ENODEV || rc == HZ_ETRANSPORT) << hz_strerror(rc);
}

}  // namespace
