// Ranks as separate processes on virtio-user, exactly as container tenants:
// every collective over several dtypes, redops and sizes through the real
// harmonaized, checked against a reference computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "allreduce_loop.h"
#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

template <typename T>
T Input(int rank, uint64_t j) {
  int v = static_cast<int>((rank * 7 + j * 3) % 11);
  if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>) {
    return static_cast<T>(v - 5);
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
T Apply(T a, T b, uint8_t op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case HZ_SUM:
      case HZ_AVG:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case HZ_PROD:
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case HZ_MAX:
        return a < b ? b : a;
      default:
        return b < a ? b : a;
    }
  } else {
    switch (op) {
      case HZ_SUM:
      case HZ_AVG:
        return a + b;
      case HZ_PROD:
        return a * b;
      case HZ_MAX:
        return a < b ? b : a;
      default:
        return b < a ? b : a;
    }
  }
}

// Left fold in rank order, then the division of AVG.
template <typename T>
T Fold(int n, uint64_t j, uint8_t op) {
  T acc = Input<T>(0, j);
  for (int r = 1; r < n; ++r) acc = Apply(acc, Input<T>(r, j), op);
  if (op == HZ_AVG) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

struct RankEnv {
  HzClient* c = nullptr;
  int rank = 0, n = 0;
  uint64_t comm = 0;
  uint64_t seq = 0;
  std::vector<uint64_t> p2p_send, p2p_recv;  // per peer
  GuestBuffer send, recv;
};

template <typename T>
bool Check(const char* what, const GuestBuffer& b, uint64_t elems,
           const std::function<T(uint64_t)>& expect) {
  std::vector<T> got(elems);
  b.Read(0, got.data(), elems * sizeof(T));
  for (uint64_t j = 0; j < elems; ++j) {
    T e = expect(j);
    if (std::memcmp(&got[j], &e, sizeof(T)) != 0) {
      std::fprintf(stderr, "%s: element %llu: got %g want %g\n", what, (unsigned long long)j,
                   (double)got[j], (double)e);
      return false;
    }
  }
  return true;
}

template <typename T>
int RunAll(RankEnv& env, uint8_t dtype, uint64_t count) {
  const int n = env.n, r = env.rank;
  const uint64_t B = count * sizeof(T);
  auto fill = [&](uint64_t elems) {
    std::vector<T> v(elems);
    for (uint64_t j = 0; j < elems; ++j) v[j] = Input<T>(r, j);
    env.send.Write(0, v.data(), elems * sizeof(T));
    std::vector<uint8_t> junk(env.recv.size, 0xa5);
    env.recv.Write(0, junk.data(), junk.size());
  };
  auto args = [&](uint64_t send_len, uint64_t recv_len) {
    hz_coll_args a{};
    a.comm = env.comm;
    a.count = count;
    a.dtype = dtype;
    if (send_len) a.send = SliceOf(env.send, 0, send_len);
    if (recv_len) a.recv = SliceOf(env.recv, 0, recv_len);
    return a;
  };
  auto run = [&](uint16_t opcode, hz_coll_args a, bool collective = true) {
    if (collective) a.seq = env.seq++;
    uint16_t q = static_cast<uint16_t>(HZ_VQ_REQUEST_BASE + (a.seq % 2));
    uint32_t st = env.c->Coll(q, opcode, a);
    if (st != HZ_S_OK) std::fprintf(stderr, "rank %d opcode %#x: status %u\n", r, opcode, st);
    return st == HZ_S_OK;
  };
  char what[96];
  for (uint8_t op : {HZ_SUM, HZ_PROD, HZ_MAX, HZ_MIN, HZ_AVG}) {
    fill(count);
    hz_coll_args a = args(B, B);
    a.redop = op;
    if (!run(HZ_OP_ALLREDUCE, a)) return 10;
    std::snprintf(what, sizeof(what), "allreduce dtype %u op %u count %llu", dtype, op,
                  (unsigned long long)count);
    if (!Check<T>(what, env.recv, count, [&](uint64_t j) { return Fold<T>(n, j, op); })) return 11;
  }
  {  // reduce to root 1 % n
    int root = 1 % n;
    fill(count);
    hz_coll_args a = args(B, r == root ? B : 0);
    a.redop = HZ_SUM;
    a.peer = root;
    if (!run(HZ_OP_REDUCE, a)) return 20;
    if (r == root &&
        !Check<T>("reduce", env.recv, count, [&](uint64_t j) { return Fold<T>(n, j, HZ_SUM); }))
      return 21;
  }
  {  // broadcast from the last rank
    int root = n - 1;
    fill(count);
    hz_coll_args a = args(r == root ? B : 0, B);
    a.peer = root;
    if (!run(HZ_OP_BROADCAST, a)) return 30;
    if (!Check<T>("broadcast", env.recv, count, [&](uint64_t j) { return Input<T>(root, j); }))
      return 31;
  }
  {
    fill(count);
    if (!run(HZ_OP_ALLGATHER, args(B, n * B))) return 40;
    if (!Check<T>("allgather", env.recv, n * count,
                  [&](uint64_t k) { return Input<T>(static_cast<int>(k / count), k % count); }))
      return 41;
  }
  for (uint8_t op : {HZ_SUM, HZ_MAX}) {
    fill(n * count);
    hz_coll_args a = args(n * B, B);
    a.redop = op;
    if (!run(HZ_OP_REDUCE_SCATTER, a)) return 50;
    if (!Check<T>("reduce_scatter", env.recv, count,
                  [&](uint64_t j) { return Fold<T>(n, r * count + j, op); }))
      return 51;
  }
  {
    fill(n * count);
    if (!run(HZ_OP_ALLTOALL, args(n * B, n * B))) return 60;
    if (!Check<T>("alltoall", env.recv, n * count, [&](uint64_t k) {
          return Input<T>(static_cast<int>(k / count), r * count + k % count);
        }))
      return 61;
  }
  {  // ring shift with send/recv posted together
    int to = (r + 1) % n, from = (r + n - 1) % n;
    fill(count);
    hz_coll_args s = args(B, 0);
    s.peer = to;
    s.seq = env.p2p_send[to]++;
    hz_coll_args rv = args(0, B);
    rv.peer = from;
    rv.seq = env.p2p_recv[from]++;
    uint64_t c1 = env.c->Post(2, HZ_OP_SEND, &s, sizeof(s));
    uint64_t c2 = env.c->Post(3, HZ_OP_RECV, &rv, sizeof(rv));
    if (env.c->Wait(2, c1).status != HZ_S_OK || env.c->Wait(3, c2).status != HZ_S_OK) return 70;
    if (!Check<T>("sendrecv", env.recv, count, [&](uint64_t j) { return Input<T>(from, j); }))
      return 71;
  }
  {
    hz_coll_args a{};
    a.comm = env.comm;
    a.seq = env.seq++;
    if (env.c->Coll(2, HZ_OP_BARRIER, a) != HZ_S_OK) return 80;
  }
  return 0;
}

int RankMain(const std::vector<std::string>& vms, std::vector<Pipe>& pipes, int rank, int n) {
  HzClient c;
  hz_comm_uid uid{};
  if (int rc = ConnectAndShareUid(c, vms, pipes, rank, n, &uid); rc != 0) return rc;
  RankEnv env;
  env.c = &c;
  env.rank = rank;
  env.n = n;
  env.p2p_send.assign(n, 0);
  env.p2p_recv.assign(n, 0);
  if (c.InitComm(uid, n, rank, &env.comm) != HZ_S_OK) return 6;
  const uint64_t max_count = 20000;
  // Three pieces each, so slices cross extent boundaries.
  if (c.Register(max_count * 8 * n, 3, HZ_REGION_F_READ, &env.send) != HZ_S_OK) return 7;
  if (c.Register(max_count * 8 * n, 3, HZ_REGION_F_WRITE, &env.recv) != HZ_S_OK) return 8;
  for (uint64_t count : {uint64_t{1}, uint64_t{1031}, max_count}) {
    if (int rc = RunAll<float>(env, HZ_FP32, count)) return 100 + rc;
    if (int rc = RunAll<double>(env, HZ_FP64, count)) return 100 + rc;
    if (int rc = RunAll<int32_t>(env, HZ_INT32, count)) return 100 + rc;
    if (int rc = RunAll<uint8_t>(env, HZ_UINT8, count)) return 100 + rc;
  }
  hz_comm_args d{};
  d.comm = env.comm;
  if (c.Call(HZ_VQ_CONTROL, HZ_OP_COMM_DESTROY, d).status != HZ_S_OK) return 9;
  return 0;
}

// Ranks, and whether the engine writes every output with non-temporal
// stores ([collectives] stream_min_bytes = 1) rather than at its default
// threshold, which none of these operations reaches.
class ServiceCollectivesTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ServiceCollectivesTest, EveryCollectiveMatchesTheReference) {
  const auto [n, streamed] = GetParam();
  ServiceProcess svc;
  std::vector<std::string> args;
  if (streamed) args = {"--config", svc.WriteConfig("[collectives]\nstream_min_bytes = 1\n")};
  ASSERT_TRUE(svc.Start(args));
  std::vector<std::string> vms = svc.TenantWithVms("t1", n);
  ASSERT_EQ(static_cast<int>(vms.size()), n);
  std::vector<Pipe> pipes(n);
  std::vector<int> codes = RunRanks(n, [&](int rank) { return RankMain(vms, pipes, rank, n); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  // The operator sees the traffic.
  auto counters = svc.Control({{"cmd", "counters"}});
  ASSERT_TRUE(counters.value("ok", false));
  bool saw_allreduce = false;
  for (const auto& e : counters["result"]["requests"]) {
    if (e["opcode"] == "ALLREDUCE" && e["status"] == "OK") {
      saw_allreduce = true;
      EXPECT_EQ(e["count"].get<uint64_t>(), static_cast<uint64_t>(n) * 3 * 4 * 5);
    }
  }
  EXPECT_TRUE(saw_allreduce);
  // The operator's threshold reached the engine: collectives streamed, or
  // none did.
  EXPECT_EQ(counters["result"]["engine"].value("streamed", uint64_t{0}) > 0, streamed);
  EXPECT_EQ(svc.Terminate(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ServiceCollectivesTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool()));

}  // namespace
}  // namespace hz::testing
