// hz_open/hz_close, HELLO, registered memory and hz_strerror.
#include "device.h"

#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace hz::lib {

bool Granted(const hz_device* dev, int feature) {
  return (dev->hello.device_features >> feature) & 1;
}

int ControlCall(hz_device* dev, uint16_t opcode, const void* args, uint32_t args_len,
                std::span<const DataSeg> data, void* result, uint32_t result_len,
                Completion* done) {
  uint64_t ticket = 0;
  int rc = dev->transport->Submit(Transport::kControlQueue, opcode, args, args_len, data, result,
                                  result_len, &ticket);
  if (rc != HZ_OK) return rc;
  Completion c;
  rc = dev->transport->Wait(ticket, -1, &c, kNoSpin);
  if (rc != HZ_OK) return rc;
  if (done) *done = c;
  if (c.err != 0) return c.err;
  return FromStatus(c.status);
}

bool FindRegistered(hz_device* dev, const void* p, size_t len, hz_slice* out) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(dev->mu);
  auto it = dev->registrations.upper_bound(addr);
  if (it == dev->registrations.begin()) return false;
  --it;
  const auto& r = it->second;
  const uintptr_t off = addr - it->first;
  if (off > r.len || len > r.len - off) return false;
  *out = {};
  out->region_id = r.region;
  out->offset = off;
  out->length = len;
  return true;
}

int RegisterMemory(hz_device* dev, void* p, size_t len, bool owned) {
  if (p == nullptr || len == 0) return HZ_EINVAL;
  hz_slice existing;
  if (FindRegistered(dev, p, 1, &existing)) return HZ_EEXIST;
  uint32_t region = 0;
  int rc = dev->transport->Register(p, len, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region);
  if (rc != HZ_OK) return rc;
  std::lock_guard<std::mutex> lock(dev->mu);
  dev->registrations[reinterpret_cast<uintptr_t>(p)] = {static_cast<uint8_t*>(p), len, region,
                                                        owned};
  return HZ_OK;
}

int UnregisterMemory(hz_device* dev, void* p, bool owned) {
  hz_device::Registration r;
  {
    std::lock_guard<std::mutex> lock(dev->mu);
    auto it = dev->registrations.find(reinterpret_cast<uintptr_t>(p));
    if (it == dev->registrations.end()) return HZ_ENOENT;
    r = it->second;
  }
  // hz_mem_alloc memory is released with hz_mem_free, buffers registered
  // with hz_mem_register with hz_mem_unregister: never the other way round.
  if (r.owned != owned) return HZ_EINVAL;
  int rc = dev->transport->Unregister(r.region);
  // A region the device no longer knows (e.g. after a reset) is gone either way.
  if (rc != HZ_OK && rc != HZ_ENOENT) return rc;
  std::lock_guard<std::mutex> lock(dev->mu);
  dev->registrations.erase(reinterpret_cast<uintptr_t>(p));
  return HZ_OK;
}

namespace {

// The first /dev/harmonaizeN, in numeric order.
std::string FirstDeviceNode() {
  DIR* d = opendir("/dev");
  if (d == nullptr) return {};
  long best = -1;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "harmonaize", 10) != 0) continue;
    char* end = nullptr;
    long n = std::strtol(e->d_name + 10, &end, 10);
    if (end != e->d_name + 10 && *end == '\0' && (best < 0 || n < best)) best = n;
  }
  closedir(d);
  return best < 0 ? std::string() : "/dev/harmonaize" + std::to_string(best);
}

int Hello(hz_device* dev) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR;
  a.version_minor = HZ_VERSION_MINOR;
  a.driver_features = (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_CHECKPOINT) |
                      (1ull << HZ_F_EVENTS) | (1ull << HZ_F_NEGOTIATION) | (1ull << HZ_F_TOPOLOGY) |
                      (1ull << HZ_F_HINTS) | (1ull << HZ_F_INLINE_DATA) | (1ull << HZ_F_ENERGY);
  hz_hello_result r{};
  Completion c;
  int rc;
  // Over the kernel driver the session is the driver's: it has said HELLO
  // for every process of the VM, and a second one would end theirs.
  if (dev->transport->SessionHello(&c, &r))
    rc = c.err != 0 ? c.err : FromStatus(c.status);
  else
    rc = ControlCall(dev, HZ_OP_HELLO, &a, sizeof(a), {}, &r, sizeof(r), &c);
  if (rc != HZ_OK) return rc;
  if (c.result_len < sizeof(r)) return HZ_ETRANSPORT;
  dev->hello = r;
  return HZ_OK;
}

}  // namespace
}  // namespace hz::lib

using namespace hz::lib;

