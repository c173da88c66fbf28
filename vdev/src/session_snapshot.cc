#include "vdev/session_snapshot.h"

#include <fcntl.h>

#include <limits>

#include "nlohmann/json.hpp"
#include "spdlog/fmt/fmt.h"
#include "vdev/vhost_user.h"

namespace vdev {

namespace {

using nlohmann::json;

// Bytes that need not be UTF-8 (device state, a partly read message) travel
// as lowercase hex: JSON strings must be valid UTF-8.
std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A decoding failure; caught at the top and turned into the error string.
struct Refused {
  std::string why;
};

[[noreturn]] void Refuse(std::string why) {
  throw Refused{std::move(why)};
}

const json& Field(const json& object, const char* name) {
  if (!object.is_object()) Refuse(fmt::format("expected an object holding \"{}\"", name));
  auto it = object.find(name);
  if (it == object.end()) Refuse(fmt::format("missing field \"{}\"", name));
  return *it;
}

uint64_t Unsigned(const json& object, const char* name, uint64_t max) {
  const json& v = Field(object, name);
  if (!v.is_number_unsigned()) Refuse(fmt::format("\"{}\" is not an unsigned integer", name));
  uint64_t n = v.get<uint64_t>();
  if (n > max) Refuse(fmt::format("\"{}\" = {} exceeds {}", name, n, max));
  return n;
}

bool Bool(const json& object, const char* name) {
  const json& v = Field(object, name);
  if (!v.is_boolean()) Refuse(fmt::format("\"{}\" is not a boolean", name));
  return v.get<bool>();
}

std::string String(const json& object, const char* name) {
  const json& v = Field(object, name);
  if (!v.is_string()) Refuse(fmt::format("\"{}\" is not a string", name));
  return v.get<std::string>();
}

std::string Bytes(const json& object, const char* name) {
  std::string hex = String(object, name);
  if (hex.size() % 2 != 0) Refuse(fmt::format("\"{}\" has an odd number of hex digits", name));
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) Refuse(fmt::format("\"{}\" is not lowercase hex", name));
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

const json& Array(const json& object, const char* name) {
  const json& v = Field(object, name);
  if (!v.is_array()) Refuse(fmt::format("\"{}\" is not an array", name));
  return v;
}

// A descriptor index: kNoFd, or one of the num_fds that arrived, each named
// at most once (two records sharing one descriptor would close it twice).
class FdIndices {
 public:
  explicit FdIndices(size_t num_fds) : used_(num_fds, false) {}
  int Take(const json& object, const char* name) { return TakeValue(Field(object, name), name); }
  int TakeValue(const json& v, const char* name) {
    if (!v.is_number_integer()) Refuse(fmt::format("\"{}\" is not a descriptor index", name));
    int64_t i = v.get<int64_t>();
    if (i == kNoFd) return kNoFd;
    if (i < 0 || static_cast<uint64_t>(i) >= used_.size()) {
      Refuse(fmt::format("\"{}\" names descriptor {}, but {} arrived", name, i, used_.size()));
    }
    if (used_[i]) Refuse(fmt::format("descriptor {} is named twice", i));
    used_[i] = true;
    return static_cast<int>(i);
  }

