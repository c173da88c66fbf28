// How an operation runs: validation, then at once (blocking) or at
// ncclGroupEnd (all of a group issued asynchronously, then waited for).
#include <cstring>
#include <string>
#include <vector>

#include "nccl_op.h"

namespace hz::nccl {
namespace {

thread_local std::vector<Op> pending;

// NCCL's datatype and operator values are the wire's (Dt and Rop cast, and
// sizes come from hz_dtype_size).
static_assert(static_cast<int>(ncclInt8) == HZ_INT8 && static_cast<int>(ncclUint8) == HZ_UINT8);
static_assert(static_cast<int>(ncclInt32) == HZ_INT32 && static_cast<int>(ncclUint32) == HZ_UINT32);
static_assert(static_cast<int>(ncclInt64) == HZ_INT64 && static_cast<int>(ncclUint64) == HZ_UINT64);
static_assert(static_cast<int>(ncclFloat16) == HZ_FP16 &&
              static_cast<int>(ncclBfloat16) == HZ_BF16);
static_assert(static_cast<int>(ncclFloat32) == HZ_FP32 && static_cast<int>(ncclFloat64) == HZ_FP64);
static_assert(static_cast<int>(ncclSum) == HZ_SUM && static_cast<int>(ncclProd) == HZ_PROD);
static_assert(static_cast<int>(ncclMax) == HZ_MAX && static_cast<int>(ncclMin) == HZ_MIN);
static_assert(static_cast<int>(ncclAvg) == HZ_AVG && static_cast<int>(ncclNumOps) == HZ_REDOP_MAX);

// The wire opcode of a call: Op::Kind follows the opcodes' order.
uint16_t Opcode(Op::Kind kind) {
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kBroadcast) == HZ_OP_BROADCAST);
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kReduce) == HZ_OP_REDUCE);
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kAllGather) == HZ_OP_ALLGATHER);
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kReduceScatter) == HZ_OP_REDUCE_SCATTER);
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kAllToAll) == HZ_OP_ALLTOALL);
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kSend) == HZ_OP_SEND);
  static_assert(HZ_OP_ALLREDUCE + static_cast<int>(Op::kRecv) == HZ_OP_RECV);
  return static_cast<uint16_t>(HZ_OP_ALLREDUCE + static_cast<int>(kind));
}

// Checks the arguments and fills in the byte counts (SPEC §7.4.2).
ncclResult_t Validate(Op& op) {
  const std::string name = op.name;
  const uint16_t opcode = Opcode(op.kind);
  if (op.comm == nullptr) return Fail(ncclInvalidArgument, name + ": comm is NULL");
  if (ncclResult_t r = CheckType(op.dtype); r != ncclSuccess)
    return Fail(r, name + ": " + LastError());
  if (hz_op_reduces(opcode)) {
    if (ncclResult_t r = CheckOp(op.redop, op.comm); r != ncclSuccess)
      return Fail(r, name + ": " + LastError());
    if (ncclResult_t r = ResolvePreMul(op); r != ncclSuccess) return r;
  }
  if (hz_op_uses_peer(opcode) && (op.root < 0 || op.root >= op.comm->nranks))
    return Fail(ncclInvalidArgument, name + ": " +
                                         (hz_op_point_to_point(opcode) ? "peer " : "root ") +
                                         std::to_string(op.root) + " is outside [0, " +
                                         std::to_string(op.comm->nranks) + ")");
  uint64_t send_bytes = 0, recv_bytes = 0;
  if (hz_coll_bytes(opcode, op.count, static_cast<unsigned>(op.dtype),
                    static_cast<uint64_t>(op.comm->nranks), op.comm->rank == op.root, &send_bytes,
                    &recv_bytes) != HZ_S_OK)
    return Fail(ncclInvalidArgument,
                name + ": count " + std::to_string(op.count) + " is too large");
  op.send_bytes = send_bytes;
  op.recv_bytes = recv_bytes;
  if ((op.send_bytes > 0 && op.send == nullptr) || (op.recv_bytes > 0 && op.recv == nullptr))
    return Fail(ncclInvalidArgument, name + ": a buffer is NULL");
  return ncclSuccess;
}

hz_dtype Dt(const Op& op) {
  return static_cast<hz_dtype>(op.dtype);
}
hz_redop Rop(const Op& op) {
  return static_cast<hz_redop>(op.redop);
}
uint32_t Root(const Op& op) {
  return static_cast<uint32_t>(op.root);
}

int RunBlocking(const Op& op) {
  hz_comm_t* c = op.comm->hz;
  switch (op.kind) {
    case Op::kAllReduce:
      return hz_allreduce(c, op.send, op.recv, op.count, Dt(op), Rop(op));
    case Op::kBroadcast:
      return hz_broadcast(c, op.send, op.recv, op.count, Dt(op), Root(op));
    case Op::kReduce:
      return hz_reduce(c, op.send, op.recv, op.count, Dt(op), Rop(op), Root(op));
    case Op::kAllGather:
      return hz_allgather(c, op.send, op.recv, op.count, Dt(op));
    case Op::kReduceScatter:
      return hz_reduce_scatter(c, op.send, op.recv, op.count, Dt(op), Rop(op));
    case Op::kAllToAll:
      return hz_alltoall(c, op.send, op.recv, op.count, Dt(op));
    case Op::kSend:
      return hz_send(c, op.send, op.count, Dt(op), Root(op));
    case Op::kRecv:
      return hz_recv(c, op.recv, op.count, Dt(op), Root(op));
  }
  return HZ_EINVAL;
}

