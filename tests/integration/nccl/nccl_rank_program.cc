// One rank of an NCCL program, written only against NCCL's API: it neither
// knows nor includes anything of HarmonAIze. The device comes from the
// environment ($HZ_DEVICE), as it would for an unmodified application.
//
//   nccl_rank_program <mode> <rank> <nranks> <id-file>
//
// Rank 0 writes the unique id to <id-file>; the others read it. Modes:
//   collectives  every collective and a grouped send/recv ring, checked
//   errors       argument errors and a count mismatch between ranks
//   abort        rank 1 aborts; rank 0 sees ncclRemoteError, sticky
// Exit status 0 on success; otherwise a message on stderr.
#include <nccl.h>
#include <unistd.h>

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
  return static_cast<uint16_t>(bits >> 16);  // exact for the small integers used here
}

void AllReduces(ncclComm_t comm) {
  const size_t n = 1000;
  int64_t sum_ranks = static_cast<int64_t>(nranks) * (nranks - 1) / 2;
  std::vector<float> fs(n), fr(n);
  for (size_t i = 0; i < n; ++i) fs[i] = static_cast<float>(rank + static_cast<int>(i % 7));
  NCCL_OK(ncclAllReduce(fs.data(), fr.data(), n, ncclFloat32, ncclSum, comm, nullptr));
  for (size_t i = 0; i < n; ++i)
    CHECK(fr[i] == static_cast<float>(sum_ranks + nranks * static_cast<int>(i % 7)));

  std::vector<int32_t> is(n, rank + 1), ir(n);
  NCCL_OK(ncclAllReduce(is.data(), ir.data(), n, ncclInt32, ncclProd, comm, nullptr));
  int32_t fact = 1;
  for (int r = 1; r <= nranks; ++r) fact *= r;
  for (int32_t v : ir) CHECK(v == fact);

  std::vector<int64_t> ls(n), lr(n);
  for (size_t i = 0; i < n; ++i) ls[i] = (rank * 37 + static_cast<int64_t>(i)) % 11 - 5;
  NCCL_OK(ncclAllReduce(ls.data(), lr.data(), n, ncclInt64, ncclMax, comm, nullptr));
  for (size_t i = 0; i < n; ++i) {
    int64_t m = INT64_MIN;
    for (int r = 0; r < nranks; ++r)
      m = std::max<int64_t>(m, (r * 37 + static_cast<int64_t>(i)) % 11 - 5);
    CHECK(lr[i] == m);
  }

  // In place, fp64 minimum.
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = (rank == 1 % nranks) ? -1.5 : static_cast<double>(i);
  NCCL_OK(ncclAllReduce(d.data(), d.data(), n, ncclFloat64, ncclMin, comm, nullptr));
  for (size_t i = 0; i < n; ++i) CHECK(d[i] == (nranks > 1 ? std::min(-1.5, 0.0 + i) : -1.5));

  std::vector<float> as(n, static_cast<float>(2 * rank)), ar(n);
  NCCL_OK(ncclAllReduce(as.data(), ar.data(), n, ncclFloat32, ncclAvg, comm, nullptr));
  for (float v : ar) CHECK(v == static_cast<float>(nranks - 1));

  std::vector<uint16_t> bs(n, Bf16(static_cast<float>(rank + 1))), br(n);
  NCCL_OK(ncclAllReduce(bs.data(), br.data(), n, ncclBfloat16, ncclSum, comm, nullptr));
  for (uint16_t v : br) CHECK(v == Bf16(static_cast<float>(nranks * (nranks + 1) / 2)));
}

void RootedAndGathers(ncclComm_t comm) {
  const size_t n = 513;
  int root = nranks - 1;
  std::vector<int64_t> b(n, -1);
  if (rank == root)
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<int64_t>(i) * 1000 + 7;
  NCCL_OK(ncclBroadcast(b.data(), b.data(), n, ncclInt64, root, comm, nullptr));
  for (size_t i = 0; i < n; ++i) CHECK(b[i] == static_cast<int64_t>(i) * 1000 + 7);

  std::vector<uint8_t> c(n, rank == 0 ? 42 : 0);
  NCCL_OK(ncclBcast(c.data(), n, ncclUint8, 0, comm, nullptr));
  for (uint8_t v : c) CHECK(v == 42);

  std::vector<float> rs(n, static_cast<float>(rank + 1)), rr(n, -7.0f);
  NCCL_OK(ncclReduce(rs.data(), rr.data(), n, ncclFloat32, ncclSum, 0, comm, nullptr));
  for (float v : rr)
    CHECK(v == (rank == 0 ? static_cast<float>(nranks * (nranks + 1) / 2) : -7.0f));

  std::vector<int32_t> gs(n), gr(n * nranks);
  for (size_t i = 0; i < n; ++i) gs[i] = rank * 100000 + static_cast<int32_t>(i);
  NCCL_OK(ncclAllGather(gs.data(), gr.data(), n, ncclInt32, comm, nullptr));
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i) CHECK(gr[r * n + i] == r * 100000 + static_cast<int32_t>(i));

  std::vector<double> ss(n * nranks), sr(n);
  for (size_t i = 0; i < ss.size(); ++i) ss[i] = static_cast<double>(i) + rank;
  NCCL_OK(ncclReduceScatter(ss.data(), sr.data(), n, ncclFloat64, ncclSum, comm, nullptr));
  for (size_t i = 0; i < n; ++i)
    CHECK(sr[i] == nranks * static_cast<double>(rank * n + i) + nranks * (nranks - 1) / 2.0);
}

