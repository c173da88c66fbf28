#include "vdev/server.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "session_util.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"
#include "test_util.h"

namespace vdev {
namespace {

using namespace vdev::testing;  // NOLINT

// Generous: only there to turn a hang into a failure.
constexpr int kHangMs = 10000;

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// A front-end speaking raw vhost-user over a Unix socket.
class RawClient {
 public:
  explicit RawClient(int fd) : fd_(fd) {}
  static RawClient Connect(const std::string& path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    for (int i = 0; i < 500; ++i) {  // the server may still be starting
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return RawClient(fd);
  }
  RawClient(RawClient&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }

  bool SendBytes(const void* data, size_t n, const std::vector<int>& fds = {}) {
    iovec iov{const_cast<void*>(data), n};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
    if (!fds.empty()) {
      mh.msg_control = control.data();
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return sendmsg(fd_, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  bool Send(const Message& m) {
    std::vector<int> fds;
    for (const auto& f : m.fds) fds.push_back(f.get());
    std::vector<uint8_t> bytes(sizeof(vu::Header) + m.header.size);
    std::memcpy(bytes.data(), &m.header, sizeof(vu::Header));
    std::memcpy(bytes.data() + sizeof(vu::Header), m.payload, m.header.size);
    return SendBytes(bytes.data(), bytes.size(), fds);
  }
  // Reads one reply; header.request == 0 on timeout or EOF.
  ParsedReply Recv() {
    ParsedReply r;
    vu::Header h{};
    if (!ReadExact(&h, sizeof(h))) return r;
    r.header = h;
    r.payload.resize(h.size);
    if (h.size && !ReadExact(r.payload.data(), h.size)) r.header.request = 0;
    return r;
  }
  ParsedReply Call(const Message& m) {
    EXPECT_TRUE(Send(m));
    return Recv();
  }
  // True when the server closed its end (EOF) within the hang deadline.
  bool Closed() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kHangMs) <= 0) return false;
    char c;
    // Unread bytes on the server's side turn its close into a reset.
    ssize_t got = recv(fd_, &c, 1, MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno == ECONNRESET);
  }
  int fd() const { return fd_; }

 private:
  bool ReadExact(void* dst, size_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      pollfd pf{fd_, POLLIN, 0};
      if (poll(&pf, 1, kHangMs) <= 0) return false;
      ssize_t got = recv(fd_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  int fd_;
};

// Serves RecordingDevices on a temporary socket with the io_context on a thread.
class VdevServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vdev-server-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/vu.sock";
  }
  void TearDown() override {
    StopAll();
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  Server& StartServer(const std::string& path, ServerOptions options = {}) {
    servers_.push_back(std::make_unique<Server>(
        io_, path,
        [this](const std::string&) {
          auto d = std::make_unique<RecordingDevice>();
          devices_.push_back(d.get());
          return d;
        },
        options));
    std::string error;
    EXPECT_TRUE(servers_.back()->Start(&error)) << error;
    if (!thread_.joinable()) thread_ = std::thread([this] { io_.run(); });
    return *servers_.back();
  }
  void StopAll() {
    if (!thread_.joinable()) {  // the io_context never ran
      servers_.clear();
      return;
    }
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      for (auto& s : servers_) s->Stop();
      done.set_value();
    });
    done.get_future().wait();
    work_.reset();
    if (thread_.joinable()) thread_.join();
    servers_.clear();
  }
  // Runs fn on the io thread and waits (server state is touched there).
  template <typename F>
  auto OnIo(F fn) {
    std::promise<decltype(fn())> p;
    boost::asio::post(io_, [&] { p.set_value(fn()); });
    return p.get_future().get();
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::thread thread_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<RecordingDevice*> devices_;  // touched on the io thread only while running
  std::string dir_, path_;
};

// Negotiates like QEMU and brings up queue 0 of guest RAM in guest.
void Bringup(RawClient& c, SimpleGuest& guest, int kick, int call) {
  ParsedReply r = c.Call(Msg0(vu::kGetFeatures));
  ASSERT_EQ(r.header.flags, vu::kReplyFlags);
  uint64_t features = r.u64();
  r = c.Call(Msg0(vu::kGetProtocolFeatures));
  uint64_t protocol = r.u64();
  ASSERT_TRUE(protocol & (1ull << vu::kPfReplyAck));
  ASSERT_TRUE(c.Send(Msg(vu::kSetProtocolFeatures, protocol)));
  auto ack = [&](Message m) {
    ParsedReply a = c.Call(m);
    EXPECT_EQ(a.header.flags, vu::kReplyFlags) << RequestName(m.request());
    EXPECT_EQ(a.header.request, m.request());
    EXPECT_EQ(a.header.size, 8u);
    EXPECT_EQ(a.u64(), 0u) << RequestName(m.request());
  };
  ack(Msg0(vu::kSetOwner, true));
  ack(Msg(vu::kSetFeatures, features, true));
  uint8_t table[8 + sizeof(vu::MemRegion)] = {};
  uint32_t n = 1;
  vu::MemRegion reg{kGpaBase, guest.ram.size(), kGpaBase + kUvaDelta, 0};
  std::memcpy(table, &n, 4);
  std::memcpy(table + 8, &reg, sizeof(reg));
  Message mt = Msg(vu::kSetMemTable, table, true);
  mt.fds.emplace_back(dup(guest.ram.fd()));
  ack(std::move(mt));
  ack(Msg(vu::kSetVringNum, vu::VringState{0, 8}, true));
  ack(Msg(vu::kSetVringBase, vu::VringState{0, 0}, true));
  ack(Msg(vu::kSetVringAddr,
          vu::VringAddr{0, 0, kGpaBase + kUvaDelta, kGpaBase + 0x2000 + kUvaDelta,
                        kGpaBase + 0x1000 + kUvaDelta, 0},
          true));
  Message mk = Msg(vu::kSetVringKick, uint64_t{0}, true);
  mk.fds.emplace_back(dup(kick));
  ack(std::move(mk));
  Message mc = Msg(vu::kSetVringCall, uint64_t{0}, true);
  mc.fds.emplace_back(dup(call));
  ack(std::move(mc));
  ack(Msg(vu::kSetVringEnable, vu::VringState{0, 1}, true));
}

bool WaitCall(int call) {
  pollfd p{call, POLLIN, 0};
  if (poll(&p, 1, kHangMs) != 1) return false;
  uint64_t v;
  return read(call, &v, sizeof(v)) == sizeof(v);
}

TEST_F(VdevServerTest, EchoRoundTripsThroughKickAndCallEventfds) {
  StartServer(path_);
  RawClient c = RawClient::Connect(path_);
  SimpleGuest guest;
  int kick = eventfd(0, EFD_CLOEXEC);
  int call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Bringup(c, guest, kick, call);
  RingDriver ring(&guest, 8, kGpaBase, kGpaBase + 0x1000, kGpaBase + 0x2000);
  for (uint16_t round = 0; round < 50; ++round) {
    uint64_t buf = kGpaBase + 0x10000;
    uint32_t value = 0xc0de0000u + round;
    std::memcpy(guest.host(buf), &value, 4);
    ring.SetDesc(0, buf, 4, 1, 1);
    ring.SetDesc(1, buf + 0x100, 4, 2, 0);
    ring.Publish(0);
    // EVENT_IDX is negotiated: ask for an interrupt when this entry is used,
    // as a driver waiting for it does.
    ring.set_used_event(round);
    uint64_t one = 1;
    ASSERT_EQ(write(kick, &one, 8), 8);
    ASSERT_TRUE(WaitCall(call)) << "round " << round;
    ASSERT_EQ(ring.used_idx(), round + 1);
    uint32_t echoed;
    std::memcpy(&echoed, guest.host(buf + 0x100), 4);
    EXPECT_EQ(echoed, value);
  }
  // GET_VRING_BASE over the wire.
  ParsedReply r = c.Call(Msg(vu::kGetVringBase, vu::VringState{0, 0}));
  ASSERT_EQ(r.header.size, 8u);
  vu::VringState st;
  std::memcpy(&st, r.payload.data(), 8);
  EXPECT_EQ(st.num, 50u);
  close(kick);
  close(call);
}

TEST_F(VdevServerTest, BusyPollServesWithoutKicks) {
  ServerOptions options;
  options.session.busy_poll = true;
  StartServer(path_, options);
  RawClient c = RawClient::Connect(path_);
  SimpleGuest guest;
  int kick = eventfd(0, EFD_CLOEXEC);
  int call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Bringup(c, guest, kick, call);
  RingDriver ring(&guest, 8, kGpaBase, kGpaBase + 0x1000, kGpaBase + 0x2000);
  ring.SetDesc(0, kGpaBase + 0x10000, 4, 2, 0);
  ring.Publish(0);  // no kick written
  ASSERT_TRUE(WaitCall(call));
  EXPECT_EQ(ring.used_idx(), 1);
  close(kick);
  close(call);
}

// A device that completes a request on the spot posts the completion to
// its connection (DeviceContext::Post), after something else was queued on
// the io_context. Returns the device's events from then on.
std::vector<std::string> CompleteByPost(boost::asio::io_context& io, RecordingDevice* device,
                                        int kick, int call, SimpleGuest& guest) {
  RingDriver ring(&guest, 8, kGpaBase, kGpaBase + 0x1000, kGpaBase + 0x2000);
  std::promise<void> set;
  boost::asio::post(io, [&] {
    device->events.clear();
    device->complete_by_post = true;
    device->before_post = [&io, device] {
      boost::asio::post(io, [device] { device->events.push_back("queued"); });
    };
    set.set_value();
  });
  set.get_future().wait();
  ring.SetDesc(0, kGpaBase + 0x10000, 4, 1, 1);
  ring.SetDesc(1, kGpaBase + 0x10100, 4, 2, 0);
  ring.Publish(0);
  ring.set_used_event(0);
  uint64_t one = 1;
  EXPECT_EQ(write(kick, &one, 8), 8);
  EXPECT_TRUE(WaitCall(call));
  EXPECT_EQ(ring.used_idx(), 1);
  std::promise<std::vector<std::string>> events;
  boost::asio::post(io, [&] { events.set_value(device->events); });
  return events.get_future().get();
}

TEST_F(VdevServerTest, OneThreadIoRunsAHandlersCompletionAsTheHandlerEnds) {
  for (bool one_thread_io : {true, false}) {
    SCOPED_TRACE(one_thread_io ? "one_thread_io" : "default");
    ServerOptions options;
    options.one_thread_io = one_thread_io;  // io_ runs on thread_ alone
    const std::string path = dir_ + (one_thread_io ? "/one.sock" : "/default.sock");
    StartServer(path, options);
    RawClient c = RawClient::Connect(path);
    SimpleGuest guest;
    int kick = eventfd(0, EFD_CLOEXEC);
    int call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    Bringup(c, guest, kick, call);
    RecordingDevice* device = OnIo([this] { return devices_.back(); });
    // By default the completion waits behind what the io_context queued.
    const std::vector<std::string> expected = one_thread_io
                                                  ? std::vector<std::string>{"completed", "queued"}
                                                  : std::vector<std::string>{"queued", "completed"};
    EXPECT_EQ(CompleteByPost(io_, device, kick, call, guest), expected);
    close(kick);
    close(call);
    unlink(path.c_str());
  }
}

TEST_F(VdevServerTest, SecondConnectionIsRefusedAndTheFirstKeepsWorking) {
  Server& server = StartServer(path_);
  RawClient a = RawClient::Connect(path_);
  ASSERT_EQ(a.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
  RawClient b = RawClient::Connect(path_);
  EXPECT_TRUE(b.Closed());
  ASSERT_EQ(a.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
  EXPECT_EQ(OnIo([&] { return server.connections(); }), 1u);
  // Once the first goes away, a new front-end is accepted.
  { RawClient gone = std::move(a); }
  for (int i = 0; i < 1000 && OnIo([&] { return server.connected(); }); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RawClient c = RawClient::Connect(path_);
  EXPECT_EQ(c.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
}

// A front-end that reconnects at once is taken on no sooner than
// min_connect_interval after the one before, not refused: it waits.
TEST_F(VdevServerTest, ReconnectsArePacedNotRefused) {
  ServerOptions o;
  o.min_connect_interval = std::chrono::milliseconds(300);
  Server& server = StartServer(path_, o);
  const auto start = std::chrono::steady_clock::now();  // before the first is admitted
  {
    RawClient a = RawClient::Connect(path_);
    ASSERT_EQ(a.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
  }
  for (int i = 0; i < 1000 && OnIo([&] { return server.connected(); }); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RawClient b = RawClient::Connect(path_);
  ASSERT_EQ(b.Call(Msg0(vu::kGetQueueNum)).u64(), 2u) << "served once due";
  EXPECT_GE(std::chrono::steady_clock::now() - start, o.min_connect_interval);
  EXPECT_EQ(OnIo([&] { return server.connections(); }), 2u);
}

TEST_F(VdevServerTest, MalformedStreamsDisconnectCleanly) {
  StartServer(path_);
  struct Case {
    const char* name;
    vu::Header h;
  } cases[] = {
      {"oversized payload", {vu::kSetOwner, vu::kVersion, 100000}},
      {"bad version", {vu::kGetFeatures, 0x2, 0}},
      {"reply flag", {vu::kGetFeatures, vu::kReplyFlags, 0}},
      {"unknown request", {77, vu::kVersion, 0}},
      {"wrong payload size", {vu::kSetFeatures, vu::kVersion, 4}},
  };
  for (const Case& k : cases) {
    RawClient c = RawClient::Connect(path_);
    uint8_t bytes[sizeof(vu::Header) + 8] = {};
    std::memcpy(bytes, &k.h, sizeof(k.h));
    ASSERT_TRUE(c.SendBytes(bytes, sizeof(vu::Header) + std::min<uint32_t>(k.h.size, 8))) << k.name;
    EXPECT_TRUE(c.Closed()) << k.name;
  }
  // The server still serves a well-behaved front-end afterwards.
  RawClient ok = RawClient::Connect(path_);
  EXPECT_EQ(ok.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
}

TEST_F(VdevServerTest, ExcessFdsAreClosedAndTheConnectionDropped) {
  StartServer(path_);
  RawClient warm = RawClient::Connect(path_);
  ASSERT_EQ(warm.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);  // server fully set up
  { RawClient gone = std::move(warm); }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int before = CountOpenFds();
  {
    RawClient c = RawClient::Connect(path_);
    std::vector<int> fds;
    for (int i = 0; i < 12; ++i) fds.push_back(eventfd(0, EFD_CLOEXEC));
    vu::Header h{vu::kSetOwner, vu::kVersion, 0};
    ASSERT_TRUE(c.SendBytes(&h, sizeof(h), fds));
    for (int fd : fds) close(fd);
    EXPECT_TRUE(c.Closed());
  }
  {
    // An unexpected fd on a message that takes none (with NEED_REPLY): refused, fd closed.
    RawClient c = RawClient::Connect(path_);
    Message m = Msg0(vu::kGetQueueNum);
    int fd = eventfd(0, EFD_CLOEXEC);
    m.fds.emplace_back(fd);
    ASSERT_TRUE(c.Send(m));
    EXPECT_TRUE(c.Closed());  // GET_* cannot carry an error: disconnect
  }
  for (int i = 0; i < 200 && CountOpenFds() != before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(CountOpenFds(), before);
}

TEST_F(VdevServerTest, MessagesSplitAcrossWritesAreReassembled) {
  StartServer(path_);
  RawClient c = RawClient::Connect(path_);
  vu::Header h{vu::kSetFeatures, vu::kVersion | vu::kFlagNeedReply, 8};
  uint64_t features = vu::kFVersion1;
  uint8_t bytes[20];
  std::memcpy(bytes, &h, 12);
  std::memcpy(bytes + 12, &features, 8);
  for (size_t off : {0, 5, 11, 13}) {
    size_t end = off == 13 ? 20 : (off == 0 ? 5 : (off == 5 ? 11 : 13));
    ASSERT_TRUE(c.SendBytes(bytes + off, end - off));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ParsedReply r = c.Recv();
  EXPECT_EQ(r.header.request, vu::kSetFeatures);
  EXPECT_EQ(r.header.flags, vu::kReplyFlags);
  EXPECT_EQ(r.u64(), 0u);
}

TEST_F(VdevServerTest, OneConnectionFailingLeavesAnotherServerAlone) {
  std::string other = dir_ + "/other.sock";
  StartServer(path_);
  StartServer(other);
  RawClient good = RawClient::Connect(other);
  RawClient bad = RawClient::Connect(path_);
  ASSERT_EQ(good.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
  vu::Header h{vu::kSetOwner, 0x7, 0};
  ASSERT_TRUE(bad.SendBytes(&h, sizeof(h)));
  EXPECT_TRUE(bad.Closed());
  EXPECT_EQ(good.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
  unlink(other.c_str());
}

TEST_F(VdevServerTest, ConnectionsSharingATurnSchedulerServeEverything) {
  // Turns of one request each, so both rings are served in many turns that
  // wait for each other, and resumed through each connection's strand.
  ServerOptions options;
  options.session.queue_limits.max_chains_per_turn = 1;
  options.session.turn_scheduler = std::make_shared<TurnScheduler>();
  options.session.share_key = "a";
  options.session.share_weight = 2;
  std::string other = dir_ + "/other.sock";
  StartServer(path_, options);
  options.session.share_key = "b";
  options.session.share_weight = 1;
  StartServer(other, options);
  struct VmClient {
    explicit VmClient(const std::string& path)
        : c(RawClient::Connect(path)),
          ring(&guest, 8, kGpaBase, kGpaBase + 0x1000, kGpaBase + 0x2000) {}
    RawClient c;
    SimpleGuest guest;
    RingDriver ring;
    int kick = eventfd(0, EFD_CLOEXEC);
    int call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  };
  VmClient a(path_), b(other);
  for (VmClient* vm : {&a, &b}) {
    Bringup(vm->c, vm->guest, vm->kick, vm->call);
    for (uint16_t head = 0; head < 8; ++head) {
      vm->ring.SetDesc(head, kGpaBase + 0x10000 + 0x100ull * head, 4, 2, 0);
      vm->ring.Publish(head);
    }
  }
  uint64_t one = 1;
  ASSERT_EQ(write(a.kick, &one, 8), 8);
  ASSERT_EQ(write(b.kick, &one, 8), 8);
  // No further kick: the turns after the first are the scheduler's.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHangMs);
  for (VmClient* vm : {&a, &b}) {
    while (vm->ring.used_idx() != 8 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(vm->ring.used_idx(), 8);
    close(vm->kick);
    close(vm->call);
  }
  unlink(other.c_str());
}

TEST_F(VdevServerTest, ClientModeConnectsToAListeningFrontEnd) {
  int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ServerOptions options;
  options.mode = ServerOptions::Mode::kClient;
  options.reconnect_interval = std::chrono::milliseconds(20);
  StartServer(path_, options);
  pollfd p{listener, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, kHangMs), 1);
  RawClient c(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_EQ(c.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
  close(listener);
}

TEST_F(VdevServerTest, ReplacesAStaleSocketButNotALiveOne) {
  // Stale: bound, never listened on (what a crashed server leaves behind).
  int stale = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(stale, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(stale);
  Server& first = StartServer(path_);  // expects success
  Server second(io_, path_, [](const std::string&) { return std::make_unique<RecordingDevice>(); });
  std::string error;
  EXPECT_FALSE(second.Start(&error));
  EXPECT_NE(error.find("in use"), std::string::npos);
  // The probe was a (short) connection to the live server; let it go.
  for (int i = 0; i < 1000 && (OnIo([&] { return first.connections(); }) == 0 ||
                               OnIo([&] { return first.connected(); }));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RawClient c = RawClient::Connect(path_);
  EXPECT_EQ(c.Call(Msg0(vu::kGetQueueNum)).u64(), 2u);
}

TEST_F(VdevServerTest, RefusesToReplaceANonSocketFile) {
  FILE* f = fopen(path_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  Server s(io_, path_, [](const std::string&) { return std::make_unique<RecordingDevice>(); });
  std::string error;
  EXPECT_FALSE(s.Start(&error));
  EXPECT_NE(error.find("not a socket"), std::string::npos);
}

TEST_F(VdevServerTest, SocketIsOwnerOnlyByDefaultWhateverTheUmask) {
  mode_t old = umask(0);
  StartServer(path_);
  umask(old);
  struct stat st;
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// Counts the log lines about accepting, from any thread.
class AcceptLogCounter : public spdlog::sinks::base_sink<std::mutex> {
 public:
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find("accept") !=
        std::string_view::npos) {
      ++count_;
    }
  }
  void flush_() override {}

 private:
  size_t count_ = 0;
};

// Takes every descriptor the process may still open, until destroyed.
class DescriptorShortage {
 public:
  DescriptorShortage() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    int highest = 0;
    for (const auto& e : OpenFds()) highest = std::max(highest, e);
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(highest) + 16;
    setrlimit(RLIMIT_NOFILE, &low);
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) held_.push_back(fd);
    exhausted_ = errno == EMFILE;
  }
  ~DescriptorShortage() {
    for (int fd : held_) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  bool exhausted() const { return exhausted_; }

 private:
  static std::vector<int> OpenFds() {
    std::vector<int> fds;
    DIR* d = opendir("/proc/self/fd");
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') fds.push_back(std::atoi(e->d_name));
    }
    closedir(d);
    return fds;
  }
  rlimit saved_{};
  std::vector<int> held_;
  bool exhausted_ = false;
};

// A front-end that connects while the process is out of descriptors waits in
// the backlog: the server retries the accept with a growing delay (so it
// neither gives up on the socket nor spins and floods the log) and takes the
// front-end as soon as descriptors are free again.
TEST_F(VdevServerTest, AcceptWaitsOutADescriptorShortageWithoutSpinning) {
  auto log = std::make_shared<AcceptLogCounter>();
  std::shared_ptr<spdlog::logger> saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("accept-test", log));
  Server& server = StartServer(path_);
  int client = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  {
    DescriptorShortage shortage;
    ASSERT_TRUE(shortage.exhausted());
    ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    for (int i = 0; i < kHangMs && log->count() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(server.connections(), 0u);
    // Room for many retries: a spinning acceptor would log thousands of lines.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  for (int i = 0; i < kHangMs && server.connections() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(server.connections(), 1u);
  StopAll();
  spdlog::set_default_logger(saved);
  close(client);
  // One line when accepting starts failing, one when it works again.
  EXPECT_EQ(log->count(), 2u);
}

}  // namespace
}  // namespace vdev
