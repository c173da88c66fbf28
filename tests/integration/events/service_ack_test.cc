// EVENT_ACK through the service's device on the real event bus, with the
// bus's cursor writes held behind a gate: the ack is answered only once its
// cursor is written, and while that write waits, the connection thread it
// shares with another tenant's VM keeps serving that VM.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine_adapters.h"
#include "fakes.h"
#include "hz/common/file.h"
#include "hz/events/event_bus.h"
#include "hz/service/hz_device.h"
#include "state_writes.h"

namespace hz::service {
namespace {

using testing::ChainBuilder;
using testing::FakeQueue;
using testing::GuestRam;
using testing::HeaderOnly;
using testing::RequestBytes;
using testing::StatusOf;

constexpr auto kHang = std::chrono::seconds(10);  // only detects hangs

// One connection thread (worker_threads = 1): every device posted to it runs
// there, one piece of work after another.
class ConnectionThread : public vdev::DeviceContext {
 public:
  explicit ConnectionThread(vdev::MemoryMapPtr memory)
      : memory_(std::move(memory)), thread_([this] { Loop(); }) {}
  ~ConnectionThread() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void Post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(std::move(fn));
    cv_.notify_all();
  }
  vdev::MemoryMapPtr Memory() const override { return memory_; }
  void NotifyConfigChanged() override {}

  // Runs fn on the thread; false if it did not get to run and finish in time.
  bool Run(std::function<void()> fn) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> f = done->get_future();
    Post([fn = std::move(fn), done] {
      fn();
      done->set_value();
    });
    return f.wait_for(kHang) == std::future_status::ready;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (work_.empty()) return;
      std::function<void()> fn = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  vdev::MemoryMapPtr memory_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  bool stop_ = false;
  std::thread thread_;
};

// One tenant's device on the shared connection thread, its queues started.
struct Vm {
  Vm(DeviceEnv env, const std::string& tenant, ConnectionThread& thread) {
    TenantSpec spec;
    spec.name = tenant;
    dev = std::make_unique<HzDevice>(env, std::make_shared<Tenant>(spec), "/run/" + tenant);
    dev->OnConnect(thread);
    for (uint16_t i = 0; i < dev->NumQueues(); ++i) {
      queues.push_back(std::make_unique<FakeQueue>(i));
      dev->OnQueueStarted(*queues.back());
    }
  }
  // Posts c on queue q (on the connection thread).
  void Submit(uint16_t q, const vdev::Chain& c) {
    queues[q]->avail.push_back(c);
    dev->OnKick(*queues[q]);
  }
  bool Answered(uint16_t q, size_t n) const { return queues[q]->used.size() >= n; }

  std::unique_ptr<HzDevice> dev;
  std::vector<std::unique_ptr<FakeQueue>> queues;
};

class ServiceEventAck : public ::testing::Test {
 protected:
  void SetUp() override {
    events::BusOptions o;
    o.dir = dir_;
    o.fsync = events::FsyncPolicy::kNone;
    o.write_state = [this](const std::string& path, const std::string& contents, bool sync) {
      return gate_.Write(path, contents, sync);
    };
    ASSERT_TRUE(events::EventBus::Open(o, &bus_).ok());
    adapter_ = std::make_unique<BusAdapter>(*bus_);
  }
  void TearDown() override {
    gate_.Release();  // whatever the test did, nothing stays held
    thread_.Run([this] {
      a_.reset();
      b_.reset();
    });
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  DeviceEnv Env() {
    DeviceEnv env;
    env.draining = &draining_;
    env.events = adapter_.get();
    env.provider = &provider_;
    return env;
  }

  vdev::Chain Hello(Vm& vm) {
    hz_hello_args a{};
    a.version_major = HZ_VERSION_MAJOR;
    a.driver_features = ~0ull;
    vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_HELLO, a, 1), 64 + sizeof(hz_status));
    vm.Submit(HZ_VQ_CONTROL, c);
    return c;
  }