void AllToAll(ncclComm_t comm) {
  const size_t n = 100;
  std::vector<int32_t> s(n * nranks), r(n * nranks, -1);
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < n; ++i) s[p * n + i] = rank * 10000 + p * 1000 + static_cast<int32_t>(i);
  NCCL_OK(ncclAlltoAll(s.data(), r.data(), n, ncclInt32, comm, nullptr));
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < n; ++i)
      CHECK(r[p * n + i] == p * 10000 + rank * 1000 + static_cast<int32_t>(i));
}

// Each rank sends to the next and receives from the previous in one group:
// without the group the blocking sends would wait on each other forever.
void Ring(ncclComm_t comm) {
  const size_t n = 4096;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  std::vector<int32_t> out(n), in(n, -1);
  for (size_t i = 0; i < n; ++i) out[i] = rank * 1000000 + static_cast<int32_t>(i);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(out.data(), n, ncclInt32, next, comm, nullptr));
  NCCL_OK(ncclRecv(in.data(), n, ncclInt32, prev, comm, nullptr));
  NCCL_OK(ncclGroupEnd());
  for (size_t i = 0; i < n; ++i) CHECK(in[i] == prev * 1000000 + static_cast<int32_t>(i));
}

bool Contains(const char* s, const char* needle) {
  return s && std::strstr(s, needle);
}

void Errors(ncclComm_t comm) {
  float x[4] = {1, 2, 3, 4}, y[4];
  CHECK(ncclAllReduce(x, y, 4, ncclNumTypes, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(Contains(ncclGetLastError(comm), "datatype"));
  CHECK(ncclAllReduce(x, y, 4, ncclFloat8e4m3, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(Contains(ncclGetLastError(comm), "fp8"));
  CHECK(ncclAllGather(x, y, 1, ncclFloat8e5m2, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclNumOps, comm, nullptr) == ncclInvalidArgument);
  CHECK(Contains(ncclGetLastError(comm), "PreMulSum"));
  ncclRedOp_t op;
  float scale = 2;
  CHECK(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat8e4m3, ncclScalarHostImmediate, comm) ==
        ncclInvalidArgument);
  CHECK(Contains(ncclGetLastError(comm), "fp8"));
  CHECK(ncclRedOpDestroy(ncclNumOps, comm) == ncclInvalidArgument);
  CHECK(ncclBroadcast(x, y, 4, ncclFloat32, nranks, comm, nullptr) == ncclInvalidArgument);
  CHECK(Contains(ncclGetLastError(comm), "root"));
  CHECK(ncclSend(x, 4, ncclFloat32, -1, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);

  // The ranks disagree on the count: every rank is told, and the
  // communicator stays usable.
  std::vector<float> s(64, 1.0f), r(64);
  ncclResult_t res =
      ncclAllReduce(s.data(), r.data(), rank == 0 ? 8 : 16, ncclFloat32, ncclSum, comm, nullptr);
  CHECK(res == ncclInvalidUsage);
  CHECK(Contains(ncclGetLastError(comm), "ncclAllReduce"));
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess);
  NCCL_OK(ncclAllReduce(s.data(), r.data(), 64, ncclFloat32, ncclSum, comm, nullptr));
  for (float v : r) CHECK(v == static_cast<float>(nranks));
}

// Rank 1 aborts; rank 0's next collective fails with ncclRemoteError, which
// then sticks to its communicator.
void Abort(ncclComm_t* comm) {
  if (rank == 1) {
    NCCL_OK(ncclCommAbort(*comm));
    *comm = nullptr;
    return;
  }
  float x = 1, y = 0;
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, *comm, nullptr) == ncclRemoteError);
  CHECK(Contains(ncclGetLastError(*comm), "ncclAllReduce"));
  ncclResult_t async = ncclSuccess;
  NCCL_OK(ncclCommGetAsyncError(*comm, &async));
  CHECK(async == ncclRemoteError);
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, *comm, nullptr) == ncclRemoteError);
  CHECK(Contains(ncclGetLastError(*comm), "already failed"));
  NCCL_OK(ncclCommAbort(*comm));
  *comm = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s collectives|errors|abort <rank> <nranks> <id-file>\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  rank = std::atoi(argv[2]);
  nranks = std::atoi(argv[3]);
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  CHECK(version >= 22800);

  ncclUniqueId id;
  CHECK(ShareId(argv[4], &id));
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
  int count = 0, me = -1;
  NCCL_OK(ncclCommCount(comm, &count));
  NCCL_OK(ncclCommUserRank(comm, &me));
  CHECK(count == nranks && me == rank);

  if (mode == "collectives") {
    AllReduces(comm);
    RootedAndGathers(comm);
    AllToAll(comm);
    Ring(comm);
  } else if (mode == "errors") {
    Errors(comm);
  } else if (mode == "abort") {
    Abort(&comm);
    return 0;
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess);
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  return 0;
}
