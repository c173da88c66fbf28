// GET_VRING_BASE while the device still holds chains: the spec has the
// back-end drain in-flight requests before it answers, so the base it reports
// is final. These tests hold chains in a device, stop the ring from a raw
// front-end, and check what the reply and the used ring say.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#ifndef VIRTIO_RING_NO_LEGACY
#define VIRTIO_RING_NO_LEGACY
#endif
#include <linux/virtio_ring.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "backend_harness.h"
#include "raw_vhost.h"
#include "vdev/echo_device.h"
#include "vdev/server.h"

namespace vdev::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kQ = 0;
constexpr uint16_t kN = 64;
constexpr uint64_t kData = HandRing::kGpa + HandRing::kDataOff;
// Hang detection only.
constexpr auto kHang = std::chrono::milliseconds(30000);

// Pops chains and holds them until the test releases them (echoing each on
// completion), like a device whose requests run on worker threads.
class HoldingDevice final : public Device {
 public:
  struct Shared {
    std::atomic<int> held{0};
    std::atomic<int> stopping{0};  // OnQueueStopping calls
    std::atomic<int> stopped{0};   // OnQueueStopped calls
    std::atomic<int> completed{0};
    std::atomic<int> completed_before_stop{0};
    bool hand_back_on_stopping = false;
    DeviceContext* ctx = nullptr;  // set on the strand; read after held > 0
    HoldingDevice* device = nullptr;
  };
  explicit HoldingDevice(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {
    shared_->device = this;
  }
  uint64_t Features() const override { return 0; }
  uint16_t NumQueues() const override { return 1; }
  std::vector<uint8_t> ConfigSpace() const override { return {}; }
  void OnConnect(DeviceContext& ctx) override { shared_->ctx = &ctx; }
  void OnQueueStarted(Queue& q) override { queue_ = &q; }
  void OnQueueStopped(uint16_t) override {
    queue_ = nullptr;
    shared_->stopped++;
  }
  void OnQueueStopping(Queue& q) override {
    shared_->stopping++;
    if (shared_->hand_back_on_stopping) CompleteAll(q);
  }
  void OnKick(Queue& q) override {
    Chain c;
    while (q.Pop(&c)) held_.push_back(c);
    shared_->held = static_cast<int>(held_.size());
  }
  // On the strand (through DeviceContext::Post).
  void CompleteAll(Queue& q) {
    for (const Chain& c : held_) {
      q.Complete(c, static_cast<uint32_t>(EchoChain(c)));
      shared_->completed++;
      if (shared_->stopped == 0) shared_->completed_before_stop++;
    }
    held_.clear();
    q.Flush();
  }
  void Release() {
    if (queue_ != nullptr) {
      CompleteAll(*queue_);
    } else {
      // The ring is gone: a late completion goes to the queue object the
      // device kept, which must ignore it.
      if (last_ != nullptr) CompleteAll(*last_);
    }
  }
  void KeepQueue() { last_ = queue_; }

 private:
  std::shared_ptr<Shared> shared_;
  Queue* queue_ = nullptr;
  Queue* last_ = nullptr;
  std::vector<Chain> held_;
};

class VdevStopDrain : public ::testing::Test {
 protected:
  void Serve(std::chrono::milliseconds drain_timeout) {
    path_ = TempSocketPath("drain");
    ServerOptions o;
    o.session.stop_drain_timeout = drain_timeout;
    auto shared = shared_;
    server_ = std::make_unique<Server>(
        io_, path_,
        [shared](const std::string&) { return std::make_unique<HoldingDevice>(shared); }, o);
    std::string error;
    ASSERT_TRUE(server_->Start(&error)) << error;
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    if (thread_.joinable()) {
      boost::asio::post(io_, [this] { server_->Stop(); });
      work_.reset();
      std::this_thread::sleep_for(20ms);
      io_.stop();
      thread_.join();
    }
    close(kick_);
    close(call_);
  }
  // Connects, sets up the ring, and makes `count` echo chains available.
  void StartWithChains(int count) {
    ASSERT_TRUE(c_.Connect(path_));
    std::string why;
    ASSERT_TRUE(RawHandshake(c_, &why)) << why;
    ASSERT_TRUE(RawSetMemTable(c_, ring_, &why)) << why;
    ASSERT_TRUE(RawSetupQueue(c_, ring_, kQ, kN, kick_, call_, -1, &why)) << why;
    for (int i = 0; i < count; ++i) {
      const uint16_t d = static_cast<uint16_t>(2 * i);
      std::memset(ring_.host() + HandRing::kDataOff + 128 * i, 'a' + i, 8);
      ring_.SetDesc(d, kData + 128 * i, 8, VRING_DESC_F_NEXT, d + 1);
      ring_.SetDesc(d + 1, kData + 128 * i + 64, 8, VRING_DESC_F_WRITE, 0);
      ring_.PushAvail(d, kN);
    }
    const uint64_t one = 1;
    ASSERT_EQ(write(kick_, &one, 8), 8);
    for (auto t = std::chrono::steady_clock::now(); shared_->held != count;) {
      ASSERT_LT(std::chrono::steady_clock::now() - t, kHang) << "the device never got the chains";
      std::this_thread::sleep_for(1ms);
    }
  }
  bool SendGetVringBase() {
    vu::VringState st{kQ, 0};
    return c_.Send(vu::kGetVringBase, vu::kVersion, &st, sizeof(st));
  }
  // The GET_VRING_BASE reply's base, or -1.
  int64_t ReceiveBase() {
    RawReply r;
    if (c_.Recv(&r, kHang) != Got::kReply || r.hdr.request != vu::kGetVringBase ||
        r.payload.size() != sizeof(vu::VringState)) {
      return -1;
    }
    vu::VringState st;
    std::memcpy(&st, r.payload.data(), sizeof(st));
    return st.index == kQ ? st.num : -1;
  }
  void PostRelease() {
    auto shared = shared_;
    shared_->ctx->Post([shared] { shared->device->Release(); });
  }

