#include "vdev/message.h"

#include <unistd.h>

#include <algorithm>

#include "spdlog/fmt/fmt.h"

namespace vdev {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

size_t MessageReader::Want() const {
  if (ready_) return 0;
  if (have_ < sizeof(vu::Header)) return sizeof(vu::Header) - have_;
  return sizeof(vu::Header) + msg_.header.size - have_;
}

Error MessageReader::Feed(const uint8_t* data, size_t n, std::vector<UniqueFd>* fds) {
  if (n > Want()) return "internal: fed more bytes than wanted";
  if (fds != nullptr) {
    if (msg_.fds.size() + fds->size() > vu::kMaxFds) {
      fds->clear();  // closes them
      return fmt::format("more than {} file descriptors with one message", vu::kMaxFds);
    }
    for (UniqueFd& fd : *fds) msg_.fds.push_back(std::move(fd));
    fds->clear();
  }
  if (have_ < sizeof(vu::Header)) {
    size_t take = std::min(n, sizeof(vu::Header) - have_);
    std::memcpy(reinterpret_cast<uint8_t*>(&msg_.header) + have_, data, take);
    have_ += take;
    data += take;
    n -= take;
    if (have_ == sizeof(vu::Header)) {
      const vu::Header& h = msg_.header;
      if ((h.flags & vu::kVersionMask) != vu::kVersion) {
        return fmt::format("message {} with unsupported version flags {:#x}", h.request, h.flags);
      }
      if (h.flags & vu::kFlagReply) {
        return fmt::format("message {} from the front-end has the REPLY flag", h.request);
      }
      if (h.size > vu::kMaxPayload) {
        return fmt::format("message {} ({}) payload of {} bytes exceeds {}", h.request,
                           RequestName(h.request), h.size, vu::kMaxPayload);
      }
    }
  }
  if (n > 0) {
    std::memcpy(msg_.payload + (have_ - sizeof(vu::Header)), data, n);
    have_ += n;
  }
  if (have_ >= sizeof(vu::Header) && have_ == sizeof(vu::Header) + msg_.header.size) ready_ = true;
  return {};
}

std::string MessageReader::PartialBytes() const {
  const size_t header = std::min(have_, sizeof(vu::Header));
  std::string out(reinterpret_cast<const char*>(&msg_.header), header);
  if (have_ > header) out.append(reinterpret_cast<const char*>(msg_.payload), have_ - header);
  return out;
}

Message MessageReader::Take() {
  Message out = std::move(msg_);
  msg_.header = {};
  msg_.fds.clear();
  have_ = 0;
  ready_ = false;
  return out;
}

const char* RequestName(uint32_t request) {
  switch (request) {
    case vu::kGetFeatures:
      return "GET_FEATURES";
    case vu::kSetFeatures:
      return "SET_FEATURES";
    case vu::kSetOwner:
      return "SET_OWNER";
    case vu::kResetOwner:
      return "RESET_OWNER";
    case vu::kSetMemTable:
      return "SET_MEM_TABLE";
    case vu::kSetLogBase:
      return "SET_LOG_BASE";
    case vu::kSetLogFd:
      return "SET_LOG_FD";
    case vu::kSetVringNum:
      return "SET_VRING_NUM";
    case vu::kSetVringAddr:
      return "SET_VRING_ADDR";
    case vu::kSetVringBase:
      return "SET_VRING_BASE";
    case vu::kGetVringBase:
      return "GET_VRING_BASE";
    case vu::kSetVringKick:
      return "SET_VRING_KICK";
    case vu::kSetVringCall:
      return "SET_VRING_CALL";
    case vu::kSetVringErr:
      return "SET_VRING_ERR";
    case vu::kGetProtocolFeatures:
      return "GET_PROTOCOL_FEATURES";
    case vu::kSetProtocolFeatures:
      return "SET_PROTOCOL_FEATURES";
    case vu::kGetQueueNum:
      return "GET_QUEUE_NUM";
    case vu::kSetVringEnable:
      return "SET_VRING_ENABLE";
    case vu::kSetBackendReqFd:
      return "SET_BACKEND_REQ_FD";
    case vu::kGetConfig:
      return "GET_CONFIG";
    case vu::kSetConfig:
      return "SET_CONFIG";
    case vu::kResetDevice:
      return "RESET_DEVICE";
    case vu::kGetMaxMemSlots:
      return "GET_MAX_MEM_SLOTS";
    case vu::kAddMemReg:
      return "ADD_MEM_REG";
    case vu::kRemMemReg:
      return "REM_MEM_REG";
    case vu::kSetStatus:
      return "SET_STATUS";
    case vu::kGetStatus:
      return "GET_STATUS";
    default:
      return "UNKNOWN";
  }
}

namespace {

Error CheckSize(const Message& msg, uint32_t want) {
  if (msg.header.size == want) return {};
  return fmt::format("{} payload is {} bytes, expected {}", RequestName(msg.request()),
                     msg.header.size, want);
}

Error CheckFds(const Message& msg, size_t want) {
  if (msg.fds.size() == want) return {};
  return fmt::format("{} carries {} file descriptors, expected {}", RequestName(msg.request()),
                     msg.fds.size(), want);
}

Error CheckSizeAndNoFds(const Message& msg, uint32_t want) {
  Error e = CheckSize(msg, want);
  return e.empty() ? CheckFds(msg, 0) : e;
}

}  // namespace

Error ValidateMessage(const Message& msg) {
  switch (msg.request()) {
    case vu::kGetFeatures:
    case vu::kGetProtocolFeatures:
    case vu::kGetQueueNum:
    case vu::kGetMaxMemSlots:
    case vu::kGetStatus:
    case vu::kSetOwner:
    case vu::kResetOwner:
    case vu::kResetDevice:
      return CheckSizeAndNoFds(msg, 0);
    case vu::kSetFeatures:
    case vu::kSetProtocolFeatures:
    case vu::kSetStatus:
      return CheckSizeAndNoFds(msg, sizeof(uint64_t));
    case vu::kSetVringNum:
    case vu::kSetVringBase:
    case vu::kGetVringBase:
    case vu::kSetVringEnable:
      return CheckSizeAndNoFds(msg, sizeof(vu::VringState));
    case vu::kSetVringAddr:
      return CheckSizeAndNoFds(msg, sizeof(vu::VringAddr));
    case vu::kSetVringKick:
    case vu::kSetVringCall:
    case vu::kSetVringErr: {
      if (Error e = CheckSize(msg, sizeof(uint64_t)); !e.empty()) return e;
      uint64_t v = msg.Get<uint64_t>();
      if (v & ~(vu::kVringIdxMask | vu::kVringNoFd)) {
        return fmt::format("{} payload {:#x} has unknown bits", RequestName(msg.request()), v);
      }
      return CheckFds(msg, (v & vu::kVringNoFd) ? 0 : 1);
    }
    case vu::kSetMemTable: {
      if (msg.header.size < 8) return CheckSize(msg, 8);
      uint32_t n = msg.Get<uint32_t>();
      if (n == 0 || n > vu::kMaxMemRegions) {
        return fmt::format("SET_MEM_TABLE with {} regions (1..{} allowed)", n, vu::kMaxMemRegions);
      }
      if (Error e = CheckSize(msg, 8 + n * sizeof(vu::MemRegion)); !e.empty()) return e;
      return CheckFds(msg, n);
    }
    case vu::kAddMemReg:
      if (Error e = CheckSize(msg, sizeof(vu::SingleMemRegion)); !e.empty()) return e;
      return CheckFds(msg, 1);
    case vu::kRemMemReg:
      // The spec asks a back-end to close an fd sent with REM_MEM_REG, not to
      // refuse the message; the caller drops it.
      if (Error e = CheckSize(msg, sizeof(vu::SingleMemRegion)); !e.empty()) return e;
      if (msg.fds.size() > 1) return CheckFds(msg, 1);
      return {};
    case vu::kGetConfig:
    case vu::kSetConfig: {
      if (msg.header.size < sizeof(vu::ConfigHeader)) {
        return CheckSize(msg, sizeof(vu::ConfigHeader));
      }
      auto h = msg.Get<vu::ConfigHeader>();
      if (h.size > vu::kMaxConfigSize) {
        return fmt::format("{} of {} bytes exceeds {}", RequestName(msg.request()), h.size,
                           vu::kMaxConfigSize);
      }
      return CheckSizeAndNoFds(msg, sizeof(vu::ConfigHeader) + h.size);
    }
    case vu::kSetBackendReqFd:
      if (Error e = CheckSize(msg, 0); !e.empty()) return e;
      return CheckFds(msg, 1);
    default:
      return fmt::format("unsupported request {} ({})", msg.request(), RequestName(msg.request()));
  }
}

std::vector<uint8_t> MakeReply(uint32_t request, const void* payload, uint32_t size) {
  return MakeMessage(request, vu::kReplyFlags, payload, size);
}

std::vector<uint8_t> MakeMessage(uint32_t request, uint32_t flags, const void* payload,
                                 uint32_t size) {
  vu::Header h{request, flags, size};
  std::vector<uint8_t> out(sizeof(h) + size);
  std::memcpy(out.data(), &h, sizeof(h));
  if (size > 0) std::memcpy(out.data() + sizeof(h), payload, size);
  return out;
}

std::vector<uint8_t> MakeU64Reply(uint32_t request, uint64_t value) {
  return MakeReply(request, &value, sizeof(value));
}

}  // namespace vdev
