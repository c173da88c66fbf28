// Checkpoints end to end: a tenant process saves, lists and restores through
// libharmonaize; the service keeps the bytes on its disk and verifies them.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace {

using hz::testing::kWaitMs;
using hz::testing::Pipe;
using hz::testing::RunRanks;
using hz::testing::ServiceProcess;
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kBytes = 1u << 20;

struct CkptPayload {  // SPEC §8.3.6
  uint32_t stream;
  uint32_t tier;
  uint64_t step;
  uint32_t status;
  uint32_t flags;
};

class ServiceEngineCheckpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(svc_.Start());
    socks_ = svc_.TenantWithVms("ck", 1);
    ASSERT_EQ(socks_.size(), 1u);
    Open();
  }
  void TearDown() override {
    if (dev_ != nullptr) hz_close(dev_);
  }
  void Open() {
    ASSERT_EQ(hz_open(("vhost-user:" + socks_[0]).c_str(), &dev_), HZ_OK);
    hz_device_info info;
    ASSERT_EQ(hz_device_get_info(dev_, &info), HZ_OK);
    ASSERT_TRUE(info.features & (1ull << HZ_F_CHECKPOINT));
  }
  void SetPolicy(uint32_t stream, uint32_t flags = 0) {
    hz_ckpt_policy p{flags, 2, HZ_TIER_LOCAL_DISK, 1000, 0};
    ASSERT_EQ(hz_ckpt_set_policy(dev_, stream, &p), HZ_OK);
  }
  // Waits until every checkpoint of the stream is durable; returns the list.
  std::vector<hz_ckpt_info> WaitDurable(uint32_t stream) {
    std::vector<hz_ckpt_info> e(16);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (std::chrono::steady_clock::now() < until) {
      size_t n = 0;
      if (hz_ckpt_list(dev_, stream, e.data(), e.size(), &n) != HZ_OK) break;
      bool all = n > 0;
      for (size_t i = 0; i < n; ++i) all = all && e[i].state == HZ_CKPT_DURABLE;
      if (all) return {e.begin(), e.begin() + static_cast<long>(n)};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "stream " << stream << " never became durable";
    return {};
  }
  // Fills with a pattern that depends on seed.
  static void Fill(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 7);
  }
  std::string DataFile(uint32_t stream, uint64_t step) {
    char name[32];
    std::snprintf(name, sizeof(name), "%020llu", static_cast<unsigned long long>(step));
    for (const auto& t : fs::directory_iterator(svc_.dir() + "/checkpoints")) {
      fs::path p = t.path() / std::to_string(stream) / name / "data";
      if (fs::exists(p)) return p.string();
    }
    return {};
  }

  ServiceProcess svc_;
  std::vector<std::string> socks_;
  hz_device_t* dev_ = nullptr;
};

