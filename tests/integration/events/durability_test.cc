// Durability of the event log across a SIGKILL: a child process appends
// events (and acknowledges some as a subscriber) and reports each append and
// ack to the parent only after the call returned. The parent kills it at an
// arbitrary point, reopens the log and checks that everything reported is
// there, intact, and that a torn tail is dropped while the log stays usable.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>

#include "hz/events/event_bus.h"
#include "hz/events/event_log.h"

namespace hz::events {
namespace {

namespace fs = std::filesystem;

struct Report {
  uint64_t type;  // 1: appended seq, 2: acknowledged cursor
  uint64_t value;
};

class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string t = std::string(base != nullptr ? base : "/tmp") + "/hz-events-dur-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) abort();
    path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The payload says which seq it belongs to, so corruption or misplacement shows.
EventSpec SpecFor(uint64_t n) {
  EventSpec spec;
  spec.topic = static_cast<uint16_t>(n % 9);
  spec.kind = static_cast<uint16_t>(n % 4);
  for (size_t i = 0; i < spec.payload.size(); ++i)
    spec.payload[i] = static_cast<uint8_t>(n * 31 + i);
  return spec;
}

[[noreturn]] void ChildAppends(const std::string& dir, FsyncPolicy policy, int out) {
  BusOptions o;
  o.dir = dir;
  o.retention = 1u << 20;
  o.fsync = policy;
  std::unique_ptr<EventBus> bus;
  if (!EventBus::Open(o, &bus).ok()) _exit(2);
  std::unique_ptr<Delivery> d;
  if (!bus->Connect(TenantId("tenant"), "guest", &d).ok()) _exit(3);
  hz_event_subscribe_result r{};
  if (!d->Subscribe({HZ_TOPIC_ALL, HZ_SEQ_CURSOR}, &r).ok()) _exit(4);
  for (uint64_t n = 1; n < 1000000; ++n) {
    uint64_t seq = 0;
    if (!bus->Publish(TenantId("tenant"), SpecFor(n), &seq).ok() || seq != n) _exit(5);
    Report rep{1, seq};
    if (write(out, &rep, sizeof rep) != sizeof rep) _exit(6);
    if (n % 7 == 0) {
      hz_event ev;
      uint64_t last = 0;
      while (d->Next(&ev)) last = ev.seq;
      hz_event_ack_args a{};
      a.seq = last;
      if (!d->Ack(a).ok()) _exit(7);
      Report ack{2, last};
      if (write(out, &ack, sizeof ack) != sizeof ack) _exit(8);
    }
  }
  _exit(0);
}

void KillChildAfter(const std::string& dir, FsyncPolicy policy, uint64_t reports, uint64_t* max_seq,
                    uint64_t* max_ack) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    ChildAppends(dir, policy, fds[1]);
  }
  close(fds[1]);
  *max_seq = 0;
  *max_ack = 0;
  uint64_t got = 0;
  Report rep;
  bool killed = false;
  for (;;) {
    ssize_t n = read(fds[0], &rep, sizeof rep);
    if (n == 0) break;  // child gone and pipe drained
    ASSERT_EQ(n, static_cast<ssize_t>(sizeof rep));
    if (rep.type == 1) *max_seq = std::max(*max_seq, rep.value);
    if (rep.type == 2) *max_ack = std::max(*max_ack, rep.value);
    if (++got == reports && !killed) {
      ASSERT_EQ(kill(pid, SIGKILL), 0);
      killed = true;
    }
  }
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with status " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
}

