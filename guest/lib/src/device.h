// The objects behind the C API's opaque handles, and the request helpers
// every API family uses. Arguments are validated here, before anything
// reaches the device.
#ifndef HZ_GUEST_LIB_DEVICE_H_
#define HZ_GUEST_LIB_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "harmonaize/hz.h"
#include "transport.h"

struct hz_device {
  std::unique_ptr<hz::lib::Transport> transport;
  hz_hello_result hello{};

  // Registered memory by start address: what collectives and checkpoints
  // can name as (region, offset, length) without staging.
  struct Registration {
    uint8_t* base = nullptr;
    size_t len = 0;
    uint32_t region = 0;
    bool owned = false;  // allocated by hz_mem_alloc
  };
  std::mutex mu;
  std::map<uintptr_t, Registration> registrations;
  std::atomic<uint32_t> next_queue{0};
  bool events_enabled = false;
};

namespace hz::lib {

// Maps a device status to the API's error code.
inline int FromStatus(uint32_t s) {
  return s == HZ_S_OK ? HZ_OK : -static_cast<int>(s);
}

bool Granted(const hz_device* dev, int feature);

// Submits a control-queue request and waits for it.
int ControlCall(hz_device* dev, uint16_t opcode, const void* args, uint32_t args_len,
                std::span<const DataSeg> data, void* result, uint32_t result_len,
                Completion* done = nullptr);

// Finds the registered region holding [p, p+len); false when there is none.
bool FindRegistered(hz_device* dev, const void* p, size_t len, hz_slice* out);

// Registers [p, p+len) with the device and records it.
int RegisterMemory(hz_device* dev, void* p, size_t len, bool owned);
int UnregisterMemory(hz_device* dev, void* p, bool owned);

}  // namespace hz::lib

#endif  // HZ_GUEST_LIB_DEVICE_H_
