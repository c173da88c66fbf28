#include "vdev/frontend/status.h"

namespace vdev::frontend {

const std::string& Status::message() const {
  static const std::string kNone;
  return state_ ? state_->message : kNone;
}

std::string Status::ToString() const {
  const char* name = "ok";
  switch (code()) {
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
  const std::string& msg = message();
  return msg.empty() ? std::string(name) : std::string(name) + ": " + msg;
}

}  // namespace vdev::frontend
