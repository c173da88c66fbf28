// One collective or point-to-point call, validated, as it is issued to
// libharmonaize either at once or at ncclGroupEnd.
#ifndef HZ_GUEST_NCCL_SRC_NCCL_OP_H_
#define HZ_GUEST_NCCL_SRC_NCCL_OP_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "nccl_internal.h"

namespace hz::nccl {

struct Op {
  enum Kind {
    kAllReduce,
    kBroadcast,
    kReduce,
    kAllGather,
    kReduceScatter,
    kAllToAll,
    kSend,
    kRecv
  };
  Kind kind = kAllReduce;
  const char* name = "";
  ncclComm* comm = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  int root = 0;  // root, or peer for send/recv
  cudaStream_t stream = nullptr;
  size_t send_bytes = 0;  // bytes read from send (0: send is unused)
  size_t recv_bytes = 0;  // bytes written to recv (0: recv is unused)

  // Device-memory staging (nccl_stage.cc): the caller's pointers while the
  // host copies stand in for them.
  const void* user_send = nullptr;
  void* user_recv = nullptr;
  void* host_block = nullptr;

  // A PreMulSum operator, copied at the call (the program may destroy the
  // operator before a group runs), and the pre-multiplied input.
  PreMul premul;
  bool has_premul = false;
  std::shared_ptr<std::vector<unsigned char>> scratch;
};

// A call's operation with its common arguments filled in.
Op Make(Op::Kind kind, const char* name, ncclComm_t comm, const void* send, void* recv,
        size_t count, ncclDataType_t dt, cudaStream_t stream);
// Validates op, then runs it now or keeps it for ncclGroupEnd.
ncclResult_t Submit(Op op);
// Issues and waits for every pending operation of this thread's group.
ncclResult_t Flush();
// Forgets the pending operations (a group ended without running them).
void DiscardPending();

// Looks up op's PreMulSum operator (nccl_redop.cc); a no-op for built-in ones.
ncclResult_t ResolvePreMul(Op& op);
// Replaces op's input with its pre-multiplied copy and its operator with a
// sum; after StageIn, so the input is in host memory.
ncclResult_t PreMultiply(Op& op);

// Replaces device pointers with registered host copies of their contents,
// copied on op.stream. A no-op for host memory and in builds without CUDA.
ncclResult_t StageIn(Op& op);
// Copies a staged receive buffer back to the device and frees the copies.
ncclResult_t StageOut(Op& op);
// Frees the copies without copying back (after a failure).
void StageDrop(Op& op);

}  // namespace hz::nccl

#endif  // HZ_GUEST_NCCL_SRC_NCCL_OP_H_