int Start(const Op& op, hz_request_t** req) {
  hz_comm_t* c = op.comm->hz;
  switch (op.kind) {
    case Op::kAllReduce:
      return hz_allreduce_async(c, op.send, op.recv, op.count, Dt(op), Rop(op), req);
    case Op::kBroadcast:
      return hz_broadcast_async(c, op.send, op.recv, op.count, Dt(op), Root(op), req);
    case Op::kReduce:
      return hz_reduce_async(c, op.send, op.recv, op.count, Dt(op), Rop(op), Root(op), req);
    case Op::kAllGather:
      return hz_allgather_async(c, op.send, op.recv, op.count, Dt(op), req);
    case Op::kReduceScatter:
      return hz_reduce_scatter_async(c, op.send, op.recv, op.count, Dt(op), Rop(op), req);
    case Op::kAllToAll:
      return hz_alltoall_async(c, op.send, op.recv, op.count, Dt(op), req);
    case Op::kSend:
      return hz_send_async(c, op.send, op.count, Dt(op), Root(op), req);
    case Op::kRecv:
      return hz_recv_async(c, op.recv, op.count, Dt(op), Root(op), req);
  }
  return HZ_EINVAL;
}

// Host copies of device buffers, then the pre-multiplied input.
ncclResult_t Prepare(Op& op) {
  if (ncclResult_t r = StageIn(op); r != ncclSuccess) return r;
  if (ncclResult_t r = PreMultiply(op); r != ncclSuccess) {
    StageDrop(op);
    return r;
  }
  return ncclSuccess;
}

bool IsSelf(const Op& op) {
  return (op.kind == Op::kSend || op.kind == Op::kRecv) && op.root == op.comm->rank;
}

// A rank's sends to itself are copied into its receives from itself, in
// order, as NCCL does (the device has no loopback peer).
ncclResult_t CopySelf(std::vector<Op>& ops) {
  std::vector<Op> rest, sends, recvs;
  for (Op& op : ops) {
    if (!IsSelf(op)) {
      rest.push_back(op);
    } else {
      (op.kind == Op::kSend ? sends : recvs).push_back(op);
    }
  }
  ops.swap(rest);
  for (size_t i = 0; i < sends.size() || i < recvs.size(); ++i) {
    if (i >= sends.size() || i >= recvs.size() || recvs[i].comm != sends[i].comm ||
        recvs[i].recv_bytes != sends[i].send_bytes)
      return Fail(ncclInvalidUsage,
                  "ncclGroupEnd: a send to self has no matching receive "
                  "from self of the same size");
    Op& r = recvs[i];
    if (ncclResult_t res = StageIn(sends[i]); res != ncclSuccess) return res;
    if (ncclResult_t res = StageIn(r); res != ncclSuccess) {
      StageDrop(sends[i]);
      return res;
    }
    std::memmove(r.recv, sends[i].send, r.recv_bytes);
    StageDrop(sends[i]);
    if (ncclResult_t res = StageOut(r); res != ncclSuccess) return res;
  }
  return ncclSuccess;
}

}  // namespace

// Issues every pending operation asynchronously (so that sends and receives
// between the same ranks progress together), then waits for all of them.
ncclResult_t Flush() {
  std::vector<Op> ops;
  ops.swap(pending);
  ncclResult_t first = CopySelf(ops);
  std::string message = first == ncclSuccess ? "" : LastError();
  auto note = [&](ncclResult_t r) {
    if (r != ncclSuccess && first == ncclSuccess) {
      first = r;
      message = LastError();
    }
  };
  std::vector<hz_request_t*> reqs(ops.size(), nullptr);
  std::vector<bool> staged(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    ncclResult_t r = Prepare(ops[i]);
    note(r);
    staged[i] = r == ncclSuccess;
    if (r != ncclSuccess) continue;
    int err = Start(ops[i], &reqs[i]);
    if (err != HZ_OK) {
      note(FromHz(err, ops[i].name, ops[i].comm));
      reqs[i] = nullptr;
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (reqs[i] == nullptr) {
      if (staged[i]) StageDrop(ops[i]);
      continue;
    }
    int err = hz_wait(reqs[i], -1);
    if (err != HZ_OK) {
      note(FromHz(err, ops[i].name, ops[i].comm));
      StageDrop(ops[i]);
    } else {
      note(StageOut(ops[i]));
    }
  }
  if (first != ncclSuccess) return Fail(first, "ncclGroupEnd: " + message);
  return ncclSuccess;
}

Op Make(Op::Kind kind, const char* name, ncclComm_t comm, const void* send, void* recv,
        size_t count, ncclDataType_t dt, cudaStream_t stream) {
  Op op;
  op.kind = kind;
  op.name = name;
  op.comm = comm;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.dtype = dt;
  op.stream = stream;
  return op;
}

ncclResult_t Submit(Op op) {
  if (ncclResult_t r = Validate(op); r != ncclSuccess) return r;
  if (ncclResult_t r = CheckUsable(op.comm, op.name); r != ncclSuccess) return r;
  if (op.count == 0) return ncclSuccess;  // as NCCL: nothing to do
  if (Logging(Level::kTrace))
    Log(Level::kTrace, "%s: comm %p rank %d count %zu datatype %d op %d root/peer %d", op.name,
        static_cast<void*>(op.comm), op.comm->rank, op.count, static_cast<int>(op.dtype),
        static_cast<int>(op.redop), op.root);
  if (GroupDepth() > 0) {
    pending.push_back(op);
    return ncclSuccess;
  }
  if (ncclResult_t r = Prepare(op); r != ncclSuccess) return r;
  int err = RunBlocking(op);
  if (err != HZ_OK) {
    StageDrop(op);
    return FromHz(err, op.name, op.comm);
  }
  return StageOut(op);
}

void DiscardPending() {
  pending.clear();
}

}  // namespace hz::nccl
