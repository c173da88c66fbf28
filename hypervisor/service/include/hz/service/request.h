// Request framing (protocol/harmonaize.h, SPEC.md §6) over a vdev::Chain:
//   readable: hz_req_hdr, args (args_len bytes), optional data
//   writable: result space, then hz_status as the last 24 bytes
// Nothing here knows opcodes beyond their queue class; the device dispatches.
#ifndef HZ_SERVICE_REQUEST_H_
#define HZ_SERVICE_REQUEST_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "protocol/harmonaize.h"
#include "vdev/device.h"

namespace hz::service {

// A request whose framing passed validation.
struct Request {
  const vdev::Chain* chain = nullptr;
  hz_req_hdr hdr{};
  size_t args_offset = sizeof(hz_req_hdr);  // in the readable part
  size_t args_len = 0;
  size_t data_offset = 0;  // in the readable part
  size_t data_len = 0;
  size_t result_capacity = 0;  // writable bytes before hz_status
  // When the device took the chain off its queue: the start of the request's
  // hz_request_duration_seconds, wherever it completes.
  std::chrono::steady_clock::time_point taken;
};

// Outcome of framing a chain.
enum class Framing {
  kOk,        // *req is filled in
  kNoStatus,  // writable part shorter than hz_status: complete with used len 0
  kError,     // complete with *status (request_id as far as it could be read)
};

struct FramingError {
  uint32_t status = HZ_S_OK;
  uint64_t request_id = 0;
  uint32_t detail = 0;
};

// Checks the framing of chain: header present, flags zero, args_len inside
// the readable part and within max_readable_bytes.
Framing ParseRequest(const vdev::Chain& chain, uint32_t max_readable_bytes, Request* req,
                     FramingError* err);

// Writes hz_status into the last 24 writable bytes and returns the used
// length to report (result_len + 24). The caller has checked that the
// writable part holds hz_status and result_len fits before it.
uint32_t WriteStatus(const vdev::Chain& chain, uint32_t status, uint32_t result_len,
                     uint64_t request_id, uint32_t detail = 0);

// Reads fixed-size arguments. args_len shorter than sizeof(T) is EINVAL;
// longer is allowed for forward compatibility when every extra byte is zero
// (else ENOTSUP, SPEC §6.6). Returns HZ_S_OK or the status to answer with.
uint32_t ReadArgsBytes(const Request& req, void* out, size_t size);

template <typename T>
uint32_t ReadArgs(const Request& req, T* out) {
  std::memset(out, 0, sizeof(T));
  return ReadArgsBytes(req, out, sizeof(T));
}

// Writes result bytes at offset 0 of the result space. Returns false when
// they do not fit (the caller answers HZ_S_ETOOSMALL).
bool WriteResult(const Request& req, const void* data, size_t len);

// Opcode classes for queue placement and feature checks.
enum class OpClass {
  kUnknown,
  kControl,  // queue 0 only
  kData,     // request queues only
};
OpClass ClassifyOpcode(uint16_t opcode);

// The family of an opcode (its high byte), the dispatch-table index.
constexpr uint8_t OpcodeFamily(uint16_t opcode) {
  return static_cast<uint8_t>(opcode >> 8);
}

// Printable opcode name ("ALLREDUCE"), "UNKNOWN" for others.
const char* OpcodeName(uint16_t opcode);
// Printable status name ("EINVAL").
const char* StatusName(uint32_t status);

}  // namespace hz::service

#endif  // HZ_SERVICE_REQUEST_H_
