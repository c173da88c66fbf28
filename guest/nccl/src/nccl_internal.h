// Shared state of the NCCL-compatible library: the process-wide device,
// communicators, error reporting, and the pending operations of a group.
#ifndef HZ_GUEST_NCCL_SRC_NCCL_INTERNAL_H_
#define HZ_GUEST_NCCL_SRC_NCCL_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <string>

#include "harmonaize/hz.h"
#include "nccl.h"

struct ncclComm {
  hz_comm_t* hz = nullptr;
  int nranks = 0;
  int rank = 0;
  // Sticky: the first failure that left the communicator unusable.
  std::atomic<int> async_error{ncclSuccess};
  // ncclCommFinalize ran: every rank is past its last operation.
  bool finalized = false;
};

namespace hz::nccl {

// The device every communicator of this process uses, opened on first use
// with hz_open(NULL) (so $HZ_DEVICE applies). Null with the error recorded.
hz_device_t* Device();

// Records the calling thread's message for ncclGetLastError and returns r.
ncclResult_t Fail(ncclResult_t r, const std::string& message);
const std::string& LastError();
// Maps a libharmonaize error to NCCL's result (see README.md) and records
// "<what>: <hz_strerror>"; marks comm's sticky error where the failure is
// one a communicator does not recover from.
ncclResult_t FromHz(int err, const char* what, ncclComm* comm = nullptr);

// Validates the datatype and operator; ncclInvalidArgument with a message.
ncclResult_t CheckType(ncclDataType_t dt);
ncclResult_t CheckOp(ncclRedOp_t op);

// Thread-local group nesting depth (ncclGroupStart/End).
int& GroupDepth();

}  // namespace hz::nccl

#endif  // HZ_GUEST_NCCL_SRC_NCCL_INTERNAL_H_
