/*
 * Built with NVIDIA's nccl.h alone on the include path and linked to our
 * libnccl.so.2: every function of NCCL 2.28's API and its pnccl* twin must
 * resolve (or this does not link), with the types NVIDIA declares (or this
 * does not compile), to code inside our library (checked with dladdr).
 *   nccl_real_header_symbols <path of our libnccl.so.2>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ncclResetDebugInit is deprecated in the header; taking its address is the point. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

typedef void (*AnyFunction)(void);
struct Symbol {
  const char* name;
  AnyFunction address;
};

/* Each name twice: the pointer has the exact type NVIDIA declares for ncclX,
 * and pncclX must have that same type. */
#define BOTH(f)                                \
  {#f, (AnyFunction)(__typeof__(&f))&f}, {     \
    "p" #f, (AnyFunction)(__typeof__(&f))&p##f \
  }

static const struct Symbol kSymbols[] = {
    BOTH(ncclMemAlloc),
    BOTH(ncclMemFree),
    BOTH(ncclGetVersion),
    BOTH(ncclGetUniqueId),
    BOTH(ncclCommInitRankConfig),
    BOTH(ncclCommInitRank),
    BOTH(ncclCommInitAll),
    BOTH(ncclCommFinalize),
    BOTH(ncclCommDestroy),
    BOTH(ncclCommAbort),
    BOTH(ncclCommRevoke),
    BOTH(ncclCommSplit),
    BOTH(ncclCommShrink),
    BOTH(ncclCommInitRankScalable),
    BOTH(ncclGetErrorString),
    BOTH(ncclGetLastError),
    BOTH(ncclResetDebugInit),
    BOTH(ncclCommGetAsyncError),
    BOTH(ncclCommCount),
    BOTH(ncclCommCuDevice),
    BOTH(ncclCommUserRank),
    BOTH(ncclCommRegister),
    BOTH(ncclCommDeregister),
    BOTH(ncclCommWindowRegister),
    BOTH(ncclCommWindowDeregister),
    BOTH(ncclRedOpCreatePreMulSum),
    BOTH(ncclRedOpDestroy),
    BOTH(ncclReduce),
    BOTH(ncclBcast),
    BOTH(ncclBroadcast),
    BOTH(ncclAllReduce),
    BOTH(ncclReduceScatter),
    BOTH(ncclAllGather),
    BOTH(ncclAlltoAll),
    BOTH(ncclGather),
    BOTH(ncclScatter),
    BOTH(ncclSend),
    BOTH(ncclRecv),
    BOTH(ncclGroupStart),
    BOTH(ncclGroupEnd),
    BOTH(ncclGroupSimulateEnd),
};

int main(int argc, char** argv) {
  char ours[PATH_MAX], where[PATH_MAX];
  size_t i, n = sizeof(kSymbols) / sizeof(kSymbols[0]);
  int bad = 0, version = 0;
  if (argc != 2 || realpath(argv[1], ours) == NULL) {
    fprintf(stderr, "usage: %s <our libnccl.so.2>\n", argv[0]);
    return 2;
  }
  for (i = 0; i < n; ++i) {
    Dl_info info;
    if (dladdr((void*)kSymbols[i].address, &info) == 0 || info.dli_fname == NULL ||
        realpath(info.dli_fname, where) == NULL || strcmp(where, ours) != 0) {
      fprintf(stderr, "%s does not come from %s\n", kSymbols[i].name, ours);
      ++bad;
    }
  }
  /* A call through NVIDIA's declarations reaches our code. */
  if (ncclGetVersion(&version) != ncclSuccess || version / 100 != NCCL_VERSION_CODE / 100) {
    fprintf(stderr, "ncclGetVersion gave %d for a %d header\n", version, NCCL_VERSION_CODE);
    ++bad;
  }
  printf("%zu symbols (%zu functions and their pnccl twins) checked, %d bad\n", n, n / 2, bad);
  return bad == 0 ? 0 : 1;
}