extern "C" int hz_open(const char* spec, hz_device_t** out) {
  if (out == nullptr) return HZ_EINVAL;
  *out = nullptr;
  std::string s = spec ? spec : "";
  if (s.empty()) {
    const char* env = std::getenv("HZ_DEVICE");
    s = env ? env : FirstDeviceNode();
  }
  if (s.empty()) return HZ_ENODEV;
  auto dev = std::make_unique<hz_device>();
  int rc = OpenTransport(s, &dev->transport);
  if (rc != HZ_OK) return rc;
  rc = Hello(dev.get());
  if (rc != HZ_OK) return rc;
  *out = dev.release();
  return HZ_OK;
}

extern "C" void hz_close(hz_device_t* dev) {
  if (dev == nullptr) return;
  // Owned allocations go back to the transport; the device drops every
  // region of the session when the connection or file goes away.
  for (auto& [addr, r] : dev->registrations) {
    if (r.owned) dev->transport->Free(r.base);
  }
  delete dev;
}

extern "C" int hz_device_get_info(hz_device_t* dev, struct hz_device_info* out) {
  if (dev == nullptr || out == nullptr) return HZ_EINVAL;
  *out = {};
  std::strncpy(out->transport, dev->transport->kind(), sizeof(out->transport) - 1);
  std::strncpy(out->path, dev->transport->path().c_str(), sizeof(out->path) - 1);
  out->version_major = dev->hello.version_major;
  out->version_minor = dev->hello.version_minor;
  out->num_request_queues = dev->hello.num_request_queues;
  out->features = dev->hello.device_features;
  out->session_id = dev->hello.session_id;
  out->max_regions = dev->hello.max_regions;
  out->max_comm_ranks = dev->hello.max_comm_ranks;
  return HZ_OK;
}

extern "C" int hz_mem_alloc(hz_device_t* dev, size_t bytes, void** ptr) {
  if (dev == nullptr || ptr == nullptr || bytes == 0) return HZ_EINVAL;
  void* p = nullptr;
  int rc = dev->transport->Alloc(bytes, &p);
  if (rc != HZ_OK) return rc;
  rc = RegisterMemory(dev, p, bytes, true);
  if (rc != HZ_OK) {
    dev->transport->Free(p);
    return rc;
  }
  *ptr = p;
  return HZ_OK;
}

extern "C" int hz_mem_free(hz_device_t* dev, void* ptr) {
  if (dev == nullptr || ptr == nullptr) return HZ_EINVAL;
  int rc = UnregisterMemory(dev, ptr, true);
  if (rc != HZ_OK) return rc;
  dev->transport->Free(ptr);
  return HZ_OK;
}

extern "C" int hz_mem_register(hz_device_t* dev, void* ptr, size_t bytes) {
  if (dev == nullptr) return HZ_EINVAL;
  return RegisterMemory(dev, ptr, bytes, false);
}

extern "C" int hz_mem_unregister(hz_device_t* dev, void* ptr) {
  if (dev == nullptr || ptr == nullptr) return HZ_EINVAL;
  return UnregisterMemory(dev, ptr, false);
}

extern "C" const char* hz_strerror(int err) {
  switch (err) {
    case HZ_OK:
      return "success";
    case HZ_EINVAL:
      return "invalid argument";
    case HZ_ENOTSUP:
      return "operation not supported by the device";
    case HZ_EPERM:
      return "object belongs to another tenant";
    case HZ_ENOENT:
      return "no such object";
    case HZ_EEXIST:
      return "object already exists";
    case HZ_ELIMIT:
      return "tenant quota or device limit reached";
    case HZ_EAGAIN:
      return "temporarily out of resources, retry";
    case HZ_ETIMEDOUT:
      return "timed out";
    case HZ_EABORTED:
      return "communicator or operation aborted";
    case HZ_EMISMATCH:
      return "ranks disagree on the operation";
    case HZ_EFAULT:
      return "buffer outside registered memory";
    case HZ_EIO:
      return "host I/O failure";
    case HZ_ECORRUPT:
      return "stored data failed verification";
    case HZ_ESHUTDOWN:
      return "the host service is shutting down";
    case HZ_EVERSION:
      return "incompatible protocol version";
    case HZ_ETOOSMALL:
      return "result buffer too small";
    case HZ_EBUSY:
      return "object in use";
    case HZ_ESTATE:
      return "not valid in the current state";
    case HZ_EQUEUE:
      return "opcode not allowed on this queue";
    case HZ_ENODEV:
      return "no HarmonAIze device (or it went away)";
    case HZ_ETRANSPORT:
      return "transport failure talking to the device";
    case HZ_ENOMEM:
      return "out of memory";
    case HZ_EPENDING:
      return "request still in progress";
    default:
      return "unknown error";
  }
}
