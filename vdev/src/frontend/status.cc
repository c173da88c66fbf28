#include "vdev/frontend/status.h"

namespace vdev::frontend {

std::string Status::ToString() const {
  const char* name = "ok";
  switch (code_) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      name = "invalid argument";
      break;
    case Code::kNoSpace:
      name = "no space";
      break;
    case Code::kUnsupported:
      name = "unsupported";
      break;
    case Code::kIoError:
      name = "I/O error";
      break;
    case Code::kTimeout:
      name = "timeout";
      break;
    case Code::kProtocolError:
      name = "protocol error";
      break;
    case Code::kDisconnected:
      name = "disconnected";
      break;
  }
  return message_.empty() ? std::string(name) : std::string(name) + ": " + message_;
}

}  // namespace vdev::frontend
