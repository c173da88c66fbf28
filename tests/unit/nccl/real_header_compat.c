/* The same check in C: NVIDIA's nccl.h, then ours. */
#include <nccl.h>

#include "../../../guest/nccl/include/nccl.h"

typedef char unique_id_is_128_bytes[sizeof(ncclUniqueId) == 128 ? 1 : -1];

int hz_nccl_real_header_compat_c(void) {
  return ncclFloat8e5m2;
}
