// One collective or point-to-point call, validated, as it is issued to
// libharmonaize either at once or at ncclGroupEnd.
#ifndef HZ_GUEST_NCCL_SRC_NCCL_OP_H_
#define HZ_GUEST_NCCL_SRC_NCCL_OP_H_

#include <cstddef>

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
};

// Replaces device pointers with registered host copies of their contents,
// copied on op.stream. A no-op for host memory and in builds without CUDA.
ncclResult_t StageIn(Op& op);
// Copies a staged receive buffer back to the device and frees the copies.
ncclResult_t StageOut(Op& op);
// Frees the copies without copying back (after a failure).
void StageDrop(Op& op);

}  // namespace hz::nccl

#endif  // HZ_GUEST_NCCL_SRC_NCCL_OP_H_
