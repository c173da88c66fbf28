// A hostile vhost-user front-end for tests: raw messages with arbitrary
// headers, payloads and fds, plus hand-built guest memory and rings.
#ifndef TESTS_INTEGRATION_VDEV_RAW_VHOST_H_
#define TESTS_INTEGRATION_VDEV_RAW_VHOST_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vdev/vhost_user.h"

namespace vdev::testing {

// recvmsg() of up to len bytes into buf; the fds that came with them are
// appended to *fds, and the caller owns them. Returns what recvmsg returned.
ssize_t RecvWithFds(int fd, void* buf, size_t len, int flags, std::vector<int>* fds);

struct RawReply {
  vu::Header hdr{};
  std::vector<uint8_t> payload;
  uint64_t u64() const;
};

enum class Got { kReply, kClosed, kTimeout };

class RawConn {
 public:
  RawConn() = default;
  ~RawConn() { Close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool Connect(const std::string& path);
  void Close();
  int fd() const { return fd_; }

  // False once the peer is gone (never raises SIGPIPE).
  bool SendBytes(const void* data, size_t len, std::span<const int> fds = {});
  bool Send(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
            std::span<const int> fds = {});
  bool SendU64(uint32_t request, uint64_t value, uint32_t flags = vu::kVersion,
               std::span<const int> fds = {});
  Got Recv(RawReply* reply, std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));
  // Waits for the peer to close (discarding anything it sends).
  bool WaitClosed(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

  // Request/reply helpers; false on any deviation.
  bool GetU64(uint32_t request, uint64_t* value);
  // Sends with NEED_REPLY and returns the ack value (or ~0 if none came).
  uint64_t Acked(uint32_t request, const void* payload, uint32_t size,
                 std::span<const int> fds = {});
  uint64_t AckedU64(uint32_t request, uint64_t value, std::span<const int> fds = {}) {
    return Acked(request, &value, sizeof(value), fds);
  }

 private:
  int fd_ = -1;
};

// Guest memory and a split ring built by hand, with no front-end library.
// Layout inside one memfd region: desc table at 0, avail ring at 0x1000,
// used ring at 0x2000, data from 0x10000.
class HandRing {
 public:
  static constexpr uint64_t kGpa = 0x100000;
  static constexpr uint64_t kSize = 1 << 20;
  static constexpr uint64_t kDescOff = 0;
  static constexpr uint64_t kAvailOff = 0x1000;
  static constexpr uint64_t kUsedOff = 0x2000;
  static constexpr uint64_t kDataOff = 0x10000;

  // sealable: the memfd allows seals (MFD_ALLOW_SEALING), so the back-end
  // can seal it against shrinking; without, a back-end requiring sealed
  // memory refuses it.
  explicit HandRing(bool sealable = true);
  ~HandRing();
  int memfd() const { return memfd_; }
  uint8_t* host() const { return host_; }
  uint64_t uva(uint64_t off) const { return reinterpret_cast<uint64_t>(host_) + off; }
  vu::MemRegion region() const;

  // Raw ring access (queue size n as set with SET_VRING_NUM).
  void SetDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next);
  void PushAvail(uint16_t head, uint16_t n);  // writes the entry, bumps idx
  void SetAvailIdx(uint16_t idx);
  uint16_t UsedIdx() const;
  void UsedEntry(uint16_t slot, uint32_t* id, uint32_t* len) const;

 private:
  int memfd_ = -1;
  uint8_t* host_ = nullptr;
  uint16_t avail_idx_ = 0;
};

// Performs a well-formed handshake on a raw connection (REPLY_ACK and MQ
// negotiated, features acked) and optionally the memory table of ring.
// Returns false with a message if the back-end did not cooperate.
bool RawHandshake(RawConn& c, std::string* why);
bool RawSetMemTable(RawConn& c, const HandRing& ring, std::string* why);
// Sets up queue q of size n on the hand ring, with kick/call/err eventfds.
bool RawSetupQueue(RawConn& c, const HandRing& ring, uint16_t q, uint16_t n, int kick, int call,
                   int err, std::string* why);

// Number of open fds in this process.
int CountOpenFds();

}  // namespace vdev::testing

#endif  // TESTS_INTEGRATION_VDEV_RAW_VHOST_H_