void VerifyLog(const std::string& dir, uint64_t max_seq, uint64_t max_ack, uint64_t* next_seq) {
  BusOptions o;
  o.dir = dir;
  o.retention = 1u << 20;
  std::unique_ptr<EventBus> bus;
  ASSERT_TRUE(EventBus::Open(o, &bus).ok());
  TenantSummary s;
  ASSERT_TRUE(bus->Summary(TenantId("tenant"), &s).ok());
  // Everything reported as appended is there; at most the one in flight beyond.
  ASSERT_GE(s.next_seq, max_seq + 1);
  ASSERT_LE(s.next_seq, max_seq + 2);
  EXPECT_EQ(s.oldest_seq, 1u);
  for (uint64_t n = 1; n < s.next_seq; ++n) {
    hz_event ev;
    ASSERT_TRUE(bus->Get(TenantId("tenant"), n, &ev).ok()) << n;
    EventSpec want = SpecFor(n);
    ASSERT_EQ(ev.topic, want.topic);
    ASSERT_EQ(ev.kind, want.kind);
    ASSERT_EQ(std::memcmp(ev.payload, want.payload.data(), HZ_EVENT_PAYLOAD_BYTES), 0) << n;
  }
  // The acknowledged cursor survived too.
  std::unique_ptr<Delivery> d;
  ASSERT_TRUE(bus->Connect(TenantId("tenant"), "guest", &d).ok());
  hz_event_subscribe_result r{};
  ASSERT_TRUE(d->Subscribe({HZ_TOPIC_ALL, HZ_SEQ_CURSOR}, &r).ok());
  EXPECT_GE(r.cursor, max_ack);
  *next_seq = s.next_seq;
}

class EventsDurability : public ::testing::TestWithParam<FsyncPolicy> {};

}  // namespace

// Names the parameter in test listings.
void PrintTo(FsyncPolicy policy, std::ostream* os) {
  *os << (policy == FsyncPolicy::kNone ? "fsync none" : "fsync always");
}

namespace {

TEST_P(EventsDurability, SigkillLosesNothingAcknowledged) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 3; ++trial) {
    TempDir dir;
    uint64_t reports = 50 + rng() % 400;
    uint64_t max_seq = 0, max_ack = 0, next_seq = 0;
    KillChildAfter(dir.path(), GetParam(), reports, &max_seq, &max_ack);
    ASSERT_GT(max_seq, 0u);
    VerifyLog(dir.path(), max_seq, max_ack, &next_seq);
  }
}

INSTANTIATE_TEST_SUITE_P(EventsFsync, EventsDurability,
                         ::testing::Values(FsyncPolicy::kNone, FsyncPolicy::kAlways),
                         [](const ::testing::TestParamInfo<FsyncPolicy>& p) {
                           return std::string(p.param == FsyncPolicy::kNone ? "None" : "Always");
                         });

TEST(EventsDurabilityTornTail, EveryCutPointRecovers) {
  TempDir dir;
  uint64_t max_seq = 0, max_ack = 0, next_seq = 0;
  KillChildAfter(dir.path(), FsyncPolicy::kNone, 40, &max_seq, &max_ack);
  VerifyLog(dir.path(), max_seq, max_ack, &next_seq);
  const std::string log = dir.path() + "/tenant/events.log";
  const std::string clean = dir.path() + "/clean.log";
  fs::copy_file(log, clean);
  const uint64_t size = fs::file_size(clean);
  const uint64_t record = kRecordHeaderBytes + sizeof(hz_event);
  ASSERT_EQ(size % record, 0u);
  // Cut the last record at every byte boundary, as a crash mid-append could.
  for (uint64_t cut = 1; cut < record; cut += 7) {
    fs::copy_file(clean, log, fs::copy_options::overwrite_existing);
    fs::resize_file(log, size - cut);
    BusOptions o;
    o.dir = dir.path();
    o.retention = 1u << 20;
    std::unique_ptr<EventBus> bus;
    ASSERT_TRUE(EventBus::Open(o, &bus).ok());
    TenantSummary s;
    ASSERT_TRUE(bus->Summary(TenantId("tenant"), &s).ok());
    // The torn record is gone; sequence numbers continue after the cursor
    // floor (state.json) or the last intact record, whichever is higher.
    EXPECT_EQ(fs::file_size(log), size - record);
    uint64_t seq = 0;
    ASSERT_TRUE(bus->Publish(TenantId("tenant"), SpecFor(next_seq - 1), &seq).ok());
    EXPECT_GE(s.next_seq, next_seq - 1);
    EXPECT_EQ(seq, s.next_seq);
    hz_event ev;
    ASSERT_TRUE(bus->Get(TenantId("tenant"), seq, &ev).ok());
  }
}

}  // namespace
}  // namespace hz::events
