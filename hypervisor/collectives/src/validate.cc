#include "validate.h"

namespace hz::coll::internal {
namespace {

// Total bytes of an IoVec, or false when an extent is malformed or the sum
// overflows.
bool TotalLength(const IoVec& v, uint64_t* total) {
  uint64_t sum = 0;
  for (const IoSpan& s : v) {
    if (s.len != 0 && s.data == nullptr) return false;
    if (__builtin_add_overflow(sum, static_cast<uint64_t>(s.len), &sum)) return false;
  }
  *total = sum;
  return true;
}

}  // namespace

bool IsReduction(Op op) {
  return op == Op::kAllReduce || op == Op::kReduce || op == Op::kReduceScatter;
}

bool IsRooted(Op op) {
  return op == Op::kBroadcast || op == Op::kReduce;
}

Status ValidateDesc(const OpDesc& d, uint32_t rank, uint32_t nranks) {
  if (static_cast<size_t>(d.op) >= kOpCount) return Status::InvalidArgument();
  uint64_t send_len = 0, recv_len = 0;
  if (!TotalLength(d.send, &send_len) || !TotalLength(d.recv, &recv_len)) {
    return Status::InvalidArgument();
  }
  if (d.op == Op::kBarrier) return Status::Ok();
  const size_t esize = DTypeSize(d.dtype);
  if (esize == 0) return Status::InvalidArgument();
  if (IsReduction(d.op) && d.redop >= kRedOpCount) return Status::InvalidArgument();
  if ((IsRooted(d.op) || d.op == Op::kSend || d.op == Op::kRecv) && d.peer >= nranks) {
    return Status::InvalidArgument();
  }
  uint64_t b = 0, pb = 0;
  if (__builtin_mul_overflow(d.count, static_cast<uint64_t>(esize), &b))
    return Status::InvalidArgument();
  const bool needs_pb =
      d.op == Op::kAllGather || d.op == Op::kReduceScatter || d.op == Op::kAllToAll;
  if (needs_pb && __builtin_mul_overflow(b, static_cast<uint64_t>(nranks), &pb)) {
    return Status::InvalidArgument();
  }
  uint64_t need_send = 0, need_recv = 0;
  const bool root = d.peer == rank;
  switch (d.op) {
    case Op::kAllReduce:
      need_send = need_recv = b;
      break;
    case Op::kBroadcast:
      need_send = root ? b : 0;
      need_recv = b;
      break;
    case Op::kReduce:
      need_send = b;
      need_recv = root ? b : 0;
      break;
    case Op::kAllGather:
      need_send = b;
      need_recv = pb;
      break;
    case Op::kReduceScatter:
      need_send = pb;
      need_recv = b;
      break;
    case Op::kAllToAll:
      need_send = need_recv = pb;
      break;
    case Op::kSend:
      need_send = b;
      break;
    case Op::kRecv:
      need_recv = b;
      break;
    case Op::kBarrier:
      break;
  }
  if (send_len < need_send || recv_len < need_recv) return Status::InvalidArgument();
  return Status::Ok();
}

bool SameCollective(const OpDesc& a, const OpDesc& b) {
  if (a.op != b.op) return false;
  if (a.op == Op::kBarrier) return true;
  if (a.count != b.count || a.dtype != b.dtype) return false;
  if (IsReduction(a.op) && a.redop != b.redop) return false;
  if (IsRooted(a.op) && a.peer != b.peer) return false;
  return true;
}

}  // namespace hz::coll::internal
