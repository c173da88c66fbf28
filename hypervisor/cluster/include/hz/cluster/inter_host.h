// The inter-host leg of a communicator that spans hosts: one member per host
// holding ranks, exchanging that host's partial results. Narrow on purpose, so
// that Open MPI or UCX could carry it instead of Gloo: a group is formed once
// and then runs whole-buffer operations, in place, one at a time, and beside
// them tagged point-to-point messages between two members.
#ifndef HZ_CLUSTER_INTER_HOST_H_
#define HZ_CLUSTER_INTER_HOST_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>

#include "hz/cluster/redis_connection.h"
#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::cluster {

// kF16 (IEEE binary16) and kBF16 (bfloat16, the upper half of an fp32): each
// step combines two values in fp32 and rounds to nearest even once, with the
// conversions of hz/common/half.h (kBF16 is also the lossy wire format of
// fp32 sums).
enum class InterHostType : uint8_t { kF32, kF64, kI8, kU8, kI32, kU32, kI64, kU64, kBF16, kF16 };

enum class InterHostOp : uint8_t { kSum, kProd, kMin, kMax };
// The all-reduce algorithms Gloo offers for this use: ring (bandwidth-optimal,
// 2(n-1) steps), bcube and recursive halving and doubling (2 log2(n) steps;
// fewer round trips, the same bytes in theory). Which is fastest for a size
// depends on the links, so it is measured (LegCostModel).
enum class InterHostAlgorithm : uint8_t { kRing, kBcube, kHalvingDoubling };
inline constexpr InterHostAlgorithm kInterHostAlgorithms[] = {
    InterHostAlgorithm::kRing, InterHostAlgorithm::kBcube, InterHostAlgorithm::kHalvingDoubling};
const char* InterHostAlgorithmName(InterHostAlgorithm algorithm);  // "ring", "bcube", ...

class InterHostGroup {
 public:
  virtual ~InterHostGroup() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;

  // Every member's `data` (count elements) becomes the reduction of all
  // members' buffers (integers wrap). The errors of every operation: kTimedOut when a member
  // does not take part within the group's timeout (it hangs, or a partition
  // cut it off), kIoError when a member's connection fails (it died); the
  // message names the cause. After an error the group is unusable.
  virtual Status AllReduce(void* data, size_t count, InterHostType type, InterHostOp op,
                           InterHostAlgorithm algorithm) = 0;
  // Every member's `data` becomes root's.
  virtual Status Broadcast(void* data, size_t bytes, uint32_t root) = 0;
  // `out` holds size() * bytes: member r's `in` lands at r * bytes.
  virtual Status AllGather(const void* in, void* out, size_t bytes) = 0;
  virtual Status Barrier() = 0;

  // Point-to-point, beside the collectives above and from any thread, several
  // at once: Send's `bytes` at data arrive in member `peer`'s Recv of the same
  // tag (below kMaxTag; one message per tag and direction at a time, in
  // order). Each blocks until its message has moved, at most `timeout`:
  // kTimedOut then, which like every error leaves the group unusable (the
  // other members' pending operations fail too).
  static constexpr uint64_t kMaxTag = uint64_t{1} << 56;
  virtual Status Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes,
                      std::chrono::milliseconds timeout) = 0;
  virtual Status Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes,
                      std::chrono::milliseconds timeout) = 0;

  // Ends the group for good, so that its members can form a new one (after
  // one of them was upgraded): this member's point-to-point waits return
  // kAborted at once, and its connections close, so that every other
  // member's operation with it fails at once too instead of at its timeout.
  // From any thread, while other threads may be inside Send or Recv; not
  // while this member runs a collective (those cannot be interrupted).
  virtual void Close() = 0;
};

struct GlooGroupOptions {
  RedisAddress store;        // the cluster store, where members meet
  std::string key;           // unique per group and formation (the store's key prefix included)
  std::string data_address;  // this host's IP address on the data network
  uint32_t rank = 0;
  uint32_t size = 0;
  // Bounds forming the group and each operation.
  std::chrono::milliseconds timeout{30000};
};

// What an all-reduce costs on a group, by algorithm, as measured on it: a
// line latency + bytes * per_byte through two sizes. The same on every member
// (each entry is the slowest member's), so that every member picks the same
// algorithm for the same size without asking the others.
struct LegCostModel {
  struct Line {
    double latency_s = 0;
    double per_byte_s = 0;
  };
  Line lines[std::size(kInterHostAlgorithms)];
  // The algorithm whose line is lowest at bytes (ties: the earlier one).
  InterHostAlgorithm Best(size_t bytes) const;
  double Seconds(InterHostAlgorithm algorithm, size_t bytes) const;
  // The rate the algorithm reaches on large buffers; 0 when it was not measurable.
  double BytesPerSecond(InterHostAlgorithm algorithm) const;
};

// Measures the model on a formed group: every member calls it at the same
// point of its sequence of operations. Each algorithm all-reduces a small
// fp32 buffer and one of large_bytes (the largest the caller passes to the
// leg, so that the line is exact where the bytes count most) a few times;
// the fastest run counts, as the least disturbed by noise; then the members
// take the maximum of each timing.
inline constexpr size_t kCalibrationSmallBytes = 4 << 10;
StatusOr<LegCostModel> CalibrateLeg(InterHostGroup& group, size_t large_bytes);

// Forms the group over Gloo's TCP transport; every member calls it with its
// own rank. kTimedOut when not every member arrived in time; kIoError when
// the store or a member cannot be reached.
StatusOr<std::unique_ptr<InterHostGroup>> ConnectGlooGroup(const GlooGroupOptions& options);

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_INTER_HOST_H_
