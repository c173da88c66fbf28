// How long a low-latency communicator's waits spin before they sleep.
#ifndef HZ_LIB_LATENCY_SPIN_H_
#define HZ_LIB_LATENCY_SPIN_H_

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "protocol/harmonaize.h"

namespace hz::lib {

// The most HZ_LATENCY_POLL_US may ask for.
inline constexpr long kMaxLatencySpinUs = 100000;

// The device's polling window as its configuration space reports it (SPEC
// §5.1, §5.2): 0 where it does not poll for this tenant, none where it does
// not say (a device that predates the field).
inline std::optional<uint32_t> DeviceWindow(const hz_config& config) {
  if (!(config.status & HZ_CFG_S_LATENCY_WINDOW)) return std::nullopt;
  return config.latency_poll_us;
}

// A spin of us microseconds, stopped at the device's polling window: past it
// the device no longer polls and a spinning rank only holds its CPU, and
// where ranks outnumber CPUs that CPU may be the one the rank the device
// waits for needs (README.md, "Latency class", has the figures). A device
// that does not poll (window 0) leaves nothing to spin for; one that does
// not say leaves the spin to the rank.
inline std::chrono::microseconds SpinWithin(long us, std::optional<uint32_t> device_window_us) {
  if (device_window_us && us > static_cast<long>(*device_window_us)) us = *device_window_us;
  return std::chrono::microseconds(us);
}

// env is HZ_LATENCY_POLL_US: 0..kMaxLatencySpinUs microseconds; unset, empty
// or anything else means 0, no spin. The spin stops at the device's window.
inline std::chrono::microseconds LatencySpin(const char* env,
                                             std::optional<uint32_t> device_window_us) {
  long us = 0;
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= kMaxLatencySpinUs) us = v;
  }
  return SpinWithin(us, device_window_us);
}

}  // namespace hz::lib

#endif  // HZ_LIB_LATENCY_SPIN_H_