  std::shared_ptr<HoldingDevice::Shared> shared_ = std::make_shared<HoldingDevice::Shared>();
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::unique_ptr<Server> server_;
  std::thread thread_;
  std::string path_;
  RawConn c_;
  HandRing ring_;
  int kick_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int call_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
};

TEST_F(VdevStopDrain, ReplyWaitsForTheChainsTheDeviceHolds) {
  Serve(std::chrono::minutes(10));  // only the drain ends the wait
  StartWithChains(3);
  ASSERT_TRUE(SendGetVringBase());
  for (auto t = std::chrono::steady_clock::now(); shared_->stopping == 0;) {
    ASSERT_LT(std::chrono::steady_clock::now() - t, kHang) << "OnQueueStopping never came";
    std::this_thread::sleep_for(1ms);
  }
  // The reply has not come yet: the device still holds every chain.
  RawReply early;
  EXPECT_EQ(c_.Recv(&early, 0ms), Got::kTimeout) << "answered before the chains completed";
  EXPECT_EQ(ring_.UsedIdx(), 0);
  PostRelease();
  EXPECT_EQ(ReceiveBase(), 3);
  // Every completion reached the used ring before the reply, and the device
  // saw the stop only after it had completed them.
  EXPECT_EQ(ring_.UsedIdx(), 3);
  EXPECT_EQ(shared_->completed_before_stop.load(), 3);
  EXPECT_EQ(shared_->stopped.load(), 1);
  for (uint16_t i = 0; i < 3; ++i) {
    uint32_t id = 0, len = 0;
    ring_.UsedEntry(i, &id, &len);
    EXPECT_EQ(id, 2u * i);
    EXPECT_EQ(len, 8u);
    EXPECT_EQ(ring_.host()[HandRing::kDataOff + 128 * i + 64], 'a' + i);
  }
  // The connection answers again, and the ring restarts from the base.
  uint64_t features = 0;
  EXPECT_TRUE(c_.GetU64(vu::kGetFeatures, &features));
}

TEST_F(VdevStopDrain, ChainsHandedBackWhenStoppingAnswerAtOnce) {
  shared_->hand_back_on_stopping = true;
  Serve(std::chrono::minutes(10));
  StartWithChains(2);
  ASSERT_TRUE(SendGetVringBase());
  EXPECT_EQ(ReceiveBase(), 2);
  EXPECT_EQ(ring_.UsedIdx(), 2);
  EXPECT_EQ(shared_->stopping.load(), 1);
}

TEST_F(VdevStopDrain, BoundedWaitThenLateCompletionsAreDropped) {
  Serve(50ms);
  StartWithChains(2);
  auto shared = shared_;
  // Keep the queue pointer so the device can try a late completion.
  shared_->ctx->Post([shared] { shared->device->KeepQueue(); });
  ASSERT_TRUE(SendGetVringBase());
  // Nothing completes: the reply still comes (after the bound), reporting
  // every chain popped as consumed; the used ring shows none of them.
  EXPECT_EQ(ReceiveBase(), 2);
  EXPECT_EQ(ring_.UsedIdx(), 0);
  EXPECT_EQ(shared_->stopped.load(), 1);
  // Completions after the reply must not touch the ring the front-end now owns.
  PostRelease();
  for (auto t = std::chrono::steady_clock::now(); shared_->completed != 2;) {
    ASSERT_LT(std::chrono::steady_clock::now() - t, kHang);
    std::this_thread::sleep_for(1ms);
  }
  uint64_t features = 0;
  EXPECT_TRUE(c_.GetU64(vu::kGetFeatures, &features));  // strand is past the release
  EXPECT_EQ(ring_.UsedIdx(), 0);
}

TEST_F(VdevStopDrain, NoWaitWithoutChainsInFlight) {
  Serve(std::chrono::minutes(10));
  StartWithChains(0);
  ASSERT_TRUE(SendGetVringBase());
  EXPECT_EQ(ReceiveBase(), 0);
  EXPECT_EQ(shared_->stopping.load(), 0);
}

}  // namespace
}  // namespace vdev::testing
