// One rank of an NCCL program that uses the parts of NCCL 2.28's API beyond
// the classic collectives: ncclCommSplit, PreMulSum operators, ncclGather
// and ncclScatter, ncclMemAlloc and registration, ncclCommShrink, and the
// calls the device cannot serve (which must fail cleanly, not abort).
//
// Written only against nccl.h: built once with HarmonAIze's header and, when
// NVIDIA's nccl.h is installed, once more with NVIDIA's header alone (the
// holdout build), both linked to HarmonAIze's libnccl.so.2.
//
//   nccl_api_program api <rank> <nranks> <id-file>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int rank = 0;
int nranks = 0;

#define CHECK(cond)                                                                               \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s (last error: %s)\n", rank, __FILE__, \
                   __LINE__, #cond, ncclGetLastError(nullptr));                                   \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)
#define NCCL_OK(call) CHECK((call) == ncclSuccess)

bool Contains(const char* s, const char* needle) {
  return s && std::strstr(s, needle);
}

bool ShareId(const std::string& path, ncclUniqueId* id) {
  if (rank == 0) {
    if (ncclGetUniqueId(id) != ncclSuccess) return false;
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id->internal, sizeof(id->internal));
    return std::rename(tmp.c_str(), path.c_str()) == 0;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id->internal, sizeof(id->internal))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

uint16_t Bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact for the short values used here
}

// IEEE half of a positive normal value with a short mantissa (exact).
uint16_t Half(float f) {
  int e = 0;
  float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  auto mantissa = static_cast<uint16_t>((m * 2.0f - 1.0f) * 1024.0f);
  return static_cast<uint16_t>(((e - 1 + 15) << 10) | mantissa);
}

// Sum of the parent ranks in sub, checked through an all-reduce on sub.
void CheckSum(ncclComm_t sub, int expected) {
  int32_t mine = rank, sum = -1;
  NCCL_OK(ncclAllReduce(&mine, &sum, 1, ncclInt32, ncclSum, sub, nullptr));
  CHECK(sum == expected);
}

// Color by parity, key reversing the order: members are ranked by key.
void SplitByParity(ncclComm_t comm) {
  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommSplit(comm, rank % 2, -rank, &sub, nullptr));
  CHECK(sub != nullptr);
  int members = 0, above = 0, sum = 0;
  for (int r = 0; r < nranks; ++r) {
    if (r % 2 != rank % 2) continue;
    ++members;
    sum += r;
    if (r > rank) ++above;  // a larger rank has a smaller key, so comes first
  }
  int count = 0, me = -1;
  NCCL_OK(ncclCommCount(sub, &count));
  NCCL_OK(ncclCommUserRank(sub, &me));
  CHECK(count == members && me == above);
  CheckSum(sub, sum);
  NCCL_OK(ncclCommDestroy(sub));
}

// Rank 0 opts out with NCCL_SPLIT_NOCOLOR; the others keep their order.
void SplitNoColor(ncclComm_t comm) {
  ncclComm_t sub = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  NCCL_OK(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, 0, &sub, &config));
  if (rank == 0) {
    CHECK(sub == nullptr);
    return;
  }
  int count = 0, me = -1;
  NCCL_OK(ncclCommCount(sub, &count));
  NCCL_OK(ncclCommUserRank(sub, &me));
  CHECK(count == nranks - 1 && me == rank - 1);
  CheckSum(sub, nranks * (nranks - 1) / 2);
  NCCL_OK(ncclCommDestroy(sub));
}

// One rank passes a negative color: every rank is told, none hangs.
void SplitBadColor(ncclComm_t comm) {
  ncclComm_t sub = reinterpret_cast<ncclComm_t>(&sub);
  CHECK(ncclCommSplit(comm, rank == 0 ? -5 : 0, 0, &sub, nullptr) == ncclInvalidArgument);
  CHECK(sub == nullptr);
  CHECK(Contains(ncclGetLastError(comm), "color"));
}

