#include "vdev/session_snapshot.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#ifndef VDEV_UNIT_TEST_DATA
#error "VDEV_UNIT_TEST_DATA must name tests/unit/vdev/data"
#endif

namespace vdev {
namespace {

using nlohmann::json;

// Every field of each record, so that one comparison covers them all.
auto Fields(const RegionRecord& r) {
  return std::tie(r.guest_phys_addr, r.size, r.userspace_addr, r.mmap_offset, r.fd);
}
auto Fields(const QueueRecord& q) {
  return std::tie(q.size, q.has_addresses, q.desc_addr, q.avail_addr, q.used_addr, q.last_avail,
                  q.started, q.enabled, q.nofd_kick, q.kick, q.call, q.err);
}
auto Fields(const SessionRecord& s) {
  return std::tie(s.acked_features, s.features_set, s.acked_protocol, s.status, s.ever_started,
                  s.backend_channel, s.device_state);
}
auto Fields(const ConnectionRecord& c) {
  return std::tie(c.socket, c.partial_message, c.partial_fds, c.unsent_replies);
}
auto Fields(const ServerRecord& s) {
  return std::tie(s.path, s.listener, s.has_connection);
}

void ExpectEqual(const Snapshot& want, const Snapshot& got) {
  EXPECT_EQ(want.version, got.version);
  EXPECT_EQ(want.application_state, got.application_state);
  EXPECT_EQ(want.application_fds, got.application_fds);
  ASSERT_EQ(want.servers.size(), got.servers.size());
  for (size_t i = 0; i < want.servers.size(); ++i) {
    SCOPED_TRACE("server " + std::to_string(i));
    const ServerRecord &w = want.servers[i], &g = got.servers[i];
    EXPECT_EQ(Fields(w), Fields(g));
    if (!w.has_connection) continue;
    EXPECT_EQ(Fields(w.connection), Fields(g.connection));
    const SessionRecord &ws = w.connection.session, &gs = g.connection.session;
    EXPECT_EQ(Fields(ws), Fields(gs));
    ASSERT_EQ(ws.regions.size(), gs.regions.size());
    for (size_t r = 0; r < ws.regions.size(); ++r) {
      EXPECT_EQ(Fields(ws.regions[r]), Fields(gs.regions[r])) << "region " << r;
    }
    ASSERT_EQ(ws.queues.size(), gs.queues.size());
    for (size_t q = 0; q < ws.queues.size(); ++q) {
      EXPECT_EQ(Fields(ws.queues[q]), Fields(gs.queues[q])) << "queue " << q;
    }
  }
}

QueueRecord Queue(uint16_t size, uint16_t last_avail, int kick, int call, int err) {
  QueueRecord q;
  q.size = size;
  q.has_addresses = true;
  q.desc_addr = 0x7f0000010000 + size;
  q.avail_addr = 0x7f0000020000 + size;
  q.used_addr = 0x7f0000030000 + size;
  q.last_avail = last_avail;
  q.started = true;
  q.enabled = kick != kNoFd;
  q.nofd_kick = kick == kNoFd;
  q.kick = kick;
  q.call = call;
  q.err = err;
  return q;
}

// Two servers: one connected, mid-message, with two regions and three
// queues; one listening and idle; and two descriptors of the application.
// Descriptor indices 0..16 are each named once.
constexpr size_t kFullFds = 17;

Snapshot FullSnapshot() {
  Snapshot s;
  s.servers.resize(2);
  ServerRecord& a = s.servers[0];
  a.path = "/run/vdev/net0.sock";
  a.listener = 0;
  a.has_connection = true;
  ConnectionRecord& c = a.connection;
  c.socket = 1;
  c.session.acked_features = 0x1'7000'0000ull;
  c.session.features_set = true;
  c.session.acked_protocol = 0x1822b;
  c.session.status = 0x0f;
  c.session.ever_started = true;
  c.session.backend_channel = 2;
  c.session.regions = {{0, 0x100000, 0x7f0000000000, 0, 3},
                       {0x100000, 0x8000, 0x7f0000100000, 0x8000, 4}};
  c.session.queues = {Queue(256, 65535, 5, 6, 7), Queue(64, 3, 8, 9, kNoFd),
                      Queue(1024, 0, kNoFd, 10, 11)};
  c.session.device_state = std::string("\xde\xad\x00\xff\xbe\xef", 6);
  c.partial_message = std::string("\x01\x00\x00\x00\x09\x00\xff", 7);
  c.partial_fds = {12, 13};
  c.unsent_replies = std::string("\x00\x80\xc3\x28", 4);  // not UTF-8
  ServerRecord& b = s.servers[1];
  b.path = "/run/vdev/blk0.sock";
  b.listener = 14;
  s.application_state = std::string("{\"tenant\":7}\x00\xff", 14);
  s.application_fds = {16, 15};
  return s;
}

TEST(SessionSnapshot, EveryFieldSurvivesAnEncodeAndDecode) {
  const Snapshot want = FullSnapshot();
  Snapshot got;
  ASSERT_EQ(DecodeSnapshot(EncodeSnapshot(want), kFullFds, &got), "");
  ExpectEqual(want, got);
}

TEST(SessionSnapshot, TheEncodingIsJsonWithItsFormatAndVersion) {
  const json j = json::parse(EncodeSnapshot(FullSnapshot()));
  EXPECT_EQ(j.at("format"), "vdev-handoff");
  EXPECT_EQ(j.at("version"), kSnapshotVersion);
}

// What a refusal must mention, and how to break a valid encoding to get it.
struct Refusal {
  const char* name;
  std::function<void(json&)> corrupt;
  const char* mentions;
};

json& Session(json& j) {
  return j["servers"][0]["connection"]["session"];
}

const std::string kReadable =
    "(" + std::to_string(kOldestSnapshotVersion) + " to " + std::to_string(kSnapshotVersion) + ")";

TEST(SessionSnapshot, EachKindOfDamageIsRefusedWithItsCause) {
  const Refusal refusals[] = {
      {"wrong format", [](json& j) { j["format"] = "vdev-checkpoint"; },
       "not a vdev hand-over snapshot"},
      {"version 0", [](json& j) { j["version"] = 0; }, "version 0"},
      {"newer version", [](json& j) { j["version"] = kSnapshotVersion + 1; },
       "is not one this build reads"},
      {"missing field", [](json& j) { j["servers"][1].erase("path"); }, "missing field \"path\""},
      {"wrong type", [](json& j) { j["servers"][0]["has_connection"] = "yes"; },
       "\"has_connection\" is not a boolean"},
      {"string for a number", [](json& j) { Session(j)["status"] = "15"; },
       "\"status\" is not an unsigned integer"},
      {"index out of range", [](json& j) { j["servers"][1]["listener"] = kFullFds; },
       "names descriptor 17, but 17 arrived"},
      {"application descriptor named twice", [](json& j) { j["application_fds"][1] = 3; },
       "descriptor 3 is named twice"},
      {"application descriptor missing", [](json& j) { j["application_fds"][0] = kNoFd; },
       "\"application_fds\" names no descriptor"},
      {"application descriptors not a list", [](json& j) { j["application_fds"] = 15; },
       "\"application_fds\" is not an array"},
      {"index named twice", [](json& j) { j["servers"][1]["listener"] = 3; },
       "descriptor 3 is named twice"},
      {"negative index", [](json& j) { Session(j)["queues"][0]["kick"] = -2; },
       "names descriptor -2"},
      {"odd-length bytes", [](json& j) { Session(j)["device_state"] = "abc"; },
       "odd number of hex digits"},
      {"non-hex bytes", [](json& j) { j["application_state"] = "zz"; }, "not lowercase hex"},
      {"uppercase hex", [](json& j) { j["application_state"] = "FF"; }, "not lowercase hex"},
      {"region without a descriptor", [](json& j) { Session(j)["regions"][1]["fd"] = kNoFd; },
       "a region without a descriptor"},
      {"connection without a socket",
       [](json& j) { j["servers"][0]["connection"]["socket"] = kNoFd; },
       "a connection without a socket"},
      {"too many queues",
       [](json& j) {
         json queues = json::array();
         for (int i = 0; i < 257; ++i) queues.push_back(Session(j)["queues"][1]);
         Session(j)["queues"] = queues;
       },
       "257 queues"},
  };
  const std::string valid = EncodeSnapshot(FullSnapshot());
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.name);
    json j = json::parse(valid);
    r.corrupt(j);
    Snapshot out;
    const std::string error = DecodeSnapshot(j.dump(), kFullFds, &out);
    EXPECT_NE(error, "");
    EXPECT_NE(error.find(r.mentions), std::string::npos) << error;
  }
}

