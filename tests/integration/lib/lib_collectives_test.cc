// Rank processes that know only hz.h run every collective through a real
// harmonaized, with registered, inline-sized and staged (large unregistered)
// buffers, blocking and asynchronous.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace {

using hz::testing::Pipe;
using hz::testing::RunRanks;
using hz::testing::ServiceProcess;

constexpr int kRanks = 3;

// Each failed check exits the rank process with a distinct code.
#define RANK_CHECK(cond, code)  \
  do {                          \
    if (!(cond)) return (code); \
  } while (0)

int OpenComm(const std::string& sock, int rank, Pipe& pipe, const hz_comm_config& cfg,
             hz_device_t** dev, hz_comm_t** comm) {
  if (hz_open(("vhost-user:" + sock).c_str(), dev) != HZ_OK) return 10;
  hz_uid_t uid;
  if (rank == 0) {
    if (hz_comm_get_uid(*dev, &uid) != HZ_OK) return 11;
    for (int i = 1; i < kRanks; ++i) pipe.Send(&uid, sizeof(uid));
  } else if (!pipe.Receive(&uid, sizeof(uid))) {
    return 12;
  }
  return hz_comm_init(*dev, &uid, kRanks, rank, &cfg, comm) == HZ_OK ? 0 : 13;
}

float Val(int rank, size_t i) {
  return static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 97);
}

// All-reduce sum of `count` floats with send/recv placed by `alloc`.
int AllReduceCase(hz_device_t* dev, hz_comm_t* comm, int rank, size_t count, bool registered,
                  bool in_place) {
  std::vector<float> heap_s, heap_r;
  float* s = nullptr;
  float* r = nullptr;
  if (registered) {
    void* p = nullptr;
    if (hz_mem_alloc(dev, count * 2 * sizeof(float), &p) != HZ_OK) return 20;
    s = static_cast<float*>(p);
    r = s + count;
  } else {
    heap_s.resize(count);
    heap_r.resize(count);
    s = heap_s.data();
    r = heap_r.data();
  }
  for (size_t i = 0; i < count; ++i) s[i] = Val(rank, i);
  float* out = in_place ? s : r;
  int rc = hz_allreduce(comm, s, out, count, HZ_FP32, HZ_SUM);
  int result = 0;
  if (rc != HZ_OK) {
    result = 21;
  } else {
    for (size_t i = 0; i < count && result == 0; ++i) {
      float want = 0;
      for (int k = 0; k < kRanks; ++k) want += Val(k, i);  // rank order, as the device sums
      if (out[i] != want) result = 22;
    }
  }
  if (registered) hz_mem_free(dev, s);
  return result;
}

