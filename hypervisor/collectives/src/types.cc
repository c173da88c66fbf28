// Names and sizes of the engine's value types, checked against the wire
// contract so that a renumbering there fails the build here.
#include "hz/collectives/types.h"
#include "hz/collectives/engine.h"

#include "protocol/harmonaize.h"

namespace hz::coll {

static_assert(static_cast<uint8_t>(DType::kFp16) == HZ_FP16);
static_assert(static_cast<uint8_t>(DType::kFp32) == HZ_FP32);
static_assert(static_cast<uint8_t>(DType::kFp64) == HZ_FP64);
static_assert(static_cast<uint8_t>(DType::kBf16) == HZ_BF16);
static_assert(kDTypeCount == HZ_DTYPE_MAX);
static_assert(static_cast<uint8_t>(RedOp::kMax) == HZ_MAX);
static_assert(static_cast<uint8_t>(RedOp::kMin) == HZ_MIN);
static_assert(static_cast<uint8_t>(RedOp::kAvg) == HZ_AVG);
static_assert(kRedOpCount == HZ_REDOP_MAX);
static_assert(kPriorityCount == HZ_PRIO_MAX);
static_assert(sizeof(Uid{}.bytes) == HZ_UID_BYTES);

std::string UidHex(const Uid& uid) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * uid.bytes.size());
  for (uint8_t b : uid.bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool ParseUidHex(std::string_view hex, Uid* uid) {
  if (hex.size() != 2 * uid->bytes.size()) return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < uid->bytes.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    uid->bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

const char* AbortCauseName(AbortCause c) {
  switch (c) {
    case AbortCause::kNone:
      return "none";
    case AbortCause::kAbortCalled:
      return "abort-called";
    case AbortCause::kSessionEnded:
      return "session-ended";
    case AbortCause::kTimedOut:
      return "timed-out";
    case AbortCause::kDestroyed:
      return "destroyed";
    case AbortCause::kProvider:
      return "provider";
  }
  return "unknown";
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "allreduce";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kReduce:
      return "reduce";
    case Op::kAllGather:
      return "allgather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllToAll:
      return "alltoall";
    case Op::kSend:
      return "send";
    case Op::kRecv:
      return "recv";
    case Op::kBarrier:
      return "barrier";
  }
  return "unknown";
}

bool OpFromOpcode(uint16_t opcode, Op* out) {
  static_assert(HZ_OP_BARRIER - HZ_OP_ALLREDUCE + 1 == kOpCount);
  static_assert(HZ_OP_SEND - HZ_OP_ALLREDUCE == static_cast<int>(Op::kSend));
  static_assert(HZ_OP_ALLTOALL - HZ_OP_ALLREDUCE == static_cast<int>(Op::kAllToAll));
  static_assert(HZ_OP_BARRIER - HZ_OP_ALLREDUCE == static_cast<int>(Op::kBarrier));
  if (out == nullptr || opcode < HZ_OP_ALLREDUCE || opcode > HZ_OP_BARRIER) return false;
  *out = static_cast<Op>(opcode - HZ_OP_ALLREDUCE);
  return true;
}

uint16_t OpcodeOf(Op op) {
  // The same numbering as OpFromOpcode, checked by its static_asserts.
  return static_cast<uint16_t>(HZ_OP_ALLREDUCE + static_cast<int>(op));
}

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kNone:
      return "none";
    case Algorithm::kInline:
      return "inline";
    case Algorithm::kSingleThread:
      return "single_thread";
    case Algorithm::kBlockedParallel:
      return "blocked_parallel";
  }
  return "unknown";
}

const char* CommStateName(CommState s) {
  switch (s) {
    case CommState::kJoining:
      return "joining";
    case CommState::kActive:
      return "active";
    case CommState::kAborted:
      return "aborted";
  }
  return "unknown";
}

}  // namespace hz::coll