TEST(SessionSnapshot, AVersionItCannotReadNamesTheVersionsItReads) {
  json j = json::parse(EncodeSnapshot(FullSnapshot()));
  for (uint32_t version : {0u, kSnapshotVersion + 1}) {
    j["version"] = version;
    Snapshot out;
    const std::string error = DecodeSnapshot(j.dump(), kFullFds, &out);
    EXPECT_NE(error.find("version " + std::to_string(version)), std::string::npos) << error;
    EXPECT_NE(error.find(kReadable), std::string::npos) << error;
  }
}

TEST(SessionSnapshot, BytesThatAreNotJsonAreRefused) {
  for (std::string_view bytes : {std::string_view(), std::string_view("{\"format\": "),
                                 std::string_view("\x00\xff", 2), std::string_view("[1, 2]")}) {
    Snapshot out;
    EXPECT_NE(DecodeSnapshot(bytes, kFullFds, &out), "") << bytes;
  }
  Snapshot out;
  EXPECT_NE(DecodeSnapshot("not json", 0, &out).find("not valid JSON"), std::string::npos);
}

TEST(SessionSnapshot, TooFewDescriptorsForTheRecordsIsRefused) {
  Snapshot out;
  const std::string error = DecodeSnapshot(EncodeSnapshot(FullSnapshot()), kFullFds - 2, &out);
  EXPECT_NE(error.find("arrived"), std::string::npos) << error;
}

