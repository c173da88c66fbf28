// A checkpoint quiescence registration (SPEC.md §7.5.7) outlives the process
// that took it, through a live upgrade (§2.9) and through a crash and
// restart with the fd store (§2.10): a maintenance notice published to the
// new process saves the tenant's state from the same guest memory, and the
// save restores bit-exact. The guest does not declare it again.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

constexpr uint32_t kStream = 3;
constexpr size_t kStateBytes = 64 * 1024;

// One VM of tenant t1 through the tenant library, with a registered stream.
class QuiescedVm {
 public:
  ~QuiescedVm() {
    if (dev_ != nullptr) hz_close(dev_);
  }

  void Open(const std::string& sock) {
    ASSERT_EQ(hz_open(("vhost-user:" + sock).c_str(), &dev_), HZ_OK);
    hz_ckpt_policy p{HZ_CKPT_F_AUTO_SAVE_ON_NOTICE, 2, HZ_TIER_HOST_MEMORY, 1000, 0};
    ASSERT_EQ(hz_ckpt_set_policy(dev_, kStream, &p), HZ_OK);
    void* w = nullptr;
    void* s = nullptr;
    ASSERT_EQ(hz_mem_alloc(dev_, 4096, &w), HZ_OK);
    ASSERT_EQ(hz_mem_alloc(dev_, kStateBytes, &s), HZ_OK);
    word_ = static_cast<hz_quiesce_word*>(w);
    state_ = static_cast<uint8_t*>(s);
    Write(1, 0x11);
    hz_buf slice{state_, kStateBytes};
    ASSERT_EQ(hz_ckpt_quiesce(dev_, kStream, word_, &slice, 1), HZ_OK);
  }

  // The training loop's state at `step`: a pattern, then an even seq.
  void Write(uint64_t step, uint8_t seed) {
    for (size_t i = 0; i < kStateBytes; ++i) state_[i] = static_cast<uint8_t>(seed + i * 7);
    word_->step = step;
    __atomic_store_n(&word_->seq, 2 * step, __ATOMIC_RELEASE);
  }

  // What the latest checkpoint of the stream holds, or empty.
  std::vector<uint8_t> Restored(uint64_t* step) {
    hz_ckpt_info e[4];
    size_t n = 0;
    if (hz_ckpt_list(dev_, kStream, e, 4, &n) != HZ_OK || n == 0) return {};
    *step = e[n - 1].step;
    std::vector<uint8_t> out(kStateBytes);
    void* into = nullptr;
    if (hz_mem_alloc(dev_, kStateBytes, &into) != HZ_OK) return {};
    hz_buf slice{into, kStateBytes};
    hz_ckpt_info info{};
    size_t meta_len = 0;
    const int rc = hz_ckpt_restore(dev_, kStream, *step, &slice, 1, nullptr, &meta_len, &info);
    if (rc == HZ_OK) std::memcpy(out.data(), into, kStateBytes);
    hz_mem_free(dev_, into);
    return rc == HZ_OK ? out : std::vector<uint8_t>{};
  }

  std::vector<uint8_t> Expected(uint8_t seed) const {
    std::vector<uint8_t> out(kStateBytes);
    for (size_t i = 0; i < kStateBytes; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
    return out;
  }

 private:
  hz_device_t* dev_ = nullptr;
  hz_quiesce_word* word_ = nullptr;
  uint8_t* state_ = nullptr;
};

// A maintenance notice to t1; waits until the service finished its saves.
void NoticeAndWait(ServiceProcess& svc) {
  nlohmann::json r =
      svc.Control({{"cmd", "event.inject"},
                   {"tenant", "t1"},
                   {"event", {{"topic", "maintenance"}, {"kind", "scheduled"}, {"in_s", 60}}}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    nlohmann::json c = svc.Control({{"cmd", "counters"}});
    if (c["result"]["checkpoints"].value("jit_notices_done", uint64_t{0}) >= 1) return;
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the notice's saves never finished";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ExpectSavedFromTheSameMemory(ServiceProcess& svc, QuiescedVm& vm) {
  // The guest moved on after the change of process: the save must read the
  // memory the registration names now, not a copy taken before.
  vm.Write(8, 0x5a);
  ASSERT_NO_FATAL_FAILURE(NoticeAndWait(svc));
  uint64_t step = 0;
  const std::vector<uint8_t> restored = vm.Restored(&step);
  ASSERT_FALSE(restored.empty()) << "no checkpoint: the registration was lost";
  EXPECT_EQ(step, 8u);
  EXPECT_TRUE(restored == vm.Expected(0x5a)) << "the checkpoint is not the guest's state";
}

TEST(QuiesceHandover, ARegistrationOutlivesALiveUpgrade) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  QuiescedVm vm;
  ASSERT_NO_FATAL_FAILURE(vm.Open(vms[0]));
  std::string error;
  ASSERT_GT(svc.Upgrade(&error), 0) << "the upgrade was refused: " << error;
  ExpectSavedFromTheSameMemory(svc, vm);
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(QuiesceHandover, ARegistrationOutlivesACrash) {
  StoredService stored;
  ASSERT_TRUE(stored.Start());
  std::vector<std::string> vms = stored.svc().TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  QuiescedVm vm;
  ASSERT_NO_FATAL_FAILURE(vm.Open(vms[0]));
  ASSERT_TRUE(stored.Crash());
  ExpectSavedFromTheSameMemory(stored.svc(), vm);
  EXPECT_EQ(stored.svc().Terminate(), 0);
}

}  // namespace
}  // namespace hz::testing
