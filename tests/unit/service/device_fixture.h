// The DeviceTest fixture: an HzDevice on fakes (fakes.h), driven with
// hand-built chains; no sockets, no engine.
#ifndef HZ_TESTS_UNIT_SERVICE_DEVICE_FIXTURE_H_
#define HZ_TESTS_UNIT_SERVICE_DEVICE_FIXTURE_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "fakes.h"
#include "hz/service/hz_device.h"

namespace hz::service {

constexpr uint64_t kAllFeatures = ~0ull;

// An HzDevice on fakes, with its queues started; each request is submitted
// on a queue and answered (or left pending) before the call returns.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TenantSpec spec;
    spec.name = "t1";
    spec.limits.max_regions = 8;
    spec.limits.max_region_bytes = 1 << 20;
    tenant_ = std::make_shared<Tenant>(spec);
    Recreate();
  }

  // Fixtures of the other families add their backends.
  virtual void AddBackends(DeviceEnv* /*env*/) {}

  DeviceEnv Env() {
    DeviceEnv env;
    env.limits = limits_;
    env.coll = &backend_;
    env.metrics = &metrics_;
    env.draining = &draining_;
    AddBackends(&env);
    return env;
  }

  void Recreate() {
    queues_.clear();
    dev_.reset();
    dev_ = std::make_unique<HzDevice>(Env(), tenant_, "/run/vm0.sock");
    dev_->OnConnect(ctx_);
    for (uint16_t i = 0; i < dev_->NumQueues(); ++i) {
      queues_.push_back(std::make_unique<testing::FakeQueue>(i));
      dev_->OnQueueStarted(*queues_.back());
    }
  }

  // Submits one chain on queue q and returns what the device completed (the
  // last used entry of that queue), or nothing if it is still pending.
  bool Submit(uint16_t q, const vdev::Chain& c) {
    size_t before = queues_[q]->used.size();
    queues_[q]->avail.push_back(c);
    dev_->OnKick(*queues_[q]);
    return queues_[q]->used.size() > before;
  }

  hz_status Call(uint16_t q, const std::vector<uint8_t>& readable, size_t result_space = 64,
                 size_t chunk = 0) {
    vdev::Chain c = cb_.Make(readable, result_space + sizeof(hz_status), chunk);
    EXPECT_TRUE(Submit(q, c)) << "request did not complete";
    last_ = c;
    last_used_ = queues_[q]->used.empty() ? 0 : queues_[q]->used.back().len;
    return testing::StatusOf(c);
  }

  hz_hello_result Hello(uint64_t features = kAllFeatures) {
    hz_hello_args a{};
    a.version_major = HZ_VERSION_MAJOR;
    a.driver_features = features;
    hz_status st = Call(0, testing::RequestBytes(HZ_OP_HELLO, a, 1));
    EXPECT_EQ(st.status, HZ_S_OK);
    hz_hello_result r;
    std::memcpy(&r, last_.writable()[0].data, sizeof(r));
    return r;
  }

  // Registers extents; returns the status and *id.
  uint32_t Register(const std::vector<hz_extent>& ext, uint32_t flags, uint32_t* id,
                    uint64_t total = ~0ull) {
    hz_region_register_args a{};
    a.num_extents = static_cast<uint32_t>(ext.size());
    a.flags = flags;
    if (total == ~0ull) {
      total = 0;
      for (const auto& e : ext) total += e.len;
    }
    a.total_len = total;
    hz_status st = Call(0, testing::RequestBytes(HZ_OP_REGION_REGISTER, a, 2, ext.data(),
                                                 ext.size() * sizeof(hz_extent)));
    if (st.status == HZ_S_OK) {
      hz_region_register_result r;
      std::memcpy(&r, last_.writable()[0].data, sizeof(r));
      *id = r.region_id;
    }
    last_detail_ = st.detail;
    return st.status;
  }

  uint64_t InitComm(uint32_t nranks = 1, uint32_t rank = 0) {
    Call(0, testing::HeaderOnly(HZ_OP_COMM_UID, 3));
    hz_comm_init_args a{};
    std::memcpy(&a.uid, last_.writable()[0].data, sizeof(a.uid));
    a.nranks = nranks;
    a.rank = rank;
    // Completions always come back through the executor, even when the
    // engine answers before Init returns.
    vdev::Chain c = cb_.Make(testing::RequestBytes(HZ_OP_COMM_INIT, a, 4), 64);
    EXPECT_FALSE(Submit(0, c));
    ctx_.RunPosted();
    last_ = c;
    EXPECT_EQ(testing::StatusOf(c).status, HZ_S_OK);
    hz_comm_init_result r;
    std::memcpy(&r, last_.writable()[0].data, sizeof(r));
    return r.comm;
  }

  hz_coll_args Coll(uint64_t comm, uint64_t count, hz_slice send, hz_slice recv) {
    hz_coll_args a{};
    a.comm = comm;
    a.count = count;
    a.dtype = HZ_FP32;
    a.redop = HZ_SUM;
    a.send = send;
    a.recv = recv;
    return a;
  }

  static hz_slice Slice(uint32_t region, uint64_t off, uint64_t len) {
    hz_slice s{};
    s.region_id = region;
    s.offset = off;
    s.length = len;
    return s;
  }

  DeviceLimits limits_;
  testing::GuestRam ram_{4 << 20};
  testing::ChainBuilder cb_{&ram_};
  testing::FakeContext ctx_{ram_.map()};
  testing::FakeBackend backend_;
  Metrics metrics_;
  std::atomic<bool> draining_{false};
  std::shared_ptr<Tenant> tenant_;
  std::unique_ptr<HzDevice> dev_;
  std::vector<std::unique_ptr<testing::FakeQueue>> queues_;
  vdev::Chain last_;
  uint32_t last_used_ = 0;
  uint32_t last_detail_ = 0;
};

}  // namespace hz::service

#endif  // HZ_TESTS_UNIT_SERVICE_DEVICE_FIXTURE_H_
