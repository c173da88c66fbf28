// How libharmonaize reaches the device. Two implementations: the guest
// driver's character device and vdev's virtio-user front-end. Everything
// above this interface (request encoding, staging, the C API) is shared, so
// the same tests run over both.
#ifndef HZ_GUEST_LIB_TRANSPORT_H_
#define HZ_GUEST_LIB_TRANSPORT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "protocol/harmonaize.h"

namespace hz::lib {

// A readable data segment of a request (after the arguments).
struct DataSeg {
  const void* ptr = nullptr;
  size_t len = 0;
};

// A wait that sleeps at once.
inline constexpr std::chrono::nanoseconds kNoSpin{0};

struct Completion {
  int err = 0;          // 0, or a library error (HZ_ETRANSPORT, HZ_ENODEV, ...)
  uint32_t status = 0;  // HZ_S_* when err == 0
  uint32_t result_len = 0;
  uint32_t detail = 0;
};

class Transport {
 public:
  static constexpr uint16_t kControlQueue = 0xffff;

  virtual ~Transport() = default;
  virtual const char* kind() const = 0;  // "driver" or "vhost-user"
  virtual const std::string& path() const = 0;
  virtual const hz_config& config() const = 0;

  // Submits one request and returns a ticket for Wait/Test. queue is
  // kControlQueue or a request-queue index. args are copied at submit; data
  // and result must stay valid until the request completes. result_len is
  // the result space, without the status trailer.
  virtual int Submit(uint16_t queue, uint16_t opcode, const void* args, uint32_t args_len,
                     std::span<const DataSeg> data, void* result, uint32_t result_len,
                     uint64_t* ticket) = 0;
  // Waits for a ticket (timeout_ms < 0: forever). HZ_ETIMEDOUT leaves it
  // pending. spin: look for the completion this long before sleeping (a
  // low-latency communicator's operations); a transport whose waits happen
  // elsewhere (the kernel driver) ignores it.
  virtual int Wait(uint64_t ticket, int timeout_ms, Completion* out,
                   std::chrono::nanoseconds spin) = 0;

  // Memory the device can address. Alloc returns memory that Register accepts.
  virtual int Alloc(size_t bytes, void** ptr) = 0;
  virtual void Free(void* ptr) = 0;
  virtual int Register(void* ptr, size_t len, uint32_t flags, uint32_t* region) = 0;
  virtual int Unregister(uint32_t region) = 0;

  // The session's HELLO. Where a kernel driver owns the device session it
  // has said HELLO for the whole VM already (and refuses one from user
  // space): this reports that HELLO's outcome in done and out and returns
  // true. Otherwise (virtio-user, or a driver that leaves HELLO to user
  // space) it returns false and the library sends HELLO itself.
  virtual bool SessionHello(Completion* /*done*/, hz_hello_result* /*out*/) { return false; }

  // Event delivery: stock the event queue, then read records.
  virtual int EnableEvents() = 0;
  virtual int EventFd() = 0;
  virtual int NextEvent(hz_event* ev, int timeout_ms) = 0;
};

// "vhost-user:<socket>" -> virtio-user; anything else is a device node.
int OpenTransport(const std::string& spec, std::unique_ptr<Transport>* out);
int OpenVirtioUser(const std::string& socket, std::unique_ptr<Transport>* out);
int OpenDriver(const std::string& node, std::unique_ptr<Transport>* out);

}  // namespace hz::lib

#endif  // HZ_GUEST_LIB_TRANSPORT_H_
