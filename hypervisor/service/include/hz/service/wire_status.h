// The one mapping from an engine's hz::Status to the status a guest reads
// (enum hz_status_code, SPEC §6.4). Engines speak hz::Status only; the
// device calls this wherever an engine's outcome becomes an answer.
//
// StatusCode was laid out as the wire's codes, value for value, so the
// mapping is total and a cast; the asserts below are what keeps it so. A
// code added to one side without the other fails the build here.
#ifndef HZ_SERVICE_WIRE_STATUS_H_
#define HZ_SERVICE_WIRE_STATUS_H_

#include <cstdint>

#include "hz/common/status.h"
#include "protocol/harmonaize.h"

namespace hz::service {

constexpr uint32_t ToWireStatus(StatusCode code) {
  return static_cast<uint32_t>(code);
}

inline uint32_t ToWireStatus(const Status& status) {
  return ToWireStatus(status.code());
}

static_assert(ToWireStatus(StatusCode::kOk) == HZ_S_OK);
static_assert(ToWireStatus(StatusCode::kInvalidArgument) == HZ_S_EINVAL);
static_assert(ToWireStatus(StatusCode::kNotSupported) == HZ_S_ENOTSUP);
static_assert(ToWireStatus(StatusCode::kPermission) == HZ_S_EPERM);
static_assert(ToWireStatus(StatusCode::kNotFound) == HZ_S_ENOENT);
static_assert(ToWireStatus(StatusCode::kExists) == HZ_S_EEXIST);
static_assert(ToWireStatus(StatusCode::kLimit) == HZ_S_ELIMIT);
static_assert(ToWireStatus(StatusCode::kTryAgain) == HZ_S_EAGAIN);
static_assert(ToWireStatus(StatusCode::kTimedOut) == HZ_S_ETIMEDOUT);
static_assert(ToWireStatus(StatusCode::kAborted) == HZ_S_EABORTED);
static_assert(ToWireStatus(StatusCode::kMismatch) == HZ_S_EMISMATCH);
static_assert(ToWireStatus(StatusCode::kFault) == HZ_S_EFAULT);
static_assert(ToWireStatus(StatusCode::kIoError) == HZ_S_EIO);
static_assert(ToWireStatus(StatusCode::kCorruption) == HZ_S_ECORRUPT);
static_assert(ToWireStatus(StatusCode::kShutdown) == HZ_S_ESHUTDOWN);
static_assert(ToWireStatus(StatusCode::kVersion) == HZ_S_EVERSION);
static_assert(ToWireStatus(StatusCode::kTooSmall) == HZ_S_ETOOSMALL);
static_assert(ToWireStatus(StatusCode::kBusy) == HZ_S_EBUSY);
static_assert(ToWireStatus(StatusCode::kState) == HZ_S_ESTATE);
static_assert(ToWireStatus(StatusCode::kWrongQueue) == HZ_S_EQUEUE);
static_assert(kStatusCodeCount == HZ_S_MAX, "every wire status has a code, and no more");

}  // namespace hz::service

#endif  // HZ_SERVICE_WIRE_STATUS_H_
