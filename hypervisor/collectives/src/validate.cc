#include "validate.h"

#include "protocol/harmonaize.h"

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

Status ValidateDesc(const OpDesc& d, uint32_t rank, uint32_t nranks) {
  if (static_cast<size_t>(d.op) >= kOpCount) return Status::InvalidArgument();
  uint64_t send_len = 0, recv_len = 0;
  if (!TotalLength(d.send, &send_len) || !TotalLength(d.recv, &recv_len)) {
    return Status::InvalidArgument();
  }
  if (d.op == Op::kBarrier) return Status::Ok();
  const uint16_t opcode = OpcodeOf(d.op);
  if (hz_op_reduces(opcode) && d.redop >= kRedOpCount) return Status::InvalidArgument();
  if (hz_op_uses_peer(opcode) && d.peer >= nranks) return Status::InvalidArgument();
  uint64_t need_send = 0, need_recv = 0;
  if (hz_coll_bytes(opcode, d.count, d.dtype, nranks, d.peer == rank, &need_send, &need_recv) !=
      HZ_S_OK) {
    return Status::InvalidArgument();
  }
  if (send_len < need_send || recv_len < need_recv) return Status::InvalidArgument();
  return Status::Ok();
}

bool SameCollective(const OpDesc& a, const OpDesc& b) {
  if (a.op != b.op) return false;
  if (a.op == Op::kBarrier) return true;
  if (a.count != b.count || a.dtype != b.dtype) return false;
  const uint16_t opcode = OpcodeOf(a.op);
  if (hz_op_reduces(opcode) && a.redop != b.redop) return false;
  if (hz_op_rooted(opcode) && a.peer != b.peer) return false;
  return true;
}

}  // namespace hz::coll::internal
