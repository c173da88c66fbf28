// Point-to-point operations, gather and scatter (built from them, as NCCL
// builds them), and groups.
#include <cstdint>
#include <string>

#include "nccl_op.h"

namespace hz::nccl {
namespace {

constexpr unsigned int kSimInfoMagic = 0x74685283;  // NCCL_SIM_INFO_INITIALIZER's

// Everything a gather or scatter checks before its first send or receive is
// queued, so that none of them fails half-way through the group.
ncclResult_t CheckRooted(const std::string& name, ncclComm* comm, size_t count, ncclDataType_t dt,
                         int root, const void* root_buf, const void* own_buf) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, name + ": comm is NULL");
  if (ncclResult_t r = CheckType(dt); r != ncclSuccess) return Fail(r, name + ": " + LastError());
  if (root < 0 || root >= comm->nranks)
    return Fail(ncclInvalidArgument, name + ": root " + std::to_string(root) + " is outside [0, " +
                                         std::to_string(comm->nranks) + ")");
  if (ncclResult_t r = CheckUsable(comm, name.c_str()); r != ncclSuccess) return r;
  const size_t size = hz_dtype_size(static_cast<unsigned>(dt));
  if (count > SIZE_MAX / size / static_cast<size_t>(comm->nranks))
    return Fail(ncclInvalidArgument, name + ": count " + std::to_string(count) + " is too large");
  if (count > 0 && (own_buf == nullptr || (comm->rank == root && root_buf == nullptr)))
    return Fail(ncclInvalidArgument, name + ": a buffer is NULL");
  return ncclSuccess;
}

// Ends the group a gather or scatter opened around its operations: runs them
// unless the program's own group is still open.
ncclResult_t EndOwnGroup(ncclResult_t queued) {
  int& depth = GroupDepth();
  --depth;
  if (queued != ncclSuccess) {
    if (depth == 0) DiscardPending();
    return queued;
  }
  return depth == 0 ? Flush() : ncclSuccess;
}

// Root receives count elements from every rank (itself included) at
// recv + rank * count; every rank sends its count elements to root.
ncclResult_t Gather(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                    ncclComm* comm, cudaStream_t stream) {
  const size_t bytes = count * hz_dtype_size(static_cast<unsigned>(dt));
  ++GroupDepth();
  ncclResult_t r = ncclSuccess;
  for (int p = 0; comm->rank == root && p < comm->nranks && r == ncclSuccess; ++p) {
    Op o = Make(Op::kRecv, "ncclGather", comm, nullptr, static_cast<char*>(recv) + p * bytes, count,
                dt, stream);
    o.root = p;
    r = Submit(o);
  }
  if (r == ncclSuccess) {
    Op o = Make(Op::kSend, "ncclGather", comm, send, nullptr, count, dt, stream);
    o.root = root;
    r = Submit(o);
  }
  return EndOwnGroup(r);
}

// The mirror image: root sends send + rank * count to every rank.
ncclResult_t Scatter(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                     ncclComm* comm, cudaStream_t stream) {
  const size_t bytes = count * hz_dtype_size(static_cast<unsigned>(dt));
  ++GroupDepth();
  ncclResult_t r = ncclSuccess;
  for (int p = 0; comm->rank == root && p < comm->nranks && r == ncclSuccess; ++p) {
    Op o = Make(Op::kSend, "ncclScatter", comm, static_cast<const char*>(send) + p * bytes, nullptr,
                count, dt, stream);
    o.root = p;
    r = Submit(o);
  }
  if (r == ncclSuccess) {
    Op o = Make(Op::kRecv, "ncclScatter", comm, nullptr, recv, count, dt, stream);
    o.root = root;
    r = Submit(o);
  }
  return EndOwnGroup(r);
}

}  // namespace
}  // namespace hz::nccl

using hz::nccl::Fail;
using hz::nccl::Make;
using hz::nccl::Op;
using hz::nccl::Submit;

extern "C" {

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Op o = Make(Op::kSend, "ncclSend", comm, sendbuff, nullptr, count, datatype, stream);
  o.root = peer;
  return Submit(o);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Op o = Make(Op::kRecv, "ncclRecv", comm, nullptr, recvbuff, count, datatype, stream);
  o.root = peer;
  return Submit(o);
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r =
          hz::nccl::CheckRooted("ncclGather", comm, count, datatype, root, recvbuff, sendbuff);
      r != ncclSuccess || count == 0)
    return r;
  return hz::nccl::Gather(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r =
          hz::nccl::CheckRooted("ncclScatter", comm, count, datatype, root, sendbuff, recvbuff);
      r != ncclSuccess || count == 0)
    return r;
  return hz::nccl::Scatter(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

ncclResult_t ncclGroupStart(void) {
  ++hz::nccl::GroupDepth();
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  int& depth = hz::nccl::GroupDepth();
  if (depth == 0)
    return hz::nccl::Fail(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  if (--depth > 0) return ncclSuccess;
  return hz::nccl::Flush();
}

// The device has no model to estimate a group's time from, so the simulation
// cannot be answered; the group is still ended (its operations dropped, not
// run) so that the program's group state stays balanced.
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr || simInfo->magic != hz::nccl::kSimInfoMagic)
    return Fail(ncclInvalidArgument,
                "ncclGroupSimulateEnd: simInfo must be set with NCCL_SIM_INFO_INITIALIZER");
  int& depth = hz::nccl::GroupDepth();
  if (depth == 0)
    return Fail(ncclInvalidUsage, "ncclGroupSimulateEnd without a matching ncclGroupStart");
  if (--depth == 0) hz::nccl::DiscardPending();
  simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
  return Fail(ncclInvalidUsage,
              "ncclGroupSimulateEnd: the HarmonAIze device has no performance model to "
              "simulate with; the group ended without running its operations");
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclSend)
HZ_NCCL_ALIAS(ncclRecv)
HZ_NCCL_ALIAS(ncclGather)
HZ_NCCL_ALIAS(ncclScatter)
HZ_NCCL_ALIAS(ncclGroupStart)
HZ_NCCL_ALIAS(ncclGroupEnd)
HZ_NCCL_ALIAS(ncclGroupSimulateEnd)
