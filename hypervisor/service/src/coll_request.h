// A collective request (SPEC §7.4) checked and turned into the engine's
// operation: the descriptor's fields in the order of SPEC §7.4.8, then each
// slice resolved to host spans, then the in-place forms of SPEC §7.4.7.
#ifndef HZ_SERVICE_COLL_REQUEST_H_
#define HZ_SERVICE_COLL_REQUEST_H_

#include <cstdint>
#include <vector>

#include "hz/collectives/types.h"
#include "hz/service/coll_backend.h"
#include "hz/service/family_handler.h"
#include "hz/service/region_table.h"
#include "hz/service/request.h"
#include "protocol/harmonaize.h"

namespace hz::service {

// What the engine gets and what the answer needs.
struct CollPlan {
  coll::OpDesc desc;
  std::vector<RegionPin> pins;  // the regions the spans point into
  uint32_t result_len = 0;      // inline receive bytes in the result space
  uint64_t bytes = 0;           // payload, for the metrics
};

// Checks args a of req (opcode already mapped into plan->desc.op, flags and
// communicator checked) for a rank of member, and resolves its slices.
// inline_data: HZ_F_INLINE_DATA was granted. Returns Reply::Ok() with *plan
// filled in, or the error to answer with.
Reply PlanCollective(const Request& req, const hz_coll_args& a, const CommMember& member,
                     bool inline_data, const RegionTable& regions, CollPlan* plan);

}  // namespace hz::service

#endif  // HZ_SERVICE_COLL_REQUEST_H_