// Host-immediate scalar: each rank scales by rank + 1, read at creation.
void PreMulSumHost(ncclComm_t comm) {
  const size_t n = 1000;
  float scalar = static_cast<float>(rank + 1);
  ncclRedOp_t op;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  CHECK(static_cast<int>(op) >= static_cast<int>(ncclNumOps));
  scalar = 1000.0f;  // must not matter any more
  const float weight = nranks * (nranks + 1) / 2.0f;
  std::vector<float> x(n), y(n, -1.0f);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) + 0.25f;
  NCCL_OK(ncclAllReduce(x.data(), y.data(), n, ncclFloat32, op, comm, nullptr));
  for (size_t i = 0; i < n; ++i) {
    CHECK(y[i] == (static_cast<float>(i) + 0.25f) * weight);
    CHECK(x[i] == static_cast<float>(i) + 0.25f);  // the input is left alone
  }
  NCCL_OK(ncclAllReduce(x.data(), x.data(), n, ncclFloat32, op, comm, nullptr));  // in place
  CHECK(std::equal(x.begin(), x.end(), y.begin()));

  std::vector<float> rs(n * nranks, 2.0f), rr(n);
  NCCL_OK(ncclReduceScatter(rs.data(), rr.data(), n, ncclFloat32, op, comm, nullptr));
  for (float v : rr) CHECK(v == 2.0f * weight);
  float one = 1.0f, root_sum = -1.0f;
  NCCL_OK(ncclReduce(&one, &root_sum, 1, ncclFloat32, op, 0, comm, nullptr));
  CHECK(rank != 0 || root_sum == weight);

  // The operator is for float only; then it is destroyed and unknown.
  int32_t i32 = 1, o32 = 0;
  CHECK(ncclAllReduce(&i32, &o32, 1, ncclInt32, op, comm, nullptr) == ncclInvalidArgument);
  NCCL_OK(ncclRedOpDestroy(op, comm));
  CHECK(ncclAllReduce(x.data(), y.data(), n, ncclFloat32, op, comm, nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclRedOpDestroy(op, comm) == ncclInvalidArgument);
  CHECK(ncclRedOpDestroy(ncclSum, comm) == ncclInvalidArgument);
}

// Device-resident scalar: read when the collective runs, not at creation.
void PreMulSumResident(ncclComm_t comm) {
  double scalar = 0.0;
  ncclRedOp_t op;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarDevice, comm));
  scalar = rank + 3.0;
  std::vector<double> x(64, 1.0), y(64);
  NCCL_OK(ncclAllReduce(x.data(), y.data(), x.size(), ncclFloat64, op, comm, nullptr));
  for (double v : y) CHECK(v == nranks * 3.0 + nranks * (nranks - 1) / 2.0);
  NCCL_OK(ncclRedOpDestroy(op, comm));
}

// Integer, bf16 and fp16 operators; one destroyed inside the group that uses it,
// which NCCL allows once the call that was given it returned.
void PreMulSumTypesInGroup(ncclComm_t comm) {
  int32_t three = 3;
  uint16_t half = Bf16(0.5f);
  uint16_t quarter = Half(0.25f);
  ncclRedOp_t iop, bop, hop;
  NCCL_OK(ncclRedOpCreatePreMulSum(&iop, &three, ncclInt32, ncclScalarHostImmediate, comm));
  NCCL_OK(ncclRedOpCreatePreMulSum(&bop, &half, ncclBfloat16, ncclScalarHostImmediate, comm));
  NCCL_OK(ncclRedOpCreatePreMulSum(&hop, &quarter, ncclFloat16, ncclScalarHostImmediate, comm));
  std::vector<uint16_t> hs(17, Half(6.0f)), hr(17);
  int32_t is = rank + 1, ir = 0;
  std::vector<uint16_t> bs(33, Bf16(3.0f)), br(33);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(&is, &ir, 1, ncclInt32, iop, comm, nullptr));
  NCCL_OK(ncclAllReduce(bs.data(), br.data(), bs.size(), ncclBfloat16, bop, comm, nullptr));
  NCCL_OK(ncclRedOpDestroy(bop, comm));
  NCCL_OK(ncclAllReduce(hs.data(), hr.data(), hs.size(), ncclFloat16, hop, comm, nullptr));
  NCCL_OK(ncclRedOpDestroy(hop, comm));
  NCCL_OK(ncclGroupEnd());
  CHECK(ir == 3 * nranks * (nranks + 1) / 2);
  for (uint16_t v : br) CHECK(v == Bf16(1.5f * nranks));
  for (uint16_t v : hr) CHECK(v == Half(1.5f * nranks));
  NCCL_OK(ncclRedOpDestroy(iop, comm));
}

void GatherScatter(ncclComm_t comm) {
  const size_t n = 37;
  const int root = nranks - 1;
  std::vector<int32_t> send(n), all(n * nranks, -1);
  for (size_t i = 0; i < n; ++i) send[i] = rank * 1000 + static_cast<int32_t>(i);
  NCCL_OK(ncclGather(send.data(), rank == root ? all.data() : nullptr, n, ncclInt32, root, comm,
                     nullptr));
  if (rank == root)
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < n; ++i) CHECK(all[r * n + i] == r * 1000 + static_cast<int32_t>(i));

  // Scatter back from root, the root's own part in place.
  std::vector<int32_t> mine(n, -1);
  int32_t* recv = rank == root ? all.data() + root * n : mine.data();
  NCCL_OK(ncclScatter(all.data(), recv, n, ncclInt32, root, comm, nullptr));
  for (size_t i = 0; i < n; ++i) CHECK(recv[i] == rank * 1000 + static_cast<int32_t>(i));

  CHECK(ncclGather(send.data(), all.data(), n, ncclInt32, nranks, comm, nullptr) ==
        ncclInvalidArgument);
  CHECK(Contains(ncclGetLastError(comm), "root"));
}