int CollectivesRank(const std::string& sock, int rank, Pipe& pipe, const hz_comm_config& cfg) {
  hz_device_t* dev = nullptr;
  hz_comm_t* comm = nullptr;
  if (int rc = OpenComm(sock, rank, pipe, cfg, &dev, &comm); rc != 0) return rc;
  RANK_CHECK(hz_comm_rank(comm) == rank && hz_comm_size(comm) == kRanks, 14);

  // Registered, inline-sized and staged buffers, out of place and in place.
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
    for (bool reg : {true, false}) {
      for (bool in_place : {false, true}) {
        if (int rc = AllReduceCase(dev, comm, rank, count, reg, in_place); rc != 0) return rc;
      }
    }
  }

  // Broadcast from rank 1, reduce (max) to rank 2.
  std::vector<int32_t> b(513);
  for (size_t i = 0; i < b.size(); ++i) b[i] = rank == 1 ? int32_t(i * 7) : -1;
  RANK_CHECK(hz_broadcast(comm, b.data(), b.data(), b.size(), HZ_INT32, 1) == HZ_OK, 30);
  for (size_t i = 0; i < b.size(); ++i) RANK_CHECK(b[i] == int32_t(i * 7), 31);
  std::vector<int64_t> m(77, rank * 10), mo(77, 0);
  RANK_CHECK(hz_reduce(comm, m.data(), mo.data(), m.size(), HZ_INT64, HZ_MAX, 2) == HZ_OK, 32);
  if (rank == 2) {
    for (int64_t v : mo) RANK_CHECK(v == (kRanks - 1) * 10, 33);
  }

  // All-gather and reduce-scatter of doubles.
  const size_t n = 41;
  std::vector<double> gs(n), gr(n * kRanks);
  for (size_t i = 0; i < n; ++i) gs[i] = rank * 1000.0 + double(i);
  RANK_CHECK(hz_allgather(comm, gs.data(), gr.data(), n, HZ_FP64) == HZ_OK, 34);
  for (int k = 0; k < kRanks; ++k)
    for (size_t i = 0; i < n; ++i) RANK_CHECK(gr[k * n + i] == k * 1000.0 + double(i), 35);
  std::vector<double> rs(n * kRanks, 1.0 + rank), rr(n);
  RANK_CHECK(hz_reduce_scatter(comm, rs.data(), rr.data(), n, HZ_FP64, HZ_SUM) == HZ_OK, 36);
  for (double v : rr) RANK_CHECK(v == 6.0, 37);  // 1 + 2 + 3

  // All-to-all of uint8.
  std::vector<uint8_t> as(5 * kRanks), ar(5 * kRanks);
  for (int k = 0; k < kRanks; ++k)
    for (int i = 0; i < 5; ++i) as[k * 5 + i] = uint8_t(rank * 16 + k);
  RANK_CHECK(hz_alltoall(comm, as.data(), ar.data(), 5, HZ_UINT8) == HZ_OK, 38);
  for (int k = 0; k < kRanks; ++k)
    for (int i = 0; i < 5; ++i) RANK_CHECK(ar[k * 5 + i] == uint8_t(k * 16 + rank), 39);

  // A ring of send/recv, posted asynchronously so they progress together.
  const uint32_t next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
  std::vector<uint32_t> tx(64, rank + 100), rx(64, 0);
  hz_request_t *sreq = nullptr, *rreq = nullptr;
  RANK_CHECK(hz_send_async(comm, tx.data(), tx.size(), HZ_UINT32, next, &sreq) == HZ_OK, 40);
  RANK_CHECK(hz_recv_async(comm, rx.data(), rx.size(), HZ_UINT32, prev, &rreq) == HZ_OK, 41);
  RANK_CHECK(hz_wait(sreq, 20000) == HZ_OK && hz_wait(rreq, 20000) == HZ_OK, 42);
  for (uint32_t v : rx) RANK_CHECK(v == prev + 100, 43);

  // Two asynchronous all-reduces in flight, then a barrier.
  std::vector<float> x(100, 1.0f), y(100, 2.0f);
  hz_request_t *r1 = nullptr, *r2 = nullptr;
  RANK_CHECK(hz_allreduce_async(comm, x.data(), x.data(), x.size(), HZ_FP32, HZ_SUM, &r1) == HZ_OK,
             44);
  RANK_CHECK(hz_allreduce_async(comm, y.data(), y.data(), y.size(), HZ_FP32, HZ_AVG, &r2) == HZ_OK,
             45);
  RANK_CHECK(hz_wait(r1, 20000) == HZ_OK && hz_wait(r2, 20000) == HZ_OK, 46);
  RANK_CHECK(x[0] == 3.0f && y[99] == 2.0f, 47);
  RANK_CHECK(hz_barrier(comm) == HZ_OK, 48);

  RANK_CHECK(hz_comm_destroy(comm) == HZ_OK, 49);
  hz_close(dev);
  return 0;
}

// Every rank runs CollectivesRank on a communicator made with cfg, in a
// process whose HZ_LATENCY_POLL_US is latency_poll_us[rank] (null: unset).
void RunCollectives(const hz_comm_config& cfg, const char* const* latency_poll_us = nullptr) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> socks = svc.TenantWithVms("libtenant", kRanks);
  ASSERT_EQ(socks.size(), size_t(kRanks));
  Pipe pipe;
  std::vector<int> codes = RunRanks(kRanks, [&](int rank) {
    if (latency_poll_us != nullptr) setenv("HZ_LATENCY_POLL_US", latency_poll_us[rank], 1);
    return CollectivesRank(socks[rank], rank, pipe, cfg);
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(LibCollectives, EveryCollectiveThroughTheService) {
  RunCollectives(HZ_COMM_CONFIG_INIT);
}

// The same on a low-latency communicator (SPEC §7.3.2): the service polls
// for the ranks' requests, and the waits of the ranks that ask for it spin
// before they sleep; every result is the same.
TEST(LibCollectives, EveryCollectiveOnALowLatencyCommunicator) {
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.flags |= HZ_COMM_F_LOW_LATENCY;
  const char* const latency_poll_us[kRanks] = {"0", "200", ""};  // "": the default
  RunCollectives(cfg, latency_poll_us);
}

}  // namespace