TEST_F(ServiceEngineCheckpoints, SaveListRestoreAcrossARestartAndDetectCorruption) {
  SetPolicy(1);
  void* p = nullptr;
  ASSERT_EQ(hz_mem_alloc(dev_, kBytes, &p), HZ_OK);
  auto* buf = static_cast<uint8_t*>(p);
  Fill(buf, kBytes, 7);
  std::vector<uint8_t> want(buf, buf + kBytes);
  hz_buf slice{buf, kBytes};
  const char meta[] = "layout:v1";
  hz_ckpt_info ci{};
  ASSERT_EQ(hz_ckpt_save(dev_, 1, 10, &slice, 1, meta, sizeof(meta), &ci), HZ_OK);
  EXPECT_EQ(ci.step, 10u);
  // Steps only increase, and a step is saved once.
  EXPECT_EQ(hz_ckpt_save(dev_, 1, 10, &slice, 1, nullptr, 0, &ci), HZ_EEXIST);
  EXPECT_EQ(hz_ckpt_save(dev_, 1, 5, &slice, 1, nullptr, 0, &ci), HZ_EINVAL);

  std::vector<hz_ckpt_info> list = WaitDurable(1);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].step, 10u);
  EXPECT_EQ(list[0].bytes, kBytes);
  EXPECT_EQ(list[0].tier, HZ_TIER_LOCAL_DISK);

  // The operator's view.
  json r = svc_.Control({{"cmd", "checkpoint.list"}, {"tenant", "ck"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  ASSERT_EQ(r["result"]["streams"].size(), 1u);
  EXPECT_EQ(r["result"]["streams"][0]["checkpoints"][0]["step"], 10);
  EXPECT_EQ(r["result"]["streams"][0]["checkpoints"][0]["state"], "durable");
  r = svc_.Control({{"cmd", "counters"}});
  EXPECT_GE(r["result"]["checkpoints"]["saves"].get<uint64_t>(), 1u);
  EXPECT_GE(r["result"]["checkpoints"]["bytes_persisted"].get<uint64_t>(), kBytes);

  // Restore in the same session.
  std::memset(buf, 0, kBytes);
  char got_meta[64] = {};
  size_t meta_len = sizeof(got_meta);
  ASSERT_EQ(hz_ckpt_restore(dev_, 1, HZ_STEP_LATEST, &slice, 1, got_meta, &meta_len, &ci), HZ_OK);
  EXPECT_EQ(ci.step, 10u);
  EXPECT_EQ(meta_len, sizeof(meta));
  EXPECT_STREQ(got_meta, meta);
  EXPECT_EQ(std::memcmp(buf, want.data(), kBytes), 0);

  // A restart of the service: the checkpoint comes back from disk.
  hz_close(dev_);
  dev_ = nullptr;
  ASSERT_EQ(svc_.Terminate(), 0);
  ASSERT_TRUE(svc_.Start());
  // The daemon answers its control socket before it has restored the VM
  // bindings: wait (bounded) until the socket is served again.
  for (int i = 0; i < 500 && dev_ == nullptr; ++i) {
    if (hz_open(("vhost-user:" + socks_[0]).c_str(), &dev_) != HZ_OK) {
      dev_ = nullptr;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ASSERT_NE(dev_, nullptr);
  ASSERT_EQ(hz_mem_alloc(dev_, kBytes, &p), HZ_OK);
  buf = static_cast<uint8_t*>(p);
  slice = {buf, kBytes};
  std::memset(buf, 0, kBytes);
  meta_len = sizeof(got_meta);
  ASSERT_EQ(hz_ckpt_restore(dev_, 1, 10, &slice, 1, got_meta, &meta_len, &ci), HZ_OK);
  EXPECT_EQ(std::memcmp(buf, want.data(), kBytes), 0);

  // One flipped byte in the chunk file: ECORRUPT and no guest byte written.
  std::string data = DataFile(1, 10);
  ASSERT_FALSE(data.empty());
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(4096);
    f.write(&c, 1);
    ASSERT_TRUE(f.good());
  }
  std::memset(buf, 0xEE, kBytes);
  meta_len = sizeof(got_meta);
  EXPECT_EQ(hz_ckpt_restore(dev_, 1, 10, &slice, 1, got_meta, &meta_len, &ci), HZ_ECORRUPT);
  size_t untouched = 0;
  for (size_t i = 0; i < kBytes; ++i) untouched += buf[i] == 0xEE;
  EXPECT_EQ(untouched, kBytes);
}

TEST_F(ServiceEngineCheckpoints, UnknownStreamsAndBadRequests) {
  void* p = nullptr;
  ASSERT_EQ(hz_mem_alloc(dev_, 4096, &p), HZ_OK);
  hz_buf slice{p, 4096};
  hz_ckpt_info ci{};
  size_t n = 0;
  hz_ckpt_info e[4];
  EXPECT_EQ(hz_ckpt_list(dev_, 77, e, 4, &n), HZ_ENOENT);
  size_t meta_len = 0;
  EXPECT_EQ(hz_ckpt_restore(dev_, 77, HZ_STEP_LATEST, &slice, 1, nullptr, &meta_len, &ci),
            HZ_ENOENT);
  EXPECT_EQ(hz_ckpt_save(dev_, 77, 1, &slice, 1, nullptr, 0, &ci), HZ_ENOENT);
  hz_ckpt_policy peer{0, 1, HZ_TIER_PEER_HOST, 0, 0};
  EXPECT_EQ(hz_ckpt_set_policy(dev_, 3, &peer), HZ_ENOTSUP);
  hz_ckpt_policy flags{0x80, 1, HZ_TIER_LOCAL_DISK, 0, 0};
  EXPECT_EQ(hz_ckpt_set_policy(dev_, 3, &flags), HZ_ENOTSUP);
  SetPolicy(3);
  // A restore with the wrong slice size is refused before anything is written.
  ASSERT_EQ(hz_ckpt_save(dev_, 3, 1, &slice, 1, nullptr, 0, &ci), HZ_OK);
  hz_buf small{p, 1024};
  EXPECT_EQ(hz_ckpt_restore(dev_, 3, 1, &small, 1, nullptr, &meta_len, &ci), HZ_EINVAL);
  EXPECT_EQ(hz_ckpt_delete(dev_, 3, 1), HZ_OK);
  EXPECT_EQ(hz_ckpt_delete(dev_, 3, 1), HZ_ENOENT);
}

TEST_F(ServiceEngineCheckpoints, MaintenanceNoticeTakesAJustInTimeCheckpoint) {
  SetPolicy(2, HZ_CKPT_F_AUTO_SAVE_ON_NOTICE);
  void* w = nullptr;
  void* s = nullptr;
  ASSERT_EQ(hz_mem_alloc(dev_, 4096, &w), HZ_OK);
  ASSERT_EQ(hz_mem_alloc(dev_, 64 * 1024, &s), HZ_OK);
  auto* word = static_cast<hz_quiesce_word*>(w);
  auto* state = static_cast<uint8_t*>(s);
  Fill(state, 64 * 1024, 42);
  std::vector<uint8_t> want(state, state + 64 * 1024);
  word->step = 42;
  __atomic_store_n(&word->seq, 2, __ATOMIC_RELEASE);  // even: consistent
  hz_buf slice{state, 64 * 1024};
  ASSERT_EQ(hz_ckpt_quiesce(dev_, 2, word, &slice, 1), HZ_OK);
  ASSERT_EQ(hz_event_subscribe(dev_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);

  json r =
      svc_.Control({{"cmd", "event.inject"},
                    {"tenant", "ck"},
                    {"event", {{"topic", "maintenance"}, {"kind", "scheduled"}, {"in_s", 120}}}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();

  bool maintenance = false, jit = false;
  hz_event ev{};
  while (!(maintenance && jit)) {
    ASSERT_EQ(hz_event_next(dev_, &ev, kWaitMs), HZ_OK) << "maintenance=" << maintenance;
    if (ev.topic == HZ_TOPIC_MAINTENANCE) maintenance = true;
    if (ev.topic == HZ_TOPIC_CHECKPOINT && ev.kind == 2 /* JIT_SAVED */) {
      CkptPayload c;
      std::memcpy(&c, ev.payload, sizeof(c));
      EXPECT_EQ(c.stream, 2u);
      EXPECT_EQ(c.step, 42u);
      jit = true;
    }
  }
  size_t n = 0;
  hz_ckpt_info e[4];
  ASSERT_EQ(hz_ckpt_list(dev_, 2, e, 4, &n), HZ_OK);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(e[0].step, 42u);
  EXPECT_EQ(e[0].bytes, 64u * 1024);
  std::memset(state, 0, 64 * 1024);
  size_t meta_len = 0;
  hz_ckpt_info ci{};
  ASSERT_EQ(hz_ckpt_restore(dev_, 2, 42, &slice, 1, nullptr, &meta_len, &ci), HZ_OK);
  EXPECT_EQ(std::memcmp(state, want.data(), want.size()), 0);
}

// Each notice saves on a thread of its own; a thread whose saves are over is
// joined when the next notice comes, so a stream of notices (the operator
// injects them routinely) does not pile up threads until the daemon stops.
TEST_F(ServiceEngineCheckpoints, NoticeThreadsAreJoinedWhenTheirSavesAreOver) {
  SetPolicy(2, HZ_CKPT_F_AUTO_SAVE_ON_NOTICE);
  auto counters = [&] { return svc_.Control({{"cmd", "counters"}})["result"]["checkpoints"]; };
  constexpr uint64_t kNotices = 4;
  for (uint64_t i = 1; i <= kNotices; ++i) {
    json r =
        svc_.Control({{"cmd", "event.inject"},
                      {"tenant", "ck"},
                      {"event", {{"topic", "maintenance"}, {"kind", "scheduled"}, {"in_s", 120}}}});
    ASSERT_TRUE(r.value("ok", false)) << r.dump();
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (counters().value("jit_notices_done", uint64_t{0}) < i) {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "notice " << i << " never finished";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_LE(counters().value("notice_threads", uint64_t{99}), 1u);
}

// One connection thread serves both VMs. VM A's save waits for staging
// memory that only VM B can free (by deleting the host-memory checkpoint that
// holds it), so B's requests must be served while A's save is in progress:
// with saves on the connection thread, B would wait behind A until A's stall
// budget ran out, and A's save would fail with EAGAIN.
TEST(ServiceEngineCheckpointsAsync, AnotherVmIsServedWhileASaveWaits) {
  ServiceProcess svc;
  const std::string conf = svc.WriteConfig(
      "[checkpoint]\nstaging_bytes = " + std::to_string(8u << 20) + "\n");  // two 4 MiB chunks
  ASSERT_TRUE(svc.Start({"--config", conf, "--worker-threads", "1"}));
  std::vector<std::string> socks = svc.TenantWithVms("ck", 2);
  ASSERT_EQ(socks.size(), 2u);
  constexpr size_t kHeld = 1u << 20;  // one chunk, kept in the host-memory tier
  constexpr size_t kBig = 5u << 20;   // two chunks: waits for the held one
  Pipe held;                          // A -> B: the host-memory checkpoint is saved
  Pipe done;                          // A -> B: A's big save completed
  std::vector<int> codes = RunRanks(2, [&](int rank) -> int {
    hz_device_t* dev = nullptr;
    if (hz_open(("vhost-user:" + socks[rank]).c_str(), &dev) != HZ_OK) return 2;
    if (rank == 0) {
      hz_ckpt_policy mem{0, 1, HZ_TIER_HOST_MEMORY, 1000, 0};
      hz_ckpt_policy disk{0, 1, HZ_TIER_LOCAL_DISK, 20000, 0};
      if (hz_ckpt_set_policy(dev, 1, &mem) != HZ_OK) return 3;
      if (hz_ckpt_set_policy(dev, 2, &disk) != HZ_OK) return 4;
      void* p = nullptr;
      if (hz_mem_alloc(dev, kHeld + kBig, &p) != HZ_OK) return 5;
      auto* buf = static_cast<uint8_t*>(p);
      for (size_t i = 0; i < kHeld + kBig; ++i) buf[i] = static_cast<uint8_t>(i * 7);
      hz_buf small{buf, kHeld};
      hz_ckpt_info ci{};
      if (hz_ckpt_save(dev, 1, 1, &small, 1, nullptr, 0, &ci) != HZ_OK) return 6;
      if (ci.state != HZ_CKPT_DURABLE) return 7;  // held in the host-memory tier
      char one = 1;
      held.Send(&one, 1);
      hz_buf big{buf + kHeld, kBig};
      int rc = hz_ckpt_save(dev, 2, 1, &big, 1, nullptr, 0, &ci);
      done.Send(&one, 1);
      hz_close(dev);
      return rc == HZ_OK ? 0 : 10;
    }
    char c = 0;
    if (!held.Receive(&c, 1)) return 20;
    // Wait (hang guard only) until the daemon holds A's save in flight.
    bool waiting = false;
    for (int i = 0; i < 1000 && !waiting; ++i) {
      json r = svc.Control({{"cmd", "vm.list"}});
      for (const auto& vm : r["result"]) {
        if (vm["socket"] != socks[0]) continue;
        for (const auto& d : vm["devices"]) waiting |= d.value("in_flight", 0) == 1;
      }
      if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!waiting) return 21;
    // Served on the same connection thread while A's save waits: a control
    // request, and a restore on a request queue.
    hz_ckpt_info e[4];
    size_t n = 0;
    if (hz_ckpt_list(dev, 1, e, 4, &n) != HZ_OK || n != 1) return 22;
    void* p = nullptr;
    if (hz_mem_alloc(dev, kHeld, &p) != HZ_OK) return 23;
    hz_buf slice{p, kHeld};
    size_t meta_len = 0;
    hz_ckpt_info ci{};
    if (hz_ckpt_restore(dev, 1, 1, &slice, 1, nullptr, &meta_len, &ci) != HZ_OK) return 24;
    for (size_t i = 0; i < kHeld; ++i) {
      if (static_cast<uint8_t*>(p)[i] != static_cast<uint8_t>(i * 7)) return 25;
    }
    // A's save cannot have completed: nothing has freed its staging yet.
    if (done.Receive(&c, 1, 0)) return 26;
    // Freeing the held chunk lets A's save through.
    if (hz_ckpt_delete(dev, 1, 1) != HZ_OK) return 27;
    if (!done.Receive(&c, 1, 60000)) return 28;
    hz_close(dev);
    return 0;
  });
  ASSERT_EQ(codes.size(), 2u);
  EXPECT_EQ(codes[0], 0) << "VM A (the waiting save)";
  EXPECT_EQ(codes[1], 0) << "VM B (served meanwhile)";
}

}  // namespace
