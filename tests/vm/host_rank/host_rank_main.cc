// A tenant process on the host, next to the test guests: it reaches
// harmonaized over virtio-user (libharmonaize, "vhost-user:<socket>") and
// takes part in the guests' communicators.
//   vm-host-rank ranks SOCKET NRANKS  creates a uid, prints "HZ-UID: <hex>",
//                                     joins as rank 0 and runs the same
//                                     ALLREDUCE/ALLGATHER sizes as the guests'
//                                     `hz_drvtest ranks`
//   vm-host-rank uid SOCKET           prints a fresh uid, then keeps its session
//                                     open until it is killed
//   vm-host-rank survive SOCKET FILE  rank 0 of 3 (uid printed as above): one
//                                     ALLREDUCE, then one that must fail when
//                                     rank 2's VM is killed; then reads a new uid
//                                     from FILE (a FIFO) and joins it as rank 0 of 2
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "harmonaize/hz.h"

namespace {

#define HOST_CHECK(cond, ...)                          \
  do {                                                 \
    if (!(cond)) {                                     \
      std::printf("vm-host-rank: FAIL: " __VA_ARGS__); \
      std::printf("\n");                               \
      std::exit(1);                                    \
    }                                                  \
  } while (0)

// The same values as hz_drvtest's mixed_*_value.
float ReduceValue(uint32_t rank, uint32_t i) {
  return static_cast<float>((rank + 1) * (i % 251));
}
float GatherValue(uint32_t rank, uint32_t i) {
  return static_cast<float>(rank * 1000 + i % 997);
}

hz_device_t* Open(const char* socket) {
  hz_device_t* dev = nullptr;
  std::string spec = std::string("vhost-user:") + socket;
  int rc = hz_open(spec.c_str(), &dev);
  HOST_CHECK(rc == HZ_OK, "hz_open %s: %s", spec.c_str(), hz_strerror(rc));
  return dev;
}

hz_uid_t PrintNewUid(hz_device_t* dev) {
  hz_uid_t uid;
  int rc = hz_comm_get_uid(dev, &uid);
  HOST_CHECK(rc == HZ_OK, "hz_comm_get_uid: %s", hz_strerror(rc));
  std::printf("HZ-UID: ");
  for (uint8_t b : uid.bytes) std::printf("%02x", b);
  std::printf("\n");
  std::fflush(stdout);
  return uid;
}

int Ranks(const char* socket, uint32_t nranks) {
  static const uint32_t kSizes[] = {1, 1000, 4096, 200003};
  constexpr uint32_t kMax = 200003;
  hz_device_t* dev = Open(socket);
  hz_uid_t uid = PrintNewUid(dev);
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.timeout_ms = 150000;  // the guests boot under TCG
  hz_comm_t* comm = nullptr;
  int rc = hz_comm_init(dev, &uid, nranks, 0, &cfg, &comm);
  HOST_CHECK(rc == HZ_OK, "hz_comm_init: %s", hz_strerror(rc));
  void* mem = nullptr;
  rc = hz_mem_alloc(dev, sizeof(float) * kMax * (2 + nranks), &mem);
  HOST_CHECK(rc == HZ_OK, "hz_mem_alloc: %s", hz_strerror(rc));
  float* send = static_cast<float*>(mem);
  float* sum = send + kMax;
  float* gathered = sum + kMax;
  for (uint32_t n : kSizes) {
    for (uint32_t i = 0; i < n; ++i) {
      send[i] = ReduceValue(0, i);
      sum[i] = -1;
    }
    rc = hz_allreduce(comm, send, sum, n, HZ_FP32, HZ_SUM);
    HOST_CHECK(rc == HZ_OK, "hz_allreduce of %u: %s", n, hz_strerror(rc));
    for (uint32_t i = 0; i < n; ++i) {
      float want = 0;
      for (uint32_t r = 0; r < nranks; ++r) want += ReduceValue(r, i);
      HOST_CHECK(sum[i] == want, "allreduce of %u: element %u is %g, want %g", n, i,
                 static_cast<double>(sum[i]), static_cast<double>(want));
    }
    std::printf("vm-host-rank: rank 0: ALLREDUCE of %u floats correct\n", n);
    for (uint32_t i = 0; i < n; ++i) send[i] = GatherValue(0, i);
    for (size_t i = 0; i < static_cast<size_t>(n) * nranks; ++i) gathered[i] = -1;
    rc = hz_allgather(comm, send, gathered, n, HZ_FP32);
    HOST_CHECK(rc == HZ_OK, "hz_allgather of %u: %s", n, hz_strerror(rc));
    for (uint32_t r = 0; r < nranks; ++r) {
      for (uint32_t i = 0; i < n; ++i) {
        HOST_CHECK(gathered[static_cast<size_t>(r) * n + i] == GatherValue(r, i),
                   "allgather of %u: rank %u's element %u is %g", n, r, i,
                   static_cast<double>(gathered[static_cast<size_t>(r) * n + i]));
      }
    }
    std::printf("vm-host-rank: rank 0: ALLGATHER of %u floats correct\n", n);
    std::fflush(stdout);
  }
  hz_mem_free(dev, mem);
  hz_comm_destroy(comm);
  hz_close(dev);
  std::printf("vm-host-rank: rank 0 of %u: every size correct\n", nranks);
  return 0;
}

// ALLREDUCE(SUM) of (rank + 1) * i over 4096 floats, as hz_drvtest's
// kill_rank_allreduce; data checked when it succeeds.
int SmallAllReduce(hz_comm_t* comm, float* buf, uint32_t nranks) {
  constexpr uint32_t kN = 4096;
  for (uint32_t i = 0; i < kN; ++i) {
    buf[i] = static_cast<float>(i);
    buf[kN + i] = -1;
  }
  int rc = hz_allreduce(comm, buf, buf + kN, kN, HZ_FP32, HZ_SUM);
  if (rc != HZ_OK) return rc;
  float factor = static_cast<float>(nranks * (nranks + 1) / 2);
  for (uint32_t i = 0; i < kN; ++i) {
    HOST_CHECK(buf[kN + i] == factor * static_cast<float>(i), "element %u is %g", i,
               static_cast<double>(buf[kN + i]));
  }
  return HZ_OK;
}

int Survive(const char* socket, const char* fifo) {
  hz_device_t* dev = Open(socket);
  hz_uid_t uid = PrintNewUid(dev);
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.timeout_ms = 150000;
  hz_comm_t* comm = nullptr;
  int rc = hz_comm_init(dev, &uid, 3, 0, &cfg, &comm);
  HOST_CHECK(rc == HZ_OK, "hz_comm_init: %s", hz_strerror(rc));
  void* mem = nullptr;
  rc = hz_mem_alloc(dev, 2 * 4096 * sizeof(float), &mem);
  HOST_CHECK(rc == HZ_OK, "hz_mem_alloc: %s", hz_strerror(rc));
  float* buf = static_cast<float*>(mem);
  rc = SmallAllReduce(comm, buf, 3);
  HOST_CHECK(rc == HZ_OK, "first allreduce: %s", hz_strerror(rc));
  std::printf("vm-host-rank: rank 0: first ALLREDUCE correct\n");
  time_t t0 = time(nullptr);
  rc = SmallAllReduce(comm, buf, 3);
  std::printf("vm-host-rank: rank 0: ALLREDUCE with rank 2's VM gone: %s after %ld s\n",
              hz_strerror(rc), static_cast<long>(time(nullptr) - t0));
  HOST_CHECK(rc == HZ_EABORTED || rc == HZ_ETIMEDOUT, "the collective did not fail as it should");
  hz_comm_destroy(comm);

  FILE* f = std::fopen(fifo, "r");
  HOST_CHECK(f != nullptr, "open %s", fifo);
  char hex[2 * sizeof(uid.bytes) + 2] = {};
  HOST_CHECK(std::fgets(hex, sizeof(hex), f) != nullptr, "no uid in %s", fifo);
  std::fclose(f);
  for (size_t i = 0; i < sizeof(uid.bytes); ++i) {
    unsigned int b = 0;
    HOST_CHECK(std::sscanf(hex + 2 * i, "%2x", &b) == 1, "bad uid %s", hex);
    uid.bytes[i] = static_cast<uint8_t>(b);
  }
  rc = hz_comm_init(dev, &uid, 2, 0, &cfg, &comm);
  HOST_CHECK(rc == HZ_OK, "hz_comm_init among the survivors: %s", hz_strerror(rc));
  rc = SmallAllReduce(comm, buf, 2);
  HOST_CHECK(rc == HZ_OK, "allreduce among the survivors: %s", hz_strerror(rc));
  std::printf("vm-host-rank: rank 0: ALLREDUCE among the survivors correct\n");
  hz_mem_free(dev, mem);
  hz_comm_destroy(comm);
  hz_close(dev);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 4 && std::strcmp(argv[1], "ranks") == 0) {
    int n = std::atoi(argv[3]);
    HOST_CHECK(n >= 2 && n <= 16, "NRANKS must be 2..16");
    return Ranks(argv[2], static_cast<uint32_t>(n));
  }
  if (argc == 4 && std::strcmp(argv[1], "survive") == 0) return Survive(argv[2], argv[3]);
  if (argc == 3 && std::strcmp(argv[1], "uid") == 0) {
    hz_device_t* dev = Open(argv[2]);
    PrintNewUid(dev);
    for (;;) pause();  // the uid's session stays until the test kills us
  }
  std::fprintf(stderr,
               "usage: vm-host-rank ranks SOCKET NRANKS | uid SOCKET | survive SOCKET FIFO\n");
  return 2;
}
