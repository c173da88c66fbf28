// Live upgrade of the vhost-user back-end (vdev/upgrade.h): a front-end keeps
// its connection, memory, rings and device state while the process serving it
// changes, in this process (two servers handing over through the real
// channel) and across processes (vdev-echo-backend upgraded by SIGUSR2).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "backend_harness.h"
#include "echo_client.h"
#include "echo_factory.h"
#include "raw_vhost.h"
#include "vdev/handoff.h"
#include "vdev/session_snapshot.h"
#include "vdev/upgrade.h"

#ifndef VDEV_HANDOFF_SHIM_PATH
#error "VDEV_HANDOFF_SHIM_PATH must name the test successor program"
#endif

namespace vdev::frontend {
namespace {

using vdev::testing::TempSocketPath;

// A device that keeps the buffers of queue 0, as an event queue does, and
// fills the oldest with its name whenever a request on queue 1 (echoed)
// arrives. A live upgrade hands the kept buffers back (Queue::Return).
class KeepingDevice final : public Device {
 public:
  explicit KeepingDevice(std::string name) : name_(std::move(name)) {}
  uint64_t Features() const override { return vu::kFRingEventIdx; }
  uint16_t NumQueues() const override { return 2; }
  std::vector<uint8_t> ConfigSpace() const override { return {}; }
  void OnQueueStarted(Queue& queue) override {
    if (queue.index() == 0) events_ = &queue;
  }
  void OnQueueStopped(uint16_t index) override {
    if (index == 0) {
      events_ = nullptr;
      kept_.clear();
    }
  }
  void OnQueueFreezing(Queue& queue) override {
    if (queue.index() != 0) return;
    for (const Chain& c : kept_) queue.Return(c);
    kept_.clear();
  }
  void OnKick(Queue& queue) override {
    Chain c;
    while (queue.Pop(&c)) {
      if (queue.index() == 0) {
        kept_.push_back(c);
        continue;
      }
      if (events_ != nullptr && !kept_.empty()) {
        const Chain& event = kept_.front();
        events_->Complete(event, static_cast<uint32_t>(event.Write(0, name_.data(), name_.size())));
        events_->Flush();
        kept_.pop_front();
      }
      queue.Complete(c, static_cast<uint32_t>(EchoChain(c)));
    }
    queue.Flush();
  }

