// NVIDIA's nccl.h first, then ours: every type is NVIDIA's and every one of
// our declarations must redeclare a function with exactly NVIDIA's type, or
// this file does not compile.
#include <nccl.h>  // NVIDIA's, from the CUDA toolkit's include directory

#include "../../../guest/nccl/include/nccl.h"

#include <cstdio>
#include <type_traits>

// Our header did not define its own copies of the types.
static_assert(
    std::is_same_v<decltype(ncclAllReduce), ncclResult_t(const void*, void*, size_t, ncclDataType_t,
                                                         ncclRedOp_t, ncclComm_t, cudaStream_t)>);
static_assert(sizeof(ncclUniqueId) == 128);

int main() {
  std::printf("NVIDIA nccl.h %d.%d.%d and HarmonAIze's nccl.h compile together\n", NCCL_MAJOR,
              NCCL_MINOR, NCCL_PATCH);
  return 0;
}
