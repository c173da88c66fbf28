// What a vhost-user back-end hands to the process that replaces it, so that
// the front-ends (QEMU, virtio-user tenants) never notice the change: every
// connection keeps its socket, guest memory, rings and eventfds, and the new
// process resumes each ring where the old one stopped.
//
// A snapshot is plain data plus a list of file descriptors; records name a
// descriptor by its index in that list. It is encoded as versioned JSON
// (nlohmann::json, which the rest of the tree already uses for its state
// files): a human can read a hand-over that went wrong, and a new release
// reads an older release's snapshots for as long as it keeps their version in
// [kOldestSnapshotVersion, kSnapshotVersion].
//
// The decoder treats its input as untrusted (a file, a socket): every field
// is type- and range-checked, and every descriptor index must name a
// descriptor that arrived; anything else is refused with the reason.
#ifndef VDEV_SESSION_SNAPSHOT_H_
#define VDEV_SESSION_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vdev/message.h"

namespace vdev {

inline constexpr uint32_t kSnapshotVersion = 1;
inline constexpr uint32_t kOldestSnapshotVersion = 1;
// An index into the snapshot's descriptor list, or kNoFd.
inline constexpr int kNoFd = -1;

// One region of guest memory (SET_MEM_TABLE / ADD_MEM_REG).
struct RegionRecord {
  uint64_t guest_phys_addr = 0;
  uint64_t size = 0;
  uint64_t userspace_addr = 0;
  uint64_t mmap_offset = 0;
  int fd = kNoFd;
};

// One virtqueue: its configuration and where the back-end stands in it. The
// used index is not recorded: it lives in guest memory, where the back-end
// published it before handing over.
struct QueueRecord {
  uint16_t size = 0;
  bool has_addresses = false;
  uint64_t desc_addr = 0;  // front-end virtual addresses (SET_VRING_ADDR)
  uint64_t avail_addr = 0;
  uint64_t used_addr = 0;
  uint16_t last_avail = 0;  // the next avail entry to pop
  // Chains popped before and handed back unserved (Queue::Return): the
  // successor pops them again first. Optional in the encoding (absent: none).
  std::vector<uint16_t> returned;
  bool started = false;  // SET_VRING_KICK seen, not stopped since
  bool enabled = false;
  bool nofd_kick = false;
  int kick = kNoFd;
  int call = kNoFd;
  int err = kNoFd;
};

// One connection's vhost-user session.
struct SessionRecord {
  uint64_t acked_features = 0;
  bool features_set = false;
  uint64_t acked_protocol = 0;
  uint8_t status = 0;
  bool ever_started = false;
  int backend_channel = kNoFd;  // SET_BACKEND_REQ_FD
  std::vector<RegionRecord> regions;
  std::vector<QueueRecord> queues;
  // The device's own state (Device::SaveState), opaque to vdev.
  std::string device_state;
};

// One front-end connection of a Server: the socket, the session, and bytes
// in transit on the socket (a message partly read, replies not yet sent).
struct ConnectionRecord {
  int socket = kNoFd;
  SessionRecord session;
  // A message the front-end had sent only part of, and the descriptors that
  // came with that part: the successor reads the rest from the socket.
  std::string partial_message;
  std::vector<int> partial_fds;
  std::string unsent_replies;
};

// One vdev::Server.
struct ServerRecord {
  std::string path;
  int listener = kNoFd;  // server mode; kNoFd in client mode
  bool has_connection = false;
  ConnectionRecord connection;
};

// Everything one process hands over, with room for the application's own
// state next to its servers.
struct Snapshot {
  uint32_t version = kSnapshotVersion;
  std::vector<ServerRecord> servers;
  std::string application_state;  // opaque to vdev
  // Descriptors the application hands over besides its servers (listening
  // sockets of its own, a lock), in the order it named them. Optional in
  // the encoding (absent: none).
  std::vector<int> application_fds;
};

// Gathers the descriptors a record names while it is written: Add returns
// the index the record stores (kNoFd for fd < 0).
class FdIndex {
 public:
  virtual ~FdIndex() = default;
  virtual int Add(int fd) = 0;
};

// The descriptors a snapshot names: Add duplicates fd (the exporter keeps
// its own, in case the hand-over fails).
class SnapshotFds final : public FdIndex {
 public:
  // kNoFd for fd < 0, and when the copy failed (then failed() says so).
  int Add(int fd) override;
  bool failed() const { return failed_; }
  std::vector<int> raw() const;
  std::vector<UniqueFd>& fds() { return fds_; }

 private:
  std::vector<UniqueFd> fds_;
  bool failed_ = false;  // out of descriptors: the snapshot is incomplete
};

// Encodes a snapshot (always at kSnapshotVersion).
std::string EncodeSnapshot(const Snapshot& snapshot);
// Decodes and checks a snapshot that came with num_fds descriptors. Returns
// an empty string on success, else why it was refused (an unknown version
// says which versions this build reads).
std::string DecodeSnapshot(std::string_view bytes, size_t num_fds, Snapshot* out);

}  // namespace vdev

#endif  // VDEV_SESSION_SNAPSHOT_H_
