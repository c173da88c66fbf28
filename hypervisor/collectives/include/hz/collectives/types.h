// Value types of the collective engine. They mirror the wire contract
// (protocol/harmonaize.h) numerically but carry host pointers, never guest
// addresses: the host service translates slices into IoVecs before it calls
// the engine.
#ifndef HZ_COLLECTIVES_TYPES_H_
#define HZ_COLLECTIVES_TYPES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"

namespace hz::coll {

// A host view of guest bytes. The engine reads and writes exactly the bytes
// [data, data + len) and nothing else; data may have any alignment.
struct IoSpan {
  uint8_t* data = nullptr;
  size_t len = 0;
};

// A buffer: its extents in order, possibly many and unaligned. Elements may
// straddle two extents. Zero-length extents are allowed and skipped.
using IoVec = std::vector<IoSpan>;

// Why a communicator was aborted; numerically the detail of HZ_S_EABORTED
// (SPEC §7.3.5), so the service can report it to every rank unchanged.
enum class AbortCause : uint32_t {
  kNone = 0,
  kAbortCalled = 1,   // a rank called COMM_ABORT
  kSessionEnded = 2,  // a rank's session ended (reset, disconnect, new HELLO)
  kTimedOut = 3,      // an operation or the init timed out
  kDestroyed = 4,     // a rank destroyed its handle while others needed it
  kProvider = 5,      // the provider aborted it (host failure, shutdown)
};

const char* AbortCauseName(AbortCause c);

// Data types, numerically equal to enum hz_dtype (NCCL's ncclDataType_t).
enum class DType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFp16 = 6,
  kFp32 = 7,
  kFp64 = 8,
  kBf16 = 9,
};
inline constexpr uint8_t kDTypeCount = 10;

// Reduction operations, numerically equal to enum hz_redop (ncclRedOp_t).
enum class RedOp : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr uint8_t kRedOpCount = 5;

// A communicator unique id: HZ_UID_BYTES random bytes from getrandom().
struct Uid {
  std::array<uint8_t, 32> bytes{};
  friend bool operator==(const Uid&, const Uid&) = default;
  friend auto operator<=>(const Uid&, const Uid&) = default;
};

// A uid as 64 lowercase hex digits (the cluster store's keys, hand-over
// snapshots), and back; ParseUidHex refuses anything else.
std::string UidHex(const Uid& uid);
bool ParseUidHex(std::string_view hex, Uid* uid);

// Priority classes, numerically equal to enum hz_priority_class.
enum class Priority : uint16_t { kLow = 0, kNormal = 1, kHigh = 2 };
inline constexpr uint16_t kPriorityCount = 3;

// What the tenant declares for a communicator (struct hz_comm_constraints).
// The first rank to join fixes them for the whole communicator; later ranks'
// values are ignored.
struct Constraints {
  // Reduce in rank order 0,1,2,... so results are bit-identical whatever
  // the thread count or chunking. When cleared, the engine may reorder
  // (today it still reduces in rank order: its blocked schedule gains
  // nothing from another order on one host).
  bool deterministic = true;
  bool allow_lossy = false;     // across hosts only; no effect on one host
  uint16_t priority_class = 1;  // Priority; >= kPriorityCount is kInvalid
  uint16_t max_threads = 0;     // worker threads one op may use; 0: engine decides
  uint32_t timeout_ms = 0;      // 0: EngineOptions::default_timeout_ms
};

// What re-forms one rank's membership in the next process of the service
// (a live upgrade): the communicator's identity and constraints, and where
// its sequence of collectives stands.
struct MemberState {
  Uid uid;
  uint32_t nranks = 0;
  uint32_t rank = 0;
  Constraints constraints;
  uint64_t next_seq = 0;  // the first collective not executed yet
};

enum class Op : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr size_t kOpCount = 9;
const char* OpName(Op op);
// The operation of a wire opcode (HZ_OP_ALLREDUCE .. HZ_OP_BARRIER); false for
// any other opcode.
bool OpFromOpcode(uint16_t opcode, Op* out);
// The wire opcode of an operation, for the table helpers of
// protocol/harmonaize.h (hz_op_reduces, hz_coll_bytes, ...).
uint16_t OpcodeOf(Op op);

// One rank's part of an operation. count is in elements of dtype, with the
// meaning of hz_coll_args: per rank for all-reduce, broadcast and reduce, the
// send count for all-gather, the receive count for reduce-scatter, the count
// per peer for all-to-all, the message size for send and recv.
//
// Required bytes: hz_coll_bytes() of protocol/harmonaize.h (SPEC.md §7.4.2),
// with B = count * hz_dtype_size(dtype). A buffer may be longer, only its
// first bytes are touched; an unused buffer may be empty. In all-gather rank
// r's data lands at r*B; in all-to-all send block j goes to rank j's recv
// block r. For barrier count, dtype and redop are ignored; redop is checked
// only where hz_op_reduces() (all-reduce, reduce and reduce-scatter).
// send == recv (in place) is supported for every operation, including the
// NCCL in-place layouts of all-gather and reduce-scatter.
struct OpDesc {
  Op op = Op::kAllReduce;
  uint64_t seq = 0;  // collectives: per-communicator sequence, from 0
  uint64_t count = 0;
  uint8_t dtype = 0;  // DType value
  uint8_t redop = 0;  // RedOp value
  uint32_t peer = 0;  // root (broadcast, reduce) or peer rank (send, recv)
  IoVec send;
  IoVec recv;
};

// Completion of one operation. Called exactly once, from any thread: an
// engine worker, the engine's timer thread, or the thread that called
// Post/Init/Destroy/Abort/Shutdown (possibly before that call returns, e.g.
// for an invalid descriptor or when this post completes a small collective,
// which the engine may then execute inline). Never called with an engine lock
// held, so it may call back into the engine (except Destroy/Shutdown, see
// Engine).
using Done = std::function<void(Status)>;

}  // namespace hz::coll

#endif  // HZ_COLLECTIVES_TYPES_H_