 private:
  std::vector<bool> used_;
};

json EncodeQueue(const QueueRecord& q) {
  return {{"size", q.size},
          {"has_addresses", q.has_addresses},
          {"desc_addr", q.desc_addr},
          {"avail_addr", q.avail_addr},
          {"used_addr", q.used_addr},
          {"last_avail", q.last_avail},
          {"returned", q.returned},
          {"started", q.started},
          {"enabled", q.enabled},
          {"nofd_kick", q.nofd_kick},
          {"kick", q.kick},
          {"call", q.call},
          {"err", q.err}};
}

QueueRecord DecodeQueue(const json& j, FdIndices& fds) {
  QueueRecord q;
  q.size = static_cast<uint16_t>(Unsigned(j, "size", 32768));
  q.has_addresses = Bool(j, "has_addresses");
  q.desc_addr = Unsigned(j, "desc_addr", UINT64_MAX);
  q.avail_addr = Unsigned(j, "avail_addr", UINT64_MAX);
  q.used_addr = Unsigned(j, "used_addr", UINT64_MAX);
  q.last_avail = static_cast<uint16_t>(Unsigned(j, "last_avail", UINT16_MAX));
  if (j.contains("returned")) {
    const json& heads = Array(j, "returned");
    if (heads.size() > q.size) Refuse("more returned chains than the ring holds");
    for (const json& head : heads) {
      json holder = {{"head", head}};
      q.returned.push_back(static_cast<uint16_t>(Unsigned(holder, "head", q.size - 1u)));
    }
  }
  q.started = Bool(j, "started");
  q.enabled = Bool(j, "enabled");
  q.nofd_kick = Bool(j, "nofd_kick");
  q.kick = fds.Take(j, "kick");
  q.call = fds.Take(j, "call");
  q.err = fds.Take(j, "err");
  return q;
}

json EncodeSession(const SessionRecord& s) {
  json regions = json::array();
  for (const RegionRecord& r : s.regions) {
    regions.push_back({{"guest_phys_addr", r.guest_phys_addr},
                       {"size", r.size},
                       {"userspace_addr", r.userspace_addr},
                       {"mmap_offset", r.mmap_offset},
                       {"fd", r.fd}});
  }
  json queues = json::array();
  for (const QueueRecord& q : s.queues) queues.push_back(EncodeQueue(q));
  return {{"acked_features", s.acked_features},   {"features_set", s.features_set},
          {"acked_protocol", s.acked_protocol},   {"status", s.status},
          {"ever_started", s.ever_started},       {"backend_channel", s.backend_channel},
          {"regions", std::move(regions)},        {"queues", std::move(queues)},
          {"device_state", ToHex(s.device_state)}};
}

// Far more than any front-end can set up (memory slots are bounded by the
// back-end's GET_MAX_MEM_SLOTS).
constexpr size_t kMaxRegions = 512;

SessionRecord DecodeSession(const json& j, FdIndices& fds) {
  SessionRecord s;
  s.acked_features = Unsigned(j, "acked_features", UINT64_MAX);
  s.features_set = Bool(j, "features_set");
  s.acked_protocol = Unsigned(j, "acked_protocol", UINT64_MAX);
  s.status = static_cast<uint8_t>(Unsigned(j, "status", 0xff));
  s.ever_started = Bool(j, "ever_started");
  s.backend_channel = fds.Take(j, "backend_channel");
  const json& regions = Array(j, "regions");
  if (regions.size() > kMaxRegions) Refuse(fmt::format("{} regions", regions.size()));
  for (const json& r : regions) {
    RegionRecord region;
    region.guest_phys_addr = Unsigned(r, "guest_phys_addr", UINT64_MAX);
    region.size = Unsigned(r, "size", UINT64_MAX);
    region.userspace_addr = Unsigned(r, "userspace_addr", UINT64_MAX);
    region.mmap_offset = Unsigned(r, "mmap_offset", UINT64_MAX);
    region.fd = fds.Take(r, "fd");
    if (region.fd == kNoFd) Refuse("a region without a descriptor");
    s.regions.push_back(region);
  }
  const json& queues = Array(j, "queues");
  if (queues.size() > vu::kMaxQueues) Refuse(fmt::format("{} queues", queues.size()));
  for (const json& q : queues) s.queues.push_back(DecodeQueue(q, fds));
  s.device_state = Bytes(j, "device_state");
  return s;
}

json EncodeServer(const ServerRecord& server) {
  json j = {{"path", server.path},
            {"listener", server.listener},
            {"has_connection", server.has_connection}};
  if (server.has_connection) {
    const ConnectionRecord& c = server.connection;
    j["connection"] = {{"socket", c.socket},
                       {"session", EncodeSession(c.session)},
                       {"partial_message", ToHex(c.partial_message)},
                       {"partial_fds", c.partial_fds},
                       {"unsent_replies", ToHex(c.unsent_replies)}};
  }
  return j;
}

ServerRecord DecodeServer(const json& j, FdIndices& fds) {
  ServerRecord server;
  server.path = String(j, "path");
  server.listener = fds.Take(j, "listener");
  server.has_connection = Bool(j, "has_connection");
  if (!server.has_connection) return server;
  const json& c = Field(j, "connection");
  ConnectionRecord& conn = server.connection;
  conn.socket = fds.Take(c, "socket");
  if (conn.socket == kNoFd) Refuse("a connection without a socket");
  conn.session = DecodeSession(Field(c, "session"), fds);
  conn.partial_message = Bytes(c, "partial_message");
  const json& partial_fds = Array(c, "partial_fds");
  for (const json& fd : partial_fds) {
    json holder = {{"fd", fd}};
    int index = fds.Take(holder, "fd");
    if (index == kNoFd) Refuse("a partial message's descriptor is missing");
    conn.partial_fds.push_back(index);
  }
  conn.unsent_replies = Bytes(c, "unsent_replies");
  return server;
}

}  // namespace

int SnapshotFds::Add(int fd) {
  if (fd < 0) return kNoFd;
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    failed_ = true;
    return kNoFd;
  }
  fds_.emplace_back(copy);
  return static_cast<int>(fds_.size() - 1);
}

std::vector<int> SnapshotFds::raw() const {
  std::vector<int> out;
  for (const UniqueFd& fd : fds_) out.push_back(fd.get());
  return out;
}

std::string EncodeSnapshot(const Snapshot& snapshot) {
  json servers = json::array();
  for (const ServerRecord& s : snapshot.servers) servers.push_back(EncodeServer(s));
  json j = {{"format", "vdev-handoff"},
            {"version", kSnapshotVersion},
            {"servers", std::move(servers)},
            {"application_state", ToHex(snapshot.application_state)}};
  // Optional in version 1: absent means none.
  if (!snapshot.application_fds.empty()) j["application_fds"] = snapshot.application_fds;
  return j.dump();
}

std::string DecodeSnapshot(std::string_view bytes, size_t num_fds, Snapshot* out) {
  json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "the snapshot is not valid JSON";
  try {
    if (String(j, "format") != "vdev-handoff") Refuse("not a vdev hand-over snapshot");
    uint64_t version = Unsigned(j, "version", std::numeric_limits<uint32_t>::max());
    if (version < kOldestSnapshotVersion || version > kSnapshotVersion) {
      Refuse(fmt::format("snapshot version {} is not one this build reads ({} to {})", version,
                         kOldestSnapshotVersion, kSnapshotVersion));
    }
    Snapshot s;
    s.version = static_cast<uint32_t>(version);
    FdIndices fds(num_fds);
    for (const json& server : Array(j, "servers")) s.servers.push_back(DecodeServer(server, fds));
    s.application_state = Bytes(j, "application_state");
    if (j.contains("application_fds")) {
      for (const json& fd : Array(j, "application_fds")) {
        const int index = fds.TakeValue(fd, "application_fds");
        if (index == kNoFd) Refuse("\"application_fds\" names no descriptor");
        s.application_fds.push_back(index);
      }
    }
    *out = std::move(s);
    return {};
  } catch (const Refused& r) {
    return "snapshot refused: " + r.why;
  } catch (const json::exception& e) {
    return std::string("snapshot refused: ") + e.what();
  }
}

}  // namespace vdev
