#include "hz/service/request.h"

#include "protocol/harmonaize_opcodes.h"

#include <algorithm>

namespace hz::service {

Framing ParseRequest(const vdev::Chain& chain, uint32_t max_readable_bytes, Request* req,
                     FramingError* err) {
  *err = FramingError{};
  if (chain.writable_bytes() < sizeof(hz_status)) return Framing::kNoStatus;
  req->chain = &chain;
  req->result_capacity = chain.writable_bytes() - sizeof(hz_status);
  err->status = HZ_S_EINVAL;
  if (chain.readable_bytes() < sizeof(hz_req_hdr)) {
    // request_id is unknown; report what can be read of it as zero.
    err->detail = static_cast<uint32_t>(chain.readable_bytes());
    return Framing::kError;
  }
  chain.Read(0, &req->hdr, sizeof(req->hdr));
  err->request_id = req->hdr.request_id;
  if (chain.readable_bytes() > max_readable_bytes) {
    err->detail = 0;
    return Framing::kError;
  }
  if (req->hdr.flags != 0) {
    err->status = HZ_S_ENOTSUP;  // SPEC §6.2: flags of a later version
    err->detail = 1;
    return Framing::kError;
  }
  size_t after_hdr = chain.readable_bytes() - sizeof(hz_req_hdr);
  if (req->hdr.args_len > after_hdr) {
    err->detail = 2;  // args_len
    return Framing::kError;
  }
  req->args_offset = sizeof(hz_req_hdr);
  req->args_len = req->hdr.args_len;
  req->data_offset = req->args_offset + req->args_len;
  req->data_len = after_hdr - req->args_len;
  err->status = HZ_S_OK;
  return Framing::kOk;
}

uint32_t WriteStatus(const vdev::Chain& chain, uint32_t status, uint32_t result_len,
                     uint64_t request_id, uint32_t detail) {
  hz_status st{};
  st.status = status;
  st.result_len = result_len;
  st.request_id = request_id;
  st.detail = detail;
  chain.Write(chain.writable_bytes() - sizeof(hz_status), &st, sizeof(st));
  return result_len + static_cast<uint32_t>(sizeof(hz_status));
}

uint32_t ReadArgsBytes(const Request& req, void* out, size_t size) {
  if (req.args_len < size) return HZ_S_EINVAL;
  req.chain->Read(req.args_offset, out, size);
  // Newer drivers may send longer arguments; unknown trailing fields must be
  // zero, meaning "not used", or the request is refused.
  uint8_t buf[256];
  size_t pos = size;
  while (pos < req.args_len) {
    size_t n = std::min(sizeof(buf), req.args_len - pos);
    req.chain->Read(req.args_offset + pos, buf, n);
    for (size_t i = 0; i < n; ++i) {
      if (buf[i] != 0) return HZ_S_ENOTSUP;  // fields of a later minor version
    }
    pos += n;
  }
  return HZ_S_OK;
}

bool WriteResult(const Request& req, const void* data, size_t len) {
  if (len > req.result_capacity) return false;
  req.chain->Write(0, data, len);
  return true;
}

OpClass ClassifyOpcode(uint16_t opcode) {
  switch (opcode) {
    case HZ_OP_HELLO:
    case HZ_OP_REGION_REGISTER:
    case HZ_OP_REGION_UNREGISTER:
    case HZ_OP_COMM_UID:
    case HZ_OP_COMM_INIT:
    case HZ_OP_COMM_DESTROY:
    case HZ_OP_COMM_ABORT:
    case HZ_OP_CKPT_POLICY:
    case HZ_OP_CKPT_LIST:
    case HZ_OP_CKPT_DELETE:
    case HZ_OP_CKPT_QUIESCE:
    case HZ_OP_EVENT_SUBSCRIBE:
    case HZ_OP_EVENT_ACK:
    case HZ_OP_TOPOLOGY_GET:
    case HZ_OP_NEG_REQUEST:
    case HZ_OP_NEG_ACCEPT:
    case HZ_OP_NEG_DECLINE:
    case HZ_OP_NEG_COUNTER:
    case HZ_OP_NEG_RELEASE:
    case HZ_OP_HINT_DECLARE:
    case HZ_OP_ENERGY_SLACK:
      return OpClass::kControl;
    case HZ_OP_ALLREDUCE:
    case HZ_OP_BROADCAST:
    case HZ_OP_REDUCE:
    case HZ_OP_ALLGATHER:
    case HZ_OP_REDUCE_SCATTER:
    case HZ_OP_ALLTOALL:
    case HZ_OP_SEND:
    case HZ_OP_RECV:
    case HZ_OP_BARRIER:
    case HZ_OP_CKPT_SAVE:
    case HZ_OP_CKPT_RESTORE:
      return OpClass::kData;
    default:
      return OpClass::kUnknown;
  }
}

const char* OpcodeName(uint16_t opcode) {
  for (const hz_opcode_name& o : hz_opcode_names) {
    if (o.opcode == opcode) return o.name;
  }
  return "UNKNOWN";
}

const char* StatusName(uint32_t status) {
  static const char* const kNames[HZ_S_MAX] = {
      "OK",        "EINVAL",    "ENOTSUP",   "EPERM",     "ENOENT", "EEXIST", "ELIMIT",
      "EAGAIN",    "ETIMEDOUT", "EABORTED",  "EMISMATCH", "EFAULT", "EIO",    "ECORRUPT",
      "ESHUTDOWN", "EVERSION",  "ETOOSMALL", "EBUSY",     "ESTATE", "EQUEUE"};
  return status < HZ_S_MAX ? kNames[status] : "UNKNOWN";
}

}  // namespace hz::service
