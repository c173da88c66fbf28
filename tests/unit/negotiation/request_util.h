// Requests and the clock the negotiation engine's tests share.
#ifndef HZ_TESTS_UNIT_NEGOTIATION_REQUEST_UTIL_H_
#define HZ_TESTS_UNIT_NEGOTIATION_REQUEST_UTIL_H_

#include <cstdint>

#include "protocol/harmonaize.h"

namespace hz::negotiation::testing {

constexpr uint64_t kNow = 600000;  // a window boundary (60 s windows)

// A request for `count` devices of `kind` for `duration` seconds, starting
// between `earliest` and `latest`.
inline hz_neg_request Req(uint16_t count, uint8_t locality, uint64_t earliest, uint64_t latest,
                          uint64_t duration, uint8_t priority = HZ_PRIO_NORMAL,
                          uint16_t kind = HZ_DEV_GPU) {
  hz_neg_request r{};
  r.kind = kind;
  r.count = count;
  r.locality = locality;
  r.priority_class = priority;
  r.earliest_start_s = earliest;
  r.latest_start_s = latest;
  r.duration_s = duration;
  return r;
}

}  // namespace hz::negotiation::testing

#endif  // HZ_TESTS_UNIT_NEGOTIATION_REQUEST_UTIL_H_
