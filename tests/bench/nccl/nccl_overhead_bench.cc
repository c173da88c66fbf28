// Per-call overhead of libnccl over the raw device round trip: a 1-element
// fp32 all-reduce on a one-rank communicator, through ncclAllReduce and as a
// hand-built ALLREDUCE request on vdev's virtio-user front-end, against the
// same harmonaized in the same run. JSON lines on stdout; the ratio of the
// medians is the overhead (goal: <= 1.2).
//
//   nccl_overhead_bench [--iters N]     (default 3000; --long: 30000)
#include <nccl.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hz_client.h"
#include "service_harness.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// ncclAllReduce of one float from `send` to `recv`; per-call microseconds.
bool NcclRun(int iters, float* send, float* recv, std::vector<double>* us) {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::fprintf(stderr, "nccl init: %s\n", ncclGetLastError(nullptr));
    return false;
  }
  for (int i = 0; i < iters + iters / 10; ++i) {
    *send = static_cast<float>(i);
    auto t0 = Clock::now();
    ncclResult_t r = ncclAllReduce(send, recv, 1, ncclFloat32, ncclSum, comm, nullptr);
    auto t1 = Clock::now();
    if (r != ncclSuccess || *recv != static_cast<float>(i)) {
      std::fprintf(stderr, "ncclAllReduce: %s\n", ncclGetLastError(comm));
      return false;
    }
    if (i >= iters / 10) us->push_back(Micros(t0, t1));  // the first tenth warms up
  }
  return ncclCommDestroy(comm) == ncclSuccess;
}

// The same request built by hand on the front-end, with registered regions.
bool RawRun(const std::string& socket, int iters, std::vector<double>* us) {
  hz::testing::HzClient c;
  std::string error;
  if (!c.Connect(socket, 16ull << 20, &error) || c.Hello() != HZ_S_OK) {
    std::fprintf(stderr, "raw connect: %s\n", error.c_str());
    return false;
  }
  hz::testing::GuestBuffer s, r;
  hz_comm_uid uid{};
  uint64_t comm = 0;
  if (c.Register(64, 1, HZ_REGION_F_READ, &s) != HZ_S_OK ||
      c.Register(64, 1, HZ_REGION_F_WRITE, &r) != HZ_S_OK || c.NewUid(&uid) != HZ_S_OK ||
      c.InitComm(uid, 1, 0, &comm) != HZ_S_OK) {
    std::fprintf(stderr, "raw setup failed\n");
    return false;
  }
  hz_coll_args a{};
  a.comm = comm;
  a.count = 1;
  a.dtype = HZ_FP32;
  a.redop = HZ_SUM;
  a.send = hz::testing::SliceOf(s, 0, 4);
  a.recv = hz::testing::SliceOf(r, 0, 4);
  for (int i = 0; i < iters + iters / 10; ++i) {
    float v = static_cast<float>(i), out = -1;
    s.Write(0, &v, 4);
    a.seq = static_cast<uint64_t>(i);
    auto t0 = Clock::now();
    uint32_t st = c.Coll(HZ_VQ_REQUEST_BASE, HZ_OP_ALLREDUCE, a);
    auto t1 = Clock::now();
    r.Read(0, &out, 4);
    if (st != HZ_S_OK || out != v) {
      std::fprintf(stderr, "raw allreduce: status %u\n", st);
      return false;
    }
    if (i >= iters / 10) us->push_back(Micros(t0, t1));
  }
  return true;
}

void Emit(const char* name, const std::vector<double>& us) {
  std::printf("{\"name\":\"%s\",\"iters\":%zu,\"p50_us\":%.2f}\n", name, us.size(), Median(us));
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 3000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--long") {
      iters = 30000;
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(10, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--iters N | --long]\n", argv[0]);
      return 2;
    }
  }
  hz::testing::ServiceProcess svc;
  if (!svc.Start()) {
    std::fprintf(stderr, "harmonaized did not start\n");
    return 1;
  }
  auto vms = svc.TenantWithVms("bench", 2);
  if (vms.size() != 2) return 1;
  std::string dev = "vhost-user:" + vms[0];
  setenv("HZ_DEVICE", dev.c_str(), 1);

  std::vector<double> raw, nccl_plain;
  if (!RawRun(vms[1], iters, &raw)) return 1;
  float plain[2] = {0, 0};
  if (!NcclRun(iters, &plain[0], &plain[1], &nccl_plain)) return 1;
  Emit("raw_frontend_allreduce_1xfp32", raw);
  Emit("nccl_allreduce_1xfp32_host_buffers", nccl_plain);
  std::printf(
      "{\"name\":\"nccl_overhead_ratio\",\"reference\":\"raw_frontend_allreduce_1xfp32\","
      "\"ratio\":%.3f,\"goal\":1.2}\n",
      Median(nccl_plain) / Median(raw));
  return 0;
}