 private:
  const std::string name_;
  Queue* events_ = nullptr;
  std::deque<Chain> kept_;
};

// One server on its own io_context thread, remembering its echo devices.
class EchoServer {
 public:
  using MakeDevice = std::function<std::unique_ptr<Device>()>;
  explicit EchoServer(const std::string& path, MakeDevice make = nullptr)
      : work_(io_.get_executor()),
        server_(io_, path, [this, make](const std::string&) -> std::unique_ptr<Device> {
          if (make) return make();
          auto d = std::make_unique<EchoDevice>(vdev::testing::EchoOptions());
          device_ = d.get();
          return d;
        }) {}
  ~EchoServer() {
    if (thread_.joinable()) {
      std::promise<void> stopped;
      boost::asio::post(io_, [&] {
        server_.Stop();
        stopped.set_value();
      });
      stopped.get_future().wait();
      work_.reset();
      std::this_thread::sleep_for(20ms);
      io_.stop();
      thread_.join();
    }
  }
  void Run() {
    thread_ = std::thread([this] { io_.run(); });
  }
  Server& server() { return server_; }
  // Chains the device of the current connection echoed (0 before one). Not
  // after the connection was handed over: the device is gone then.
  uint64_t chains() const {
    EchoDevice* d = device_.load();
    return d == nullptr ? 0 : d->chains();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::atomic<EchoDevice*> device_{nullptr};
  Server server_;
  std::thread thread_;
};

// Hands `from` over to `to` the way HandOver does, through a real channel,
// and returns the error (empty on success).
std::string HandOverInProcess(EchoServer& from, EchoServer& to) {
  if (Error e = from.server().Freeze(2000ms); !e.empty()) return e;
  SnapshotFds fds;
  Snapshot snapshot;
  snapshot.servers.emplace_back();
  if (Error e = from.server().Export(&snapshot.servers.back(), &fds); !e.empty()) return e;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return "socketpair";
  UniqueFd a(pair[0]), b(pair[1]);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  const std::vector<int> raw = fds.raw();
  auto sent = std::async(std::launch::async, [&] {
    return SendHandoff(a.get(), HandoffKind::kState, EncodeSnapshot(snapshot), raw, deadline);
  });
  HandoffMessage msg;
  std::string e = ReceiveHandoff(b.get(), HandoffKind::kState, &msg, deadline);
  if (std::string s = sent.get(); !s.empty()) return s;
  if (!e.empty()) return e;
  Snapshot decoded;
  if (e = DecodeSnapshot(msg.payload, msg.fds.size(), &decoded); !e.empty()) return e;
  auto shared = std::make_shared<std::vector<UniqueFd>>(std::move(msg.fds));
  std::promise<Error> restored;
  if (!to.server().StartFrom(
          decoded.servers[0], shared, [&](const Error& why) { restored.set_value(why); }, &e)) {
    return e;
  }
  to.Run();
  if (e = restored.get_future().get(); !e.empty()) return e;
  from.server().Abandon();
  return {};
}

TEST(LiveUpgrade, AFrontEndKeepsItsDeviceAndRingsAcrossAHandOver) {
  const std::string path = TempSocketPath("upgrade");
  EchoServer old_server(path), new_server(path);
  std::string error;
  ASSERT_TRUE(old_server.server().Start(&error)) << error;
  old_server.Run();

  VirtioUser dev;
  ASSERT_TRUE(dev.Connect(path, DefaultOptions()).ok());
  for (uint32_t i = 0; i < 40; ++i) {
    ASSERT_EQ(EchoOnce(dev, static_cast<uint16_t>(i % dev.num_queues()), i), "");
  }

  ASSERT_EQ(old_server.server().Freeze(2000ms), "");
  // Posted while frozen: not served by the old process, and not lost.
  uint64_t in_gpa = 0, out_gpa = 0;
  auto* in = static_cast<uint8_t*>(dev.Allocate(256, &in_gpa));
  auto* out = static_cast<uint8_t*>(dev.Allocate(256, &out_gpa));
  const std::vector<uint8_t> pattern = Pattern(777, 256);
  std::memcpy(in, pattern.data(), 256);
  Buffer r{in_gpa, 256}, w{out_gpa, 256};
  ASSERT_TRUE(dev.AddChain(1, {&r, 1}, {&w, 1}, 777).ok());
  ASSERT_TRUE(dev.Kick(1).ok());
  Completion c{};
  size_t n = 0;
  EXPECT_FALSE(dev.WaitUsed(1, 200ms, &c, 1, &n).ok()) << "a frozen back-end served a request";
  EXPECT_EQ(old_server.chains(), 40u);
  old_server.server().Thaw();  // HandOverInProcess freezes again

  // The thaw served it; post another one for the successor to find.
  ASSERT_TRUE(dev.WaitUsed(1, kWait, &c, 1, &n).ok());
  ASSERT_EQ(c.cookie, 777u);
  ASSERT_EQ(old_server.server().Freeze(2000ms), "");
  std::memset(out, 0, 256);
  ASSERT_TRUE(dev.AddChain(2, {&r, 1}, {&w, 1}, 778).ok());
  ASSERT_TRUE(dev.Kick(2).ok());

  ASSERT_EQ(HandOverInProcess(old_server, new_server), "");
  ASSERT_TRUE(dev.WaitUsed(2, kWait, &c, 1, &n).ok());
  EXPECT_EQ(c.cookie, 778u);
  EXPECT_EQ(c.len, 256u);
  EXPECT_EQ(std::memcmp(out, pattern.data(), 256), 0);
  for (uint32_t i = 0; i < 200; ++i) {
    ASSERT_EQ(EchoOnce(dev, static_cast<uint16_t>(i % dev.num_queues()), 1000 + i), "");
  }
  // Each request completes once, so the successor serving all 201 means the
  // old server served none of them.
  EXPECT_EQ(new_server.chains(), 201u);
  EXPECT_TRUE(new_server.server().connected());
  // Control messages reach the successor too: stopping asks for each ring's
  // base, which only it knows.
  EXPECT_TRUE(dev.Stop().ok());
}

TEST(LiveUpgrade, APartlySentMessageAndTheDevicesStateCarryOver) {
  const std::string path = TempSocketPath("upgrade-raw");
  EchoServer old_server(path), new_server(path);
  std::string error;
  ASSERT_TRUE(old_server.server().Start(&error)) << error;
  old_server.Run();

  vdev::testing::RawConn conn;
  ASSERT_TRUE(conn.Connect(path));
  uint64_t features = 0;
  ASSERT_TRUE(conn.GetU64(vu::kGetFeatures, &features));
  ASSERT_TRUE(conn.SendU64(vu::kSetFeatures, features));
  uint64_t protocol = 0;
  ASSERT_TRUE(conn.GetU64(vu::kGetProtocolFeatures, &protocol));
  ASSERT_TRUE(conn.SendU64(vu::kSetProtocolFeatures, protocol));
  // The driver writes config bytes 8..11: the echo device's state.
  struct {
    vu::ConfigHeader h;
    uint8_t data[4];
  } set{{8, 4, 0}, {0xde, 0xad, 0xbe, 0xef}};
  EXPECT_EQ(conn.Acked(vu::kSetConfig, &set, sizeof(set)), 0u);

  // Half of a GET_CONFIG header goes to the old process, the rest and the
  // payload to the new one.
  struct {
    vu::Header h;
    vu::ConfigHeader c;
    uint8_t data[4];
  } get{{vu::kGetConfig, vu::kVersion, sizeof(vu::ConfigHeader) + 4}, {8, 4, 0}, {}};
  const auto* bytes = reinterpret_cast<const uint8_t*>(&get);
  ASSERT_TRUE(conn.SendBytes(bytes, 6));
  std::this_thread::sleep_for(50ms);  // let the old process read it
  ASSERT_EQ(HandOverInProcess(old_server, new_server), "");
  ASSERT_TRUE(conn.SendBytes(bytes + 6, sizeof(get) - 6));
  vdev::testing::RawReply reply;
  ASSERT_EQ(conn.Recv(&reply), vdev::testing::Got::kReply);
  ASSERT_EQ(reply.hdr.request, vu::kGetConfig);
  ASSERT_EQ(reply.payload.size(), sizeof(vu::ConfigHeader) + 4);
  EXPECT_EQ(std::memcmp(reply.payload.data() + sizeof(vu::ConfigHeader), set.data, 4), 0);
}

// Posts a writable-only buffer on queue 0 (kept by KeepingDevice).
void PostEventBuffer(VirtioUser& dev, uint64_t cookie, uint64_t* gpa) {
  ASSERT_NE(dev.Allocate(64, gpa), nullptr);
  Buffer w{*gpa, 64};
  ASSERT_TRUE(dev.AddChain(0, {}, {&w, 1}, cookie).ok());
  ASSERT_TRUE(dev.Kick(0).ok());
}

// Sends one request on queue 1 and returns what the event buffer it
// releases says.
std::string NextEvent(VirtioUser& dev, uint64_t expected_cookie, uint64_t event_gpa) {
  if (std::string e = EchoOnce(dev, 1, static_cast<uint32_t>(expected_cookie)); !e.empty()) {
    return e;
  }
  Completion c{};
  size_t n = 0;
  if (Status s = dev.WaitUsed(0, kWait, &c, 1, &n); !s.ok()) return s.ToString();
  if (c.cookie != expected_cookie) return "event buffer " + std::to_string(c.cookie);
  const uint8_t* bytes = dev.memory().Translate(event_gpa, c.len);
  if (bytes == nullptr) return "event buffer outside guest memory";
  return "got:" + std::string(reinterpret_cast<const char*>(bytes), c.len);
}

TEST(LiveUpgrade, BuffersTheDeviceKeepsAreHandedBackAndServedByTheSuccessor) {
  const std::string path = TempSocketPath("upgrade-keep");
  EchoServer old_server(path, [] { return std::make_unique<KeepingDevice>("old"); });
  EchoServer new_server(path, [] { return std::make_unique<KeepingDevice>("new"); });
  std::string error;
  ASSERT_TRUE(old_server.server().Start(&error)) << error;
  old_server.Run();
  VirtioUser dev;
  ASSERT_TRUE(dev.Connect(path, DefaultOptions()).ok());
  uint64_t gpa[4];
  for (uint64_t i = 0; i < 4; ++i) PostEventBuffer(dev, 100 + i, &gpa[i]);
  ASSERT_EQ(NextEvent(dev, 100, gpa[0]), "got:old");

  // A hand-over that does not happen: the old device keeps them again.
  ASSERT_EQ(old_server.server().Freeze(2000ms), "");
  old_server.server().Thaw();
  ASSERT_EQ(NextEvent(dev, 101, gpa[1]), "got:old");

  ASSERT_EQ(HandOverInProcess(old_server, new_server), "");
  ASSERT_EQ(NextEvent(dev, 102, gpa[2]), "got:new");
  ASSERT_EQ(NextEvent(dev, 103, gpa[3]), "got:new");
  EXPECT_TRUE(dev.Stop().ok());
}

// --- Across processes ------------------------------------------------------

using vdev::testing::UpgradableBackend;

TEST(LiveUpgrade, TheEchoBackendIsUpgradedTwentyTimesUnderLoadWithoutLosingARequest) {
  const std::string path = TempSocketPath("upgrade-child");
  UpgradableBackend backend(path, {});
  VirtioUser dev;
  ASSERT_TRUE(ConnectRetry(dev, path, DefaultOptions()).ok());

  // Every upgrade makes a new process; the front-end never reconnects.
  EXPECT_EQ(EchoThroughReplacements(dev, backend.pid(), 20,
                                    [&](std::string* error) -> pid_t {
                                      *error = backend.Upgrade();
                                      return error->empty() ? backend.pid() : -1;
                                    }),
            "");
  EXPECT_TRUE(dev.Stop().ok());
}

// A successor that does not take over leaves the old process serving.
TEST(LiveUpgrade, AFailedUpgradeLeavesTheOldProcessServing) {
  const std::string path = TempSocketPath("upgrade-refused");
  const std::string mode_file = path + ".mode";
  const std::string done_file = path + ".done";
  setenv("VDEV_HANDOFF_SHIM_MODE_FILE", mode_file.c_str(), 1);
  setenv("VDEV_HANDOFF_SHIM_DONE_FILE", done_file.c_str(), 1);
  UpgradableBackend backend(path, {"--upgrade-binary", VDEV_HANDOFF_SHIM_PATH});
  VirtioUser dev;
  ASSERT_TRUE(ConnectRetry(dev, path, DefaultOptions()).ok());
  const pid_t original = backend.pid();
  uint32_t tag = 0;
  for (const char* mode : {"newer-version", "refuse", "vanish"}) {
    SCOPED_TRACE(mode);
    std::ofstream(mode_file) << mode;
    unlink(done_file.c_str());
    kill(original, SIGUSR2);
    // The shim marks when it is done; the old process then thaws.
    for (int i = 0; i < 2000 && access(done_file.c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_EQ(access(done_file.c_str(), F_OK), 0) << "the successor never ran";
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(EchoOnce(dev, static_cast<uint16_t>(i % dev.num_queues()), ++tag), "");
    }
    EXPECT_EQ(kill(original, 0), 0) << "the old process is gone";
  }
  // And the next upgrade, to a real successor, works.
  std::ofstream(mode_file) << "exec";
  ASSERT_EQ(backend.Upgrade(), "");
  EXPECT_NE(backend.pid(), original);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(EchoOnce(dev, static_cast<uint16_t>(i % dev.num_queues()), ++tag), "");
  }
  unsetenv("VDEV_HANDOFF_SHIM_MODE_FILE");
  unsetenv("VDEV_HANDOFF_SHIM_DONE_FILE");
  unlink(mode_file.c_str());
  unlink(done_file.c_str());
}

}  // namespace
}  // namespace vdev::frontend
