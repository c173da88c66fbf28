// The channel a running back-end and its successor talk over during a live
// upgrade: a connected Unix stream socket carrying framed messages, each with
// a payload and any number of file descriptors (SCM_RIGHTS; the kernel takes
// at most SCM_MAX_FD per sendmsg, so descriptors travel in frames of up to
// kFdsPerFrame).
//
// The conversation (upgrade.h runs it):
//   successor -> old   kHello   the snapshot versions it reads
//   old -> successor   kState   the encoded Snapshot and its descriptors
//   successor -> old   kResult  "serving", or why it refused
//
// The receiver trusts nothing: magic, kind, sizes and descriptor counts are
// checked, totals are bounded, and every call ends by its deadline.
#ifndef VDEV_HANDOFF_H_
#define VDEV_HANDOFF_H_

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vdev/message.h"

namespace vdev {

enum class HandoffKind : uint32_t { kHello = 1, kState = 2, kResult = 3 };

struct HandoffMessage {
  std::string payload;
  std::vector<UniqueFd> fds;
};

struct HandoffLimits {
  size_t max_payload = 64u << 20;
  size_t max_fds = 65536;
};

inline constexpr size_t kFdsPerFrame = 200;

using HandoffDeadline = std::chrono::steady_clock::time_point;

// Sends one message; the descriptors stay the caller's (the kernel passes
// copies). Returns an empty string, or why it failed.
std::string SendHandoff(int socket, HandoffKind kind, std::string_view payload,
                        std::span<const int> fds, HandoffDeadline deadline);

// Receives one message of the expected kind into *out.
std::string ReceiveHandoff(int socket, HandoffKind expected, HandoffMessage* out,
                           HandoffDeadline deadline, const HandoffLimits& limits = {});

}  // namespace vdev

#endif  // VDEV_HANDOFF_H_
