// The collectives of NCCL's API, each one Op (see nccl_op.cc).
#include "nccl_op.h"

using hz::nccl::Make;
using hz::nccl::Op;
using hz::nccl::Submit;

extern "C" {

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  Op o = Make(Op::kAllReduce, "ncclAllReduce", comm, sendbuff, recvbuff, count, datatype, stream);
  o.redop = op;
  return Submit(o);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  Op o = Make(Op::kBroadcast, "ncclBroadcast", comm, sendbuff, recvbuff, count, datatype, stream);
  o.root = root;
  return Submit(o);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  Op o = Make(Op::kBroadcast, "ncclBcast", comm, buff, buff, count, datatype, stream);
  o.root = root;
  return Submit(o);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  Op o = Make(Op::kReduce, "ncclReduce", comm, sendbuff, recvbuff, count, datatype, stream);
  o.redop = op;
  o.root = root;
  return Submit(o);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Submit(
      Make(Op::kAllGather, "ncclAllGather", comm, sendbuff, recvbuff, sendcount, datatype, stream));
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  Op o = Make(Op::kReduceScatter, "ncclReduceScatter", comm, sendbuff, recvbuff, recvcount,
              datatype, stream);
  o.redop = op;
  return Submit(o);
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Submit(
      Make(Op::kAllToAll, "ncclAlltoAll", comm, sendbuff, recvbuff, count, datatype, stream));
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclAllReduce)
HZ_NCCL_ALIAS(ncclBroadcast)
HZ_NCCL_ALIAS(ncclBcast)
HZ_NCCL_ALIAS(ncclReduce)
HZ_NCCL_ALIAS(ncclAllGather)
HZ_NCCL_ALIAS(ncclReduceScatter)
HZ_NCCL_ALIAS(ncclAlltoAll)
