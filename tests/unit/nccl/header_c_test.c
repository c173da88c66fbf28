/*
 * Our nccl.h alone, in strict C: enumerator values, the config initializer,
 * and the library's answers to calls that need no device.
 */
#define _POSIX_C_SOURCE 200809L

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

/* NCCL's ABI: these values are what compiled programs pass. */
typedef char check_types[(ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclUint32 == 3 &&
                          ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 &&
                          ncclFloat32 == 7 && ncclFloat64 == 8 && ncclBfloat16 == 9 &&
                          ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12)
                             ? 1
                             : -1];
typedef char check_ops[(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 &&
                        ncclAvg == 4 && ncclNumOps == 5 && sizeof(ncclRedOp_t) == sizeof(int))
                           ? 1
                           : -1];
typedef char check_results[(ncclSuccess == 0 && ncclSystemError == 2 && ncclInvalidArgument == 4 &&
                            ncclInvalidUsage == 5 && ncclRemoteError == 6 && ncclNumResults == 8)
                               ? 1
                               : -1];
typedef char check_id[sizeof(ncclUniqueId) == 128 ? 1 : -1];

int main(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  int version = 0, n = 0;
  ncclUniqueId id;
  float x = 1, y = 0;

  EXPECT(config.size == sizeof(ncclConfig_t) && config.blocking == NCCL_CONFIG_UNDEF_INT);
  EXPECT(ncclGetVersion(&version) == ncclSuccess && version == NCCL_VERSION_CODE);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument);
  EXPECT(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0);
  EXPECT(strlen(ncclGetErrorString(ncclNumResults)) > 0);

  EXPECT(ncclCommCount(NULL, &n) == ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(NULL), "ncclCommCount") != NULL);
  EXPECT(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, NULL, NULL) == ncclInvalidArgument);
  EXPECT(ncclGroupEnd() == ncclInvalidUsage);
  EXPECT(ncclGroupStart() == ncclSuccess && ncclGroupEnd() == ncclSuccess);
  EXPECT(ncclCommDestroy(NULL) == ncclSuccess);

  /* A unique id that did not come from ncclGetUniqueId. */
  memset(&id, 0x5a, sizeof(id));
  {
    ncclComm_t comm = NULL;
    EXPECT(ncclCommInitRank(&comm, 2, id, 0) == ncclInvalidArgument);
    EXPECT(strstr(ncclGetLastError(NULL), "ncclGetUniqueId") != NULL);
    EXPECT(ncclCommInitRank(&comm, 2, id, 2) == ncclInvalidArgument);
    EXPECT(ncclCommInitRank(&comm, 0, id, 0) == ncclInvalidArgument);
  }

  /* The rest of NCCL 2.28's API: argument errors need no device. */
  {
    ncclComm_t comm = NULL;
    ncclRedOp_t op;
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    ncclSimInfo_t unset;
    ncclWindow_t win = NULL;
    void* handle = NULL;
    int exclude = 1;
    EXPECT(ncclCommSplit(NULL, 0, 0, &comm, NULL) == ncclInvalidArgument && comm == NULL);
    EXPECT(strstr(ncclGetLastError(NULL), "ncclCommSplit") != NULL);
    EXPECT(ncclCommShrink(NULL, &exclude, 1, &comm, NULL, NCCL_SHRINK_DEFAULT) ==
           ncclInvalidArgument);
    EXPECT(ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT) == ncclInvalidArgument);
    EXPECT(ncclCommCuDevice(NULL, &n) == ncclInvalidArgument);
    EXPECT(ncclCommInitRankScalable(&comm, 2, 0, 0, &id, NULL) == ncclInvalidArgument);
    EXPECT(strstr(ncclGetLastError(NULL), "nId") != NULL);
    EXPECT(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, ncclScalarHostImmediate, NULL) ==
           ncclInvalidArgument);
    EXPECT(ncclRedOpDestroy(ncclSum, NULL) == ncclInvalidArgument);
    EXPECT(ncclGather(&x, &y, 1, ncclFloat32, 0, NULL, NULL) == ncclInvalidArgument);
    EXPECT(ncclScatter(&x, &y, 1, ncclFloat32, 0, NULL, NULL) == ncclInvalidArgument);
    EXPECT(ncclMemAlloc(NULL, 16) == ncclInvalidArgument);
    EXPECT(ncclMemFree(NULL) == ncclSuccess);
    EXPECT(ncclCommRegister(NULL, &x, sizeof(x), &handle) == ncclInvalidArgument);
    EXPECT(ncclCommDeregister(NULL, handle) == ncclInvalidArgument);
    EXPECT(ncclCommWindowRegister(NULL, &x, sizeof(x), &win, 0x80) == ncclInvalidArgument);
    EXPECT(strstr(ncclGetLastError(NULL), "winFlags") != NULL);
    EXPECT(ncclCommWindowDeregister(NULL, win) == ncclInvalidArgument);

    /* No performance model: a clear error, and the group is over. */
    memset(&unset, 0, sizeof(unset));
    EXPECT(ncclGroupSimulateEnd(NULL) == ncclInvalidArgument);
    EXPECT(ncclGroupSimulateEnd(&unset) == ncclInvalidArgument);
    EXPECT(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage);
    EXPECT(ncclGroupStart() == ncclSuccess);
    EXPECT(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage);
    EXPECT(strstr(ncclGetLastError(NULL), "performance model") != NULL);
    EXPECT(sim.estimatedTime == NCCL_UNDEF_FLOAT);
    EXPECT(ncclGroupEnd() == ncclInvalidUsage);

    /* The pnccl* twins are the same functions. */
    EXPECT(pncclGetVersion(&version) == ncclSuccess && version == NCCL_VERSION_CODE);
    EXPECT(pncclGetErrorString(ncclInvalidUsage) == ncclGetErrorString(ncclInvalidUsage));
    EXPECT(pncclCommCount(NULL, &n) == ncclInvalidArgument);
    EXPECT(pncclGetLastError(NULL) == ncclGetLastError(NULL));
  }

  /* No device: a system error that names where it looked. */
  setenv("HZ_DEVICE", "vhost-user:/nonexistent/hz-nccl-test.sock", 1);
  EXPECT(ncclGetUniqueId(&id) == ncclSystemError);
  EXPECT(strstr(ncclGetLastError(NULL), "HZ_DEVICE=vhost-user:/nonexistent") != NULL);
  {
    void* p = NULL;
    EXPECT(ncclMemAlloc(&p, 64) == ncclSystemError && p == NULL);
    EXPECT(strstr(ncclGetLastError(NULL), "HZ_DEVICE") != NULL);
  }
  puts("ok");
  return 0;
}
