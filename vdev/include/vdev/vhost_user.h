// vhost-user wire format (QEMU docs/interop/vhost-user.rst), shared by the
// back-end and the virtio-user front-end. Host byte order on an AF_UNIX
// stream socket; file descriptors travel as SCM_RIGHTS.
#ifndef VDEV_VHOST_USER_H_
#define VDEV_VHOST_USER_H_

#include <cstddef>
#include <cstdint>

namespace vdev::vu {

// Front-end -> back-end requests.
enum Request : uint32_t {
  kGetFeatures = 1,
  kSetFeatures = 2,
  kSetOwner = 3,
  kResetOwner = 4,
  kSetMemTable = 5,
  kSetLogBase = 6,
  kSetLogFd = 7,
  kSetVringNum = 8,
  kSetVringAddr = 9,
  kSetVringBase = 10,
  kGetVringBase = 11,
  kSetVringKick = 12,
  kSetVringCall = 13,
  kSetVringErr = 14,
  kGetProtocolFeatures = 15,
  kSetProtocolFeatures = 16,
  kGetQueueNum = 17,
  kSetVringEnable = 18,
  kSetBackendReqFd = 21,
  kGetConfig = 24,
  kSetConfig = 25,
  kResetDevice = 34,
  kGetMaxMemSlots = 36,
  kAddMemReg = 37,
  kRemMemReg = 38,
  kSetStatus = 39,
  kGetStatus = 40,
  kMaxRequest = 44,
};

// Back-end -> front-end requests (on the SET_BACKEND_REQ_FD channel).
enum BackendRequest : uint32_t {
  kBackendConfigChange = 2,
};

// Header flags.
constexpr uint32_t kVersion = 0x1;
constexpr uint32_t kVersionMask = 0x3;
constexpr uint32_t kFlagReply = 1u << 2;
constexpr uint32_t kFlagNeedReply = 1u << 3;
// Every reply carries exactly this (QEMU rejects anything else).
constexpr uint32_t kReplyFlags = kVersion | kFlagReply;

// Virtio feature bits relevant to vhost-user.
constexpr uint64_t kFProtocolFeatures = 1ull << 30;
constexpr uint64_t kFVersion1 = 1ull << 32;
constexpr uint64_t kFRingIndirectDesc = 1ull << 28;
constexpr uint64_t kFRingEventIdx = 1ull << 29;

// Protocol feature bits.
enum ProtocolFeature : uint64_t {
  kPfMq = 0,
  kPfLogShmfd = 1,
  kPfReplyAck = 3,
  kPfBackendReq = 5,
  kPfConfig = 9,
  kPfResetDevice = 13,
  kPfConfigureMemSlots = 15,
  kPfStatus = 16,
};

constexpr uint32_t kMaxFds = 8;           // fds accepted per message
constexpr uint32_t kMaxMemRegions = 8;    // SET_MEM_TABLE regions
constexpr uint32_t kMaxConfigSize = 256;  // GET/SET_CONFIG payload
constexpr uint64_t kVringIdxMask = 0xff;  // SET_VRING_KICK/CALL/ERR index bits
constexpr uint64_t kVringNoFd = 1ull << 8;
// One kick/call/err index byte addresses at most this many rings.
constexpr uint32_t kMaxQueues = kVringIdxMask + 1;

struct Header {
  uint32_t request;
  uint32_t flags;
  uint32_t size;  // payload bytes after the header
};
static_assert(sizeof(Header) == 12);

struct VringState {
  uint32_t index;
  uint32_t num;
};

struct VringAddr {
  uint32_t index;
  uint32_t flags;
  uint64_t desc_user_addr;
  uint64_t used_user_addr;
  uint64_t avail_user_addr;
  uint64_t log_guest_addr;
};
static_assert(sizeof(VringAddr) == 40);

struct MemRegion {
  uint64_t guest_phys_addr;
  uint64_t memory_size;
  uint64_t userspace_addr;
  uint64_t mmap_offset;
};
static_assert(sizeof(MemRegion) == 32);

struct MemTable {
  uint32_t nregions;
  uint32_t padding;
  MemRegion regions[kMaxMemRegions];
};
static_assert(sizeof(MemTable) == 8 + 32 * kMaxMemRegions);

// ADD_MEM_REG / REM_MEM_REG payload.
struct SingleMemRegion {
  uint64_t padding;
  MemRegion region;
};
static_assert(sizeof(SingleMemRegion) == 40);

struct ConfigHeader {
  uint32_t offset;
  uint32_t size;
  uint32_t flags;
};
static_assert(sizeof(ConfigHeader) == 12);

// The largest payload either side sends or accepts.
constexpr uint32_t kMaxPayload = sizeof(ConfigHeader) + kMaxConfigSize;
static_assert(kMaxPayload >= sizeof(MemTable));

}  // namespace vdev::vu

#endif  // VDEV_VHOST_USER_H_
