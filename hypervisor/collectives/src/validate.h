// Checks of one rank's descriptor against the communicator, before anything
// touches memory. Every length is computed overflow-safe.
#ifndef HZ_COLLECTIVES_VALIDATE_H_
#define HZ_COLLECTIVES_VALIDATE_H_

#include <cstdint>

#include "hz/collectives/types.h"

namespace hz::coll::internal {

// kOk, or kInvalid for: unknown op, dtype or (for reductions) redop; root or
// peer >= nranks; a byte count that overflows; an extent with null data;
// extents whose total overflows; a buffer shorter than the op requires.
Status ValidateDesc(const OpDesc& d, uint32_t rank, uint32_t nranks);

// True when the two descriptors describe the same collective (op, count,
// dtype, and redop and root where the op uses them).
bool SameCollective(const OpDesc& a, const OpDesc& b);

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_VALIDATE_H_