  std::string dir_ = [] {
    std::string t =
        std::string(getenv("TMPDIR") != nullptr ? getenv("TMPDIR") : "/tmp") + "/hz-svc-ack-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) abort();
    return t;
  }();
  hz::events::testing::StateWrites gate_;
  std::unique_ptr<events::EventBus> bus_;
  std::unique_ptr<BusAdapter> adapter_;
  testing::FakeProviderBackend provider_;
  std::atomic<bool> draining_{false};
  GuestRam ram_{4 << 20};
  ChainBuilder cb_{&ram_};
  ConnectionThread thread_{ram_.map()};
  std::unique_ptr<Vm> a_, b_;
};

TEST_F(ServiceEventAck, AnAckWaitingForItsWriteDoesNotHoldUpTheConnectionThread) {
  const TenantId ta("ta");
  uint64_t seq = 0;
  ASSERT_TRUE(bus_->Publish(ta, events::EventSpec{}, &seq).ok());
  vdev::Chain sub, ack;
  ASSERT_TRUE(thread_.Run([&] {
    a_ = std::make_unique<Vm>(Env(), "ta", thread_);
    b_ = std::make_unique<Vm>(Env(), "tb", thread_);
    Hello(*a_);
    hz_event_subscribe_args s{HZ_TOPIC_ALL, HZ_SEQ_CURSOR};
    sub = cb_.Make(RequestBytes(HZ_OP_EVENT_SUBSCRIBE, s, 2), 64 + sizeof(hz_status));
    a_->Submit(HZ_VQ_CONTROL, sub);
    a_->Submit(HZ_VQ_EVENT, cb_.Make({}, sizeof(hz_event)));  // the event is delivered
  }));
  ASSERT_EQ(StatusOf(sub).status, HZ_S_OK);

  // The ack's cursor write is held: the ack must wait for it.
  gate_.Hold();
  hz_event_ack_args args{};
  args.seq = seq;
  ack = cb_.Make(RequestBytes(HZ_OP_EVENT_ACK, args, 3), sizeof(hz_status));
  thread_.Post([&] { a_->Submit(HZ_VQ_CONTROL, ack); });
  ASSERT_TRUE(gate_.WaitHeld());

  // Meanwhile another tenant's VM on the same connection thread is served.
  vdev::Chain topo;
  bool answered = false;
  bool ran = thread_.Run([&] {
    Hello(*b_);
    topo = cb_.Make(HeaderOnly(HZ_OP_TOPOLOGY_GET, 4), 64 + sizeof(hz_status));
    b_->Submit(HZ_VQ_CONTROL, topo);
    answered = b_->Answered(HZ_VQ_CONTROL, 2);
  });
  if (!ran) {
    ADD_FAILURE() << "the connection thread waited for an EVENT_ACK's cursor write";
    gate_.Release();
    ASSERT_TRUE(thread_.Run([] {}));  // the work posted above has run
    return;
  }
  EXPECT_TRUE(answered);
  EXPECT_EQ(StatusOf(topo).status, HZ_S_OK);
  bool ack_answered = true;
  ASSERT_TRUE(thread_.Run([&] { ack_answered = a_->Answered(HZ_VQ_CONTROL, 3); }));
  EXPECT_FALSE(ack_answered) << "the ack was answered before its cursor was written";

  // Once written, the ack is answered, and the cursor is on disk.
  gate_.Release();
  bool done = false;
  for (int i = 0; i < 1000 && !done; ++i) {
    ASSERT_TRUE(thread_.Run([&] { done = a_->Answered(HZ_VQ_CONTROL, 3); }));
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(StatusOf(ack).status, HZ_S_OK);
  EXPECT_GE(gate_.writes(), 1);
  StatusOr<std::string> state = ReadFile(dir_ + "/ta/state.json");
  ASSERT_TRUE(state.ok());
  EXPECT_NE(state->find("\"cursor\":" + std::to_string(seq)), std::string::npos) << *state;
}

}  // namespace
}  // namespace hz::service
