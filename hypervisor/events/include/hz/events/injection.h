// Operator injection (hzctl): builds an EventSpec from a JSON description,
// for every topic, with the same coarse-value rules as the engines' builders.
//
//   {"topic": "maintenance", "kind": "scheduled", "in_s": 900, "duration_s": 600,
//    "device_index": 2, "approvable": true}
//
// Common keys: "topic" and "kind" (names, lower case, as in SPEC.md §8.3),
// "deadline_s" (absolute unix seconds) or "in_s" (seconds from now) for
// SCHEDULED maintenance and preemption. Per topic:
//   failure      device_index, errors
//   maintenance  duration_s, device_index, approvable
//   preemption   devices, device_index, approvable
//   capacity     device_kind ("gpu"|"nic"), count, devices_now, reservation_id
//   congestion   level (0-3) or used + capacity
//   checkpoint   stream, tier, step, status, flags
//   negotiation  negotiation_id, reservation_id, offer_id, reason, count, device_kind
//   hint         suggested, min_batch, max_batch, step, n_now, n_peak
//   energy       level (0-2) or draw + budget, sources (["power", "price", "carbon"])
// Unknown keys, names and out-of-range values are errors that say which.
#ifndef HZ_EVENTS_INJECTION_H_
#define HZ_EVENTS_INJECTION_H_

#include <cstdint>
#include <string>

#include "hz/common/status.h"
#include "hz/events/event_spec.h"

namespace hz::events {

Status SpecFromJson(const std::string& json_text, uint64_t now, EventSpec* spec);

}  // namespace hz::events

#endif  // HZ_EVENTS_INJECTION_H_
