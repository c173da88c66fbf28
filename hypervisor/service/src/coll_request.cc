#include "coll_request.h"

#include <algorithm>

namespace hz::service {

namespace {

// The scalar fields, SPEC §7.4.8 in its order. Fields an opcode does not use
// must be zero.
uint32_t CheckFields(uint16_t opcode, const hz_coll_args& a, uint64_t nranks) {
  const bool reduces = hz_op_reduces(opcode);
  const bool uses_peer = hz_op_uses_peer(opcode);
  if (opcode == HZ_OP_BARRIER && (a.count != 0 || a.dtype != 0)) return HZ_S_EINVAL;
  if (!reduces && a.redop != 0) return HZ_S_EINVAL;
  if (!uses_peer && a.peer != 0) return HZ_S_EINVAL;
  if (uses_peer && a.peer >= nranks) return HZ_S_EINVAL;
  if (opcode != HZ_OP_BARRIER && hz_dtype_size(a.dtype) == 0) return HZ_S_EINVAL;
  if (reduces && a.redop >= HZ_REDOP_MAX) return HZ_S_EINVAL;
  return HZ_S_OK;
}

// Inline data (SPEC §7.2.4): the send data is the whole data segment; the
// receive space is the start of the result space.
uint32_t ResolveInline(const Request& req, const hz_slice& s, uint64_t need, bool write,
                       bool inline_data, coll::IoVec* out, CollPlan* plan) {
  if (s.reserved != 0) return HZ_S_ENOTSUP;
  if (!inline_data) return HZ_S_ENOTSUP;
  if (s.offset != 0 || s.length != need) return HZ_S_EINVAL;
  if (!write && s.length != req.data_len) return HZ_S_EINVAL;
  if (write && s.length > req.result_capacity) return HZ_S_ETOOSMALL;
  uint64_t base = write ? 0 : req.data_offset;
  const auto& segs = write ? req.chain->writable() : req.chain->readable();
  uint64_t left = need;
  for (const vdev::Segment& seg : segs) {
    if (left == 0) break;
    if (base >= seg.len) {
      base -= seg.len;
      continue;
    }
    uint64_t n = std::min<uint64_t>(left, seg.len - base);
    out->push_back({seg.data + base, static_cast<size_t>(n)});
    left -= n;
    base = 0;
  }
  if (write) plan->result_len = static_cast<uint32_t>(need);
  return HZ_S_OK;
}

// Resolves one slice into host spans, pinning its region.
uint32_t ResolveSlice(const Request& req, const hz_slice& s, uint64_t need, bool write,
                      bool inline_data, const RegionTable& regions, coll::IoVec* out,
                      CollPlan* plan) {
  if (s.region_id == HZ_REGION_NONE) {
    if (s.reserved != 0) return HZ_S_ENOTSUP;
    if (s.offset != 0 || s.length != 0) return HZ_S_EINVAL;
    // NONE stands for "no buffer": fine where nothing is needed (B = 0).
    return need == 0 ? HZ_S_OK : HZ_S_EINVAL;
  }
  if (s.region_id == HZ_REGION_INLINE) {
    return ResolveInline(req, s, need, write, inline_data, out, plan);
  }
  RegionPin pin;
  uint32_t st = regions.Resolve(s, need, write ? HZ_REGION_F_WRITE : HZ_REGION_F_READ, out, &pin);
  if (st == HZ_S_OK) plan->pins.push_back(std::move(pin));
  return st;
}

// Send and recv in one region may overlap only in the in-place forms of
// SPEC §7.4.7. b: count elements of one rank.
bool OverlapAllowed(uint16_t opcode, const hz_slice& s, const hz_slice& r, uint64_t b,
                    uint32_t rank) {
  const bool overlap = s.region_id == r.region_id && s.region_id != HZ_REGION_NONE &&
                       s.region_id != HZ_REGION_INLINE && s.length != 0 && r.length != 0 &&
                       s.offset < r.offset + r.length && r.offset < s.offset + s.length;
  if (!overlap) return true;
  const uint64_t rank_off = b * rank;  // <= nb, no overflow
  switch (opcode) {
    case HZ_OP_ALLREDUCE:
    case HZ_OP_BROADCAST:
    case HZ_OP_REDUCE:
      return s.offset == r.offset && s.length == r.length;
    case HZ_OP_ALLGATHER:
      return r.offset <= UINT64_MAX - rank_off && s.offset == r.offset + rank_off;
    case HZ_OP_REDUCE_SCATTER:
      return s.offset <= UINT64_MAX - rank_off && r.offset == s.offset + rank_off;
    default:
      return false;
  }
}

}  // namespace

Reply PlanCollective(const Request& req, const hz_coll_args& a, const CommMember& member,
                     bool inline_data, const RegionTable& regions, CollPlan* plan) {
  const uint16_t opcode = req.hdr.opcode;
  const uint64_t nranks = member.nranks();
  if (uint32_t st = CheckFields(opcode, a, nranks); st != HZ_S_OK) return Reply::Error(st);
  // Bytes each slice must have (SPEC §7.4.2); 0 means the slice must be NONE.
  uint64_t send_need = 0, recv_need = 0;
  if (hz_coll_bytes(opcode, a.count, a.dtype, nranks, a.peer == member.rank(), &send_need,
                    &recv_need) != HZ_S_OK) {
    return Reply::Error(HZ_S_EINVAL);
  }
  const uint64_t b = a.count * hz_dtype_size(a.dtype);  // hz_coll_bytes checked that it fits
  // A slice that is not needed must be all zero (NONE).
  if (send_need == 0 && a.send.region_id != HZ_REGION_NONE && b != 0) {
    return Reply::Error(HZ_S_EINVAL, HZ_DETAIL_SEND);
  }
  if (recv_need == 0 && a.recv.region_id != HZ_REGION_NONE && b != 0) {
    return Reply::Error(HZ_S_EINVAL, HZ_DETAIL_RECV);
  }
  // The data segment carries inline send data and nothing else.
  if (a.send.region_id != HZ_REGION_INLINE && req.data_len != 0) {
    return Reply::Error(HZ_S_EINVAL, HZ_DETAIL_SEND);
  }

  coll::OpDesc& d = plan->desc;
  if (uint32_t st =
          ResolveSlice(req, a.send, send_need, false, inline_data, regions, &d.send, plan);
      st != HZ_S_OK) {
    return Reply::Error(st, HZ_DETAIL_SEND);
  }
  if (uint32_t st = ResolveSlice(req, a.recv, recv_need, true, inline_data, regions, &d.recv, plan);
      st != HZ_S_OK) {
    // ETOOSMALL's detail is the result space an inline recv needs (SPEC §7.2.4).
    return Reply::Error(st,
                        st == HZ_S_ETOOSMALL ? static_cast<uint32_t>(recv_need) : HZ_DETAIL_RECV);
  }
  if (!OverlapAllowed(opcode, a.send, a.recv, b, member.rank())) {
    return Reply::Error(HZ_S_EINVAL, HZ_DETAIL_RECV);
  }
  d.seq = a.seq;
  d.count = a.count;
  d.dtype = a.dtype;
  d.redop = a.redop;
  d.peer = a.peer;
  plan->bytes = std::max(send_need, recv_need);
  return Reply::Ok();
}

}  // namespace hz::service