// A snapshot written by hand in version 1's format: later releases must keep
// reading it for as long as they claim to read version 1.
TEST(SessionSnapshot, AVersionOneSnapshotIsStillRead) {
  ASSERT_LE(kOldestSnapshotVersion, 1u);
  std::ifstream in(std::string(VDEV_UNIT_TEST_DATA) + "/vdev_snapshot_v1.json");
  ASSERT_TRUE(in) << "missing fixture";
  std::stringstream bytes;
  bytes << in.rdbuf();
  Snapshot s;
  ASSERT_EQ(DecodeSnapshot(bytes.str(), 7, &s), "");
  EXPECT_EQ(s.version, 1u);
  EXPECT_EQ(s.application_state, std::string("{}\x00", 3));
  ASSERT_EQ(s.servers.size(), 1u);
  const ServerRecord& server = s.servers[0];
  EXPECT_EQ(server.path, "/run/vdev/echo0.sock");
  EXPECT_EQ(server.listener, 0);
  ASSERT_TRUE(server.has_connection);
  const ConnectionRecord& c = server.connection;
  EXPECT_EQ(c.socket, 1);
  EXPECT_EQ(c.partial_message, std::string("\x18\x00\x00\x00", 4));
  EXPECT_EQ(c.partial_fds, std::vector<int>{6});
  EXPECT_EQ(c.unsent_replies, "");
  const SessionRecord& session = c.session;
  EXPECT_EQ(session.acked_features, 0x170000000ull);
  EXPECT_TRUE(session.features_set);
  EXPECT_EQ(session.acked_protocol, 0x1822bull);
  EXPECT_EQ(session.status, 15);
  EXPECT_TRUE(session.ever_started);
  EXPECT_EQ(session.backend_channel, kNoFd);
  EXPECT_EQ(session.device_state, "\xde\xad\xbe\xef");
  ASSERT_EQ(session.regions.size(), 1u);
  EXPECT_EQ(Fields(session.regions[0]), Fields(RegionRecord{0, 0x200000, 0x7f1234000000, 0, 2}));
  ASSERT_EQ(session.queues.size(), 2u);
  QueueRecord q0 = Queue(64, 17, 3, 4, kNoFd);
  q0.desc_addr = 0x7f1234000000;
  q0.avail_addr = 0x7f1234000400;
  q0.used_addr = 0x7f1234001000;
  EXPECT_EQ(Fields(session.queues[0]), Fields(q0));
  QueueRecord q1;
  q1.size = 64;
  q1.started = false;
  q1.call = 5;
  EXPECT_EQ(Fields(session.queues[1]), Fields(q1));
}

bool SameFile(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

TEST(SnapshotFds, NoDescriptorIsRecordedAsNoFd) {
  SnapshotFds fds;
  EXPECT_EQ(fds.Add(-1), kNoFd);
  EXPECT_FALSE(fds.failed());
  EXPECT_TRUE(fds.raw().empty());
}

// The exporter keeps its own descriptors (a failed hand-over carries on with
// them), so the snapshot holds copies of the same files.
TEST(SnapshotFds, AddKeepsACopyOfTheSameFile) {
  // memfds, not eventfds: every eventfd shares one anonymous inode.
  UniqueFd a(memfd_create("a", MFD_CLOEXEC)), b(memfd_create("b", MFD_CLOEXEC));
  ASSERT_TRUE(a.valid() && b.valid());
  SnapshotFds fds;
  EXPECT_EQ(fds.Add(a.get()), 0);
  EXPECT_EQ(fds.Add(b.get()), 1);
  EXPECT_FALSE(fds.failed());
  const std::vector<int> raw = fds.raw();
  ASSERT_EQ(raw.size(), 2u);
  EXPECT_NE(raw[0], a.get());
  EXPECT_NE(raw[1], b.get());
  EXPECT_TRUE(SameFile(raw[0], a.get()));
  EXPECT_TRUE(SameFile(raw[1], b.get()));
  EXPECT_FALSE(SameFile(raw[0], b.get()));
  a.reset();  // the copy outlives the original
  EXPECT_EQ(write(raw[0], "x", 1), 1);
}

}  // namespace
}  // namespace vdev
