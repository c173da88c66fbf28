// Error reporting: result strings, the thread-local last error, and the
// mapping from libharmonaize errors to ncclResult_t.
#include <string>

#include "nccl_internal.h"

namespace hz::nccl {
namespace {

thread_local std::string last_error;

}  // namespace

const std::string& LastError() {
  return last_error;
}

ncclResult_t Fail(ncclResult_t r, const std::string& message) {
  last_error = message;
  Log(Level::kWarn, "%s (%s)", message.c_str(), ncclGetErrorString(r));
  return r;
}

ncclResult_t FromHz(int err, const char* what, ncclComm* comm) {
  ncclResult_t r;
  bool sticky = false;
  switch (err) {
    case HZ_OK:
      return ncclSuccess;
    case HZ_EINVAL:
    case HZ_EFAULT:
    case HZ_ETOOSMALL:
    case HZ_ENOENT:
      r = ncclInvalidArgument;
      break;
    case HZ_EMISMATCH:  // ranks disagree on nranks or on an operation's arguments
    case HZ_ESTATE:
    case HZ_ENOTSUP:
    case HZ_EEXIST:
      r = ncclInvalidUsage;
      break;
    case HZ_EABORTED:   // a peer (or this process) aborted the communicator
    case HZ_ETIMEDOUT:  // a peer did not take part in time
      r = ncclRemoteError;
      sticky = true;
      break;
    case HZ_ENODEV:
    case HZ_ETRANSPORT:
    case HZ_EIO:
    case HZ_ESHUTDOWN:
    case HZ_ECORRUPT:
    case HZ_EVERSION:
      r = ncclSystemError;
      sticky = true;
      break;
    case HZ_EPERM:
    case HZ_ELIMIT:
    case HZ_EAGAIN:
    case HZ_EBUSY:
    case HZ_EQUEUE:
    case HZ_ENOMEM:
      r = ncclSystemError;
      break;
    default:
      r = ncclInternalError;
      break;
  }
  if (sticky && comm != nullptr) {
    int expected = ncclSuccess;
    comm->async_error.compare_exchange_strong(expected, r);
  }
  return Fail(r, std::string(what) + ": " + hz_strerror(err));
}

ncclResult_t CheckType(ncclDataType_t dt) {
  int v = static_cast<int>(dt);
  if (v == ncclFloat8e4m3 || v == ncclFloat8e5m2)
    return Fail(ncclInvalidArgument,
                "fp8 datatypes (ncclFloat8e4m3, ncclFloat8e5m2) are not "
                "supported by HarmonAIze collectives");
  if (v < 0 || v >= HZ_DTYPE_MAX)
    return Fail(ncclInvalidArgument, "invalid datatype " + std::to_string(v));
  return ncclSuccess;
}

ncclResult_t CheckOp(ncclRedOp_t op, ncclComm* comm) {
  int v = static_cast<int>(op);
  if (v < 0) return Fail(ncclInvalidArgument, "invalid reduction operator " + std::to_string(v));
  if (v < ncclNumOps) return ncclSuccess;
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->redop_mu);
    if (comm->redops.count(v) > 0) return ncclSuccess;
  }
  return Fail(ncclInvalidArgument, "reduction operator " + std::to_string(v) +
                                       " is neither built in nor a PreMulSum operator "
                                       "created on this communicator");
}

ncclResult_t CheckUsable(ncclComm* comm, const char* what) {
  if (comm->revoked.load())
    return Fail(ncclInvalidUsage, std::string(what) + ": the communicator was revoked");
  if (ncclResult_t sticky = static_cast<ncclResult_t>(comm->async_error.load());
      sticky != ncclSuccess)
    return Fail(sticky, std::string(what) + ": the communicator already failed");
  return ncclSuccess;
}

int& GroupDepth() {
  thread_local int depth = 0;
  return depth;
}

}  // namespace hz::nccl

using hz::nccl::Fail;

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (the HarmonAIze device or its transport failed)";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited, aborted or timed out";
    case ncclInProgress:
      return "operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t /*comm*/) {
  return hz::nccl::LastError().c_str();
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclGetErrorString)
HZ_NCCL_ALIAS(ncclGetLastError)