// ncclMemAlloc memory and registered buffers work in collectives.
void Memory(ncclComm_t comm) {
  const size_t n = 4096;
  void* p = nullptr;
  NCCL_OK(ncclMemAlloc(&p, n * sizeof(float)));
  CHECK(p != nullptr);
  auto* f = static_cast<float*>(p);
  std::fill(f, f + n, 1.0f);
  void* handle = nullptr;
  NCCL_OK(ncclCommRegister(comm, p, n * sizeof(float), &handle));
  NCCL_OK(ncclAllReduce(f, f, n, ncclFloat32, ncclSum, comm, nullptr));
  for (size_t i = 0; i < n; ++i) CHECK(f[i] == static_cast<float>(nranks));
  NCCL_OK(ncclCommDeregister(comm, handle));

  std::vector<float> v(n, 2.0f);
  ncclWindow_t win = nullptr;
  NCCL_OK(ncclCommWindowRegister(comm, v.data(), n * sizeof(float), &win, NCCL_WIN_DEFAULT));
  NCCL_OK(ncclAllReduce(v.data(), f, n, ncclFloat32, ncclSum, comm, nullptr));
  for (size_t i = 0; i < n; ++i) CHECK(f[i] == 2.0f * nranks);
  NCCL_OK(ncclCommWindowDeregister(comm, win));
  NCCL_OK(ncclMemFree(p));
}

// What the device cannot do fails with a reason, and leaves no trace.
void Unsupported(ncclComm_t comm) {
  float x = 1.0f, y = 0.0f;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr));
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage);
  CHECK(Contains(ncclGetLastError(comm), "performance model"));
  CHECK(ncclGroupEnd() == ncclInvalidUsage);  // the group is over
  CHECK(y == 0.0f);                           // and its operation did not run

  int device = -1;
  ncclResult_t r = ncclCommCuDevice(comm, &device);
  CHECK((r == ncclSuccess && device >= 0) ||
        (r == ncclInvalidUsage && Contains(ncclGetLastError(comm), "CUDA")));

  // The profiling twins are the same functions.
  NCCL_OK(pncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr));
  CHECK(y == static_cast<float>(nranks));
}

// The last rank leaves; the others continue on a shrunk communicator.
void Shrink(ncclComm_t comm) {
  if (nranks < 2 || rank == nranks - 1) return;
  int excluded = nranks - 1;
  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommShrink(comm, &excluded, 1, &sub, nullptr, NCCL_SHRINK_DEFAULT));
  int count = 0, me = -1;
  NCCL_OK(ncclCommCount(sub, &count));
  NCCL_OK(ncclCommUserRank(sub, &me));
  CHECK(count == nranks - 1 && me == rank);
  CheckSum(sub, (nranks - 1) * (nranks - 2) / 2);
  NCCL_OK(ncclCommDestroy(sub));
}

// A revoked communicator refuses new operations; destroying it still works.
void Revoke(ncclComm_t comm) {
  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommSplit(comm, 0, rank, &sub, nullptr));
  CHECK(ncclCommRevoke(sub, 1) == ncclInvalidArgument);
  NCCL_OK(ncclCommRevoke(sub, NCCL_REVOKE_DEFAULT));
  float x = 1.0f, y = 0.0f;
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, sub, nullptr) == ncclInvalidUsage);
  CHECK(Contains(ncclGetLastError(sub), "revoked"));
  CHECK(ncclCommFinalize(sub) == ncclInvalidUsage);
  // Every rank revoked before any destroys: meet on the parent first.
  NCCL_OK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr));
  NCCL_OK(ncclCommDestroy(sub));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 || std::strcmp(argv[1], "api") != 0) {
    std::fprintf(stderr, "usage: %s api <rank> <nranks> <id-file>\n", argv[0]);
    return 2;
  }
  rank = std::atoi(argv[2]);
  nranks = std::atoi(argv[3]);
  ncclUniqueId id;
  CHECK(ShareId(argv[4], &id));
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));

  SplitByParity(comm);
  SplitNoColor(comm);
  SplitBadColor(comm);
  PreMulSumHost(comm);
  PreMulSumResident(comm);
  PreMulSumTypesInGroup(comm);
  GatherScatter(comm);
  Memory(comm);
  Unsupported(comm);
  Shrink(comm);
  Revoke(comm);

  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess);
  NCCL_OK(ncclCommDestroy(comm));
  return 0;
}
