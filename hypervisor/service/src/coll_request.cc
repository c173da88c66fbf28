#include "coll_request.h"

#include <algorithm>
#include <limits>

namespace hz::service {

namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// The detail of an error about the recv slice (SPEC §7.4: send is 0).
constexpr uint32_t kDetailRecv = 1;

// Overflow-safe a * b into *out.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > kU64Max / a) return false;
  *out = a * b;
  return true;
}

bool Reduces(uint16_t opcode) {
  return opcode == HZ_OP_ALLREDUCE || opcode == HZ_OP_REDUCE || opcode == HZ_OP_REDUCE_SCATTER;
}

bool Rooted(uint16_t opcode) {
  return opcode == HZ_OP_BROADCAST || opcode == HZ_OP_REDUCE || opcode == HZ_OP_SEND ||
         opcode == HZ_OP_RECV;
}

// The scalar fields, SPEC §7.4.8 in its order. Fields an opcode does not use
// must be zero.
uint32_t CheckFields(uint16_t opcode, const hz_coll_args& a, uint64_t nranks) {
  const bool reduces = Reduces(opcode);
  const bool rooted = Rooted(opcode);
  if (opcode == HZ_OP_BARRIER && (a.count != 0 || a.dtype != 0)) return HZ_S_EINVAL;
  if (!reduces && a.redop != 0) return HZ_S_EINVAL;
  if (!rooted && a.peer != 0) return HZ_S_EINVAL;
  if (rooted && a.peer >= nranks) return HZ_S_EINVAL;
  if (opcode != HZ_OP_BARRIER && hz_dtype_size(a.dtype) == 0) return HZ_S_EINVAL;
  if (reduces && a.redop >= HZ_REDOP_MAX) return HZ_S_EINVAL;
  return HZ_S_OK;
}

// Bytes each slice must have (SPEC §7.4.2); 0 means the slice must be NONE.
// b: count elements; nb: count elements of every rank.
struct Needs {
  uint64_t send = 0;
  uint64_t recv = 0;
};

Needs SliceNeeds(uint16_t opcode, uint64_t b, uint64_t nb, bool root) {
  switch (opcode) {
    case HZ_OP_ALLREDUCE:
      return {b, b};
    case HZ_OP_BROADCAST:
      return {root ? b : 0, b};
    case HZ_OP_REDUCE:
      return {b, root ? b : 0};
    case HZ_OP_ALLGATHER:
      return {b, nb};
    case HZ_OP_REDUCE_SCATTER:
      return {nb, b};
    case HZ_OP_ALLTOALL:
      return {nb, nb};
    case HZ_OP_SEND:
      return {b, 0};
    case HZ_OP_RECV:
      return {0, b};
    default:
      return {};  // barrier
  }
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

bool CollOp(uint16_t opcode, coll::Op* op) {
  switch (opcode) {
    case HZ_OP_ALLREDUCE:
      *op = coll::Op::kAllReduce;
      return true;
    case HZ_OP_BROADCAST:
      *op = coll::Op::kBroadcast;
      return true;
    case HZ_OP_REDUCE:
      *op = coll::Op::kReduce;
      return true;
    case HZ_OP_ALLGATHER:
      *op = coll::Op::kAllGather;
      return true;
    case HZ_OP_REDUCE_SCATTER:
      *op = coll::Op::kReduceScatter;
      return true;
    case HZ_OP_ALLTOALL:
      *op = coll::Op::kAllToAll;
      return true;
    case HZ_OP_SEND:
      *op = coll::Op::kSend;
      return true;
    case HZ_OP_RECV:
      *op = coll::Op::kRecv;
      return true;
    case HZ_OP_BARRIER:
      *op = coll::Op::kBarrier;
      return true;
    default:
      return false;
  }
}

Reply PlanCollective(const Request& req, const hz_coll_args& a, const CommMember& member,
                     bool inline_data, const RegionTable& regions, CollPlan* plan) {
  const uint16_t opcode = req.hdr.opcode;
  const uint64_t nranks = member.nranks();
  if (uint32_t st = CheckFields(opcode, a, nranks); st != HZ_S_OK) return Reply::Error(st);
  uint64_t b = 0, nb = 0;
  if (!MulOk(a.count, hz_dtype_size(a.dtype), &b) || !MulOk(b, nranks, &nb)) {
    return Reply::Error(HZ_S_EINVAL);
  }
  const Needs need = SliceNeeds(opcode, b, nb, a.peer == member.rank());
  // A slice that is not needed must be all zero (NONE).
  if (need.send == 0 && a.send.region_id != HZ_REGION_NONE && b != 0) {
    return Reply::Error(HZ_S_EINVAL);
  }
  if (need.recv == 0 && a.recv.region_id != HZ_REGION_NONE && b != 0) {
    return Reply::Error(HZ_S_EINVAL, kDetailRecv);
  }
  // The data segment carries inline send data and nothing else.
  if (a.send.region_id != HZ_REGION_INLINE && req.data_len != 0) return Reply::Error(HZ_S_EINVAL);

  coll::OpDesc& d = plan->desc;
  if (uint32_t st =
          ResolveSlice(req, a.send, need.send, false, inline_data, regions, &d.send, plan);
      st != HZ_S_OK) {
    return Reply::Error(st);
  }
  if (uint32_t st = ResolveSlice(req, a.recv, need.recv, true, inline_data, regions, &d.recv, plan);
      st != HZ_S_OK) {
    // ETOOSMALL names the inline receive space the request needs.
    return Reply::Error(st, st == HZ_S_ETOOSMALL ? static_cast<uint32_t>(need.recv) : kDetailRecv);
  }
  if (!OverlapAllowed(opcode, a.send, a.recv, b, member.rank())) {
    return Reply::Error(HZ_S_EINVAL, kDetailRecv);
  }
  d.seq = a.seq;
  d.count = a.count;
  d.dtype = a.dtype;
  d.redop = a.redop;
  d.peer = a.peer;
  plan->bytes = std::max(need.send, need.recv);
  return Reply::Ok();
}

}  // namespace hz::service
