#include "hz/events/status.h"

namespace hz::events {

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      name = "invalid argument";
      break;
    case Code::kNotFound:
      name = "not found";
      break;
    case Code::kLimit:
      name = "limit";
      break;
    case Code::kState:
      name = "state";
      break;
    case Code::kIoError:
      name = "I/O error";
      break;
    case Code::kCorruption:
      name = "corruption";
      break;
    case Code::kNotSupported:
      name = "not supported";
      break;
    case Code::kPermission:
      name = "permission denied";
      break;
  }
  return std::string(name) + ": " + message_;
}

hz_status_code Status::ToWire() const {
  switch (code_) {
    case Code::kOk:
      return HZ_S_OK;
    case Code::kInvalidArgument:
      return HZ_S_EINVAL;
    case Code::kNotFound:
      return HZ_S_ENOENT;
    case Code::kLimit:
      return HZ_S_ELIMIT;
    case Code::kState:
      return HZ_S_ESTATE;
    case Code::kIoError:
      return HZ_S_EIO;
    case Code::kCorruption:
      return HZ_S_ECORRUPT;
    case Code::kNotSupported:
      return HZ_S_ENOTSUP;
    case Code::kPermission:
      return HZ_S_EPERM;
  }
  return HZ_S_EIO;
}

}  // namespace hz::events
