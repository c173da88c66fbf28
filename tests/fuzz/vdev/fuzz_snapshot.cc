// Fuzzes the live-upgrade snapshot decoder (session_snapshot.h), which reads
// what a predecessor process sent and must refuse anything malformed without
// crashing, leaking or accepting a record that names a descriptor that did
// not arrive.
//
// Input: one byte giving the number of descriptors that arrived (mod 16),
// then the snapshot bytes. A snapshot that decodes must encode again and
// decode to the same encoding: the successor's own snapshots are read the
// same way.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "vdev/session_snapshot.h"

namespace {

// Every index a decoded snapshot holds, checked to be in range and unique.
class IndexCheck {
 public:
  explicit IndexCheck(size_t num_fds) : num_fds_(num_fds) {}
  void operator()(int index) {
    if (index == vdev::kNoFd) return;
    if (index < 0 || static_cast<size_t>(index) >= num_fds_) std::abort();
    if (!seen_.insert(index).second) std::abort();
  }

 private:
  size_t num_fds_;
  std::set<int> seen_;
};

void CheckIndices(const vdev::Snapshot& s, size_t num_fds) {
  IndexCheck check(num_fds);
  for (const vdev::ServerRecord& server : s.servers) {
    check(server.listener);
    if (!server.has_connection) continue;
    const vdev::ConnectionRecord& c = server.connection;
    check(c.socket);
    check(c.session.backend_channel);
    for (const vdev::RegionRecord& r : c.session.regions) check(r.fd);
    for (const vdev::QueueRecord& q : c.session.queues) {
      check(q.kick);
      check(q.call);
      check(q.err);
    }
    for (int fd : c.partial_fds) check(fd);
  }
  for (int fd : s.application_fds) check(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t num_fds = data[0] % 16;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  vdev::Snapshot snapshot;
  if (!vdev::DecodeSnapshot(bytes, num_fds, &snapshot).empty()) return 0;
  CheckIndices(snapshot, num_fds);
  const std::string encoded = vdev::EncodeSnapshot(snapshot);
  vdev::Snapshot again;
  if (!vdev::DecodeSnapshot(encoded, num_fds, &again).empty()) std::abort();
  if (vdev::EncodeSnapshot(again) != encoded) std::abort();
  return 0;
}
