// Shared state of the NCCL-compatible library: the process-wide device,
// communicators, error reporting, logging, and the pending operations of a
// group.
#ifndef HZ_GUEST_NCCL_SRC_NCCL_INTERNAL_H_
#define HZ_GUEST_NCCL_SRC_NCCL_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "harmonaize/hz.h"
#include "nccl.h"

namespace hz::nccl {

// A PreMulSum operator: inputs are multiplied by the scalar, then summed.
struct PreMul {
  ncclDataType_t dtype = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  // ncclScalarHostImmediate: the scalar's bytes, read at creation.
  unsigned char value[8] = {};
  // ncclScalarDevice: where the scalar is read each time the op runs.
  const void* where = nullptr;
};

}  // namespace hz::nccl

struct ncclComm {
  hz_comm_t* hz = nullptr;
  int nranks = 0;
  int rank = 0;
  int cuda_device = -1;  // -1: created without a usable CUDA device
  // Sticky: the first failure that left the communicator unusable.
  std::atomic<int> async_error{ncclSuccess};
  // ncclCommRevoke ran: later operations are refused.
  std::atomic<bool> revoked{false};
  // ncclCommFinalize ran: every rank is past its last operation.
  bool finalized = false;
  // PreMulSum operators by their ncclRedOp_t value (>= ncclNumOps).
  std::mutex redop_mu;
  std::map<int, hz::nccl::PreMul> redops;
  int next_redop = ncclNumOps;
};

// NCCL exports each function twice, ncclX and pncclX: profilers interpose
// the first and call the second. Placed after ncclX's definition, in its file.
#define HZ_NCCL_ALIAS(name) \
  extern "C" __attribute__((alias(#name), visibility("default"))) decltype(name) p##name;

namespace hz::nccl {

// The device every communicator of this process uses, opened on first use
// with hz_open(NULL) (so $HZ_DEVICE applies). Null with the error recorded.
hz_device_t* Device();

// Records the calling thread's message for ncclGetLastError, logs it at
// NCCL_DEBUG=WARN, and returns r.
ncclResult_t Fail(ncclResult_t r, const std::string& message);
const std::string& LastError();
// Maps a libharmonaize error to NCCL's result (see README.md) and records
// "<what>: <hz_strerror>"; marks comm's sticky error where the failure is
// one a communicator does not recover from.
ncclResult_t FromHz(int err, const char* what, ncclComm* comm = nullptr);

// Validates the datatype; ncclInvalidArgument with a message.
ncclResult_t CheckType(ncclDataType_t dt);
// Validates a built-in operator or one of comm's PreMulSum operators.
ncclResult_t CheckOp(ncclRedOp_t op, ncclComm* comm);
// Refuses operations on a revoked or failed communicator.
ncclResult_t CheckUsable(ncclComm* comm, const char* what);

// Thread-local group nesting depth (ncclGroupStart/End).
int& GroupDepth();

// A communicator around hz, the CUDA device recorded (nccl_comm.cc).
ncclComm* NewComm(hz_comm_t* hz, int nranks, int rank);
// Joins hz_comm_init as rank of nranks under uid; blocks until all joined.
ncclResult_t JoinRank(ncclComm_t* out, int nranks, const hz_uid_t& uid, int rank, const char* what);

// NCCL_DEBUG levels, in NCCL's order.
enum class Level { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kTrace = 5 };
// Whether messages at level are written (NCCL_DEBUG, read once).
bool Logging(Level level);
// Writes one line "host:pid:tid NCCL <LEVEL> <message>" to NCCL_DEBUG_FILE
// (stderr without one) if level is enabled.
void Log(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Prints the version line once per process at NCCL_DEBUG=VERSION and above.
void LogVersionOnce();

// CUDA helpers (nccl_stage.cc): false/-1 without CUDA or a GPU.
int CurrentCudaDevice();
// Copies bytes from p (device or host memory) to out.
bool ReadScalar(const void* p, void* out, size_t bytes);

}  // namespace hz::nccl

#endif  // HZ_GUEST_NCCL_SRC_NCCL_INTERNAL_H_
