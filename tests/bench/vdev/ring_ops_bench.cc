// ring_ops_bench: what vdev's ring bookkeeping costs a request on one CPU,
// with no second process and no cache lines crossing CPUs, so that a change
// to the walk, the front-end's posting or the completion path shows up
// without the noise of cross-CPU transfers (vdev_bench measures those).
//
// One process holds both sides over the same memfd guest memory: the
// virtio-user SplitRing (front-end) and the back-end's SplitQueue, with the
// echo device's copy in between. Each iteration is a batch of 32 64-byte
// request/response chains. The reference, measured in the same run, is the
// same data work with no ring: each request copied into a slot, echoed into
// a response slot, and read back.
//
// Output: Google Benchmark's table on stderr (its JSON report with
// --benchmark_out=FILE --benchmark_out_format=json), and on stdout one JSON
// line per case with CPU nanoseconds per request and the ratio to the
// reference.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "vdev/echo_device.h"
#include "vdev/frontend/guest_memory.h"
#include "vdev/frontend/split_ring.h"
#include "vdev/memory_map.h"
#include "vdev/split_queue.h"

namespace {

using vdev::frontend::Buffer;
using vdev::frontend::ChainBuffers;
using vdev::frontend::Completion;
using vdev::frontend::GuestMemory;
using vdev::frontend::RegionInfo;
using vdev::frontend::SplitRing;

constexpr size_t kMsg = 64;
constexpr int kBatch = 32;
constexpr uint16_t kQueueSize = 256;

// Reads a response the way a caller would; nothing else reads `sink`.
inline void Consume(const uint8_t* response) {
  uint8_t sink[kMsg];
  std::memcpy(sink, response, kMsg);
  benchmark::DoNotOptimize(sink);
}

// Both sides of one queue in this process, and a batch of fixed buffers.
class Rig {
 public:
  Rig() {
    RegionInfo region;
    ok_ = memory_.CreateRegion(1 << 20, true, &region).ok();
    SplitRing::Options ro;
    ro.size = kQueueSize;
    ro.event_idx = true;
    ok_ = ok_ && SplitRing::Create(&memory_, ro, &ring_).ok();
    if (!ok_) return;
    ring_->DisableNotifications();  // busy-poll: the back-end is never kicked
    // The back-end maps the region the way it maps what a front-end sends.
    const vdev::vu::MemRegion wire{region.guest_phys_addr, region.size, region.userspace_addr(),
                                   region.mmap_offset};
    std::string error;
    auto mapped = vdev::MapGuestRegion(wire, dup(region.fd), 1ull << 40, &error);
    ok_ = mapped != nullptr;
    if (!ok_) return;
    queue_.set_size(kQueueSize);
    queue_.set_addresses(ring_->desc_user_addr(), ring_->avail_user_addr(),
                         ring_->used_user_addr());
    queue_.set_features(/*event_idx=*/true, /*indirect=*/true);
    ok_ = queue_.Start(std::make_shared<const vdev::MemoryMap>(
                           std::vector<std::shared_ptr<vdev::MappedRegion>>{mapped}),
                       &error);
    queue_.set_polling(true);
    for (size_t i = 0; i < kBatch && ok_; ++i) {
      req_data_[i] = static_cast<uint8_t*>(memory_.Allocate(kMsg, 64, &req_[i].gpa));
      resp_data_[i] = static_cast<uint8_t*>(memory_.Allocate(kMsg, 64, &resp_[i].gpa));
      ok_ = req_data_[i] != nullptr && resp_data_[i] != nullptr;
      req_[i].len = resp_[i].len = kMsg;
      chains_[i] = {{&req_[i], 1}, {&resp_[i], 1}, i};
    }
  }
  bool ok() const { return ok_; }

  // The front-end's share: write the requests, post them, publish.
  bool Post() {
    for (size_t i = 0; i < kBatch; ++i) std::memset(req_data_[i], static_cast<int>(i), kMsg);
    size_t added = 0;
    if (!ring_->AddChains(chains_, &added).ok() || added != kBatch) return false;
    ring_->PublishPolled();
    return true;
  }
  // The back-end's share: pop, echo, complete, publish.
  bool Serve() {
    queue_.NewTurn();
    const size_t n = queue_.PopBatch(popped_);
    for (size_t i = 0; i < n; ++i) written_[i] = static_cast<uint32_t>(vdev::EchoChain(popped_[i]));
    queue_.CompleteBatch({popped_, n}, {written_, n});
    queue_.Flush();
    return n == kBatch;
  }
  // The front-end again: collect the completions and read the responses.
  bool Collect() {
    vdev::frontend::Status error;
    const size_t n = ring_->PollUsed(done_, kBatch, &error);
    for (size_t i = 0; i < n; ++i) Consume(resp_data_[done_[i].cookie]);
    return n == kBatch && error.ok();
  }

  // Plays the device without the back-end: completes every chain the
  // front-end published, in order, by writing the used ring directly.
  // (vring_avail: flags, idx, ring[]; vring_used: flags, idx, {id, len}[].)
  void CompleteByHand() {
    auto* avail = reinterpret_cast<const uint16_t*>(ring_->avail_user_addr());
    auto* used = reinterpret_cast<uint16_t*>(ring_->used_user_addr());
    auto* entries = reinterpret_cast<uint32_t*>(used + 2);
    const uint16_t used_idx = used[1];
    for (int i = 0; i < kBatch; ++i) {
      const uint16_t slot = (used_idx + i) & (kQueueSize - 1);
      entries[2 * slot] = avail[2 + slot];
      entries[2 * slot + 1] = kMsg;
    }
    std::atomic_ref<uint16_t>(used[1]).store(static_cast<uint16_t>(used_idx + kBatch),
                                             std::memory_order_release);
  }

  // Plays the driver without the front-end: re-publishes the chains the
  // front-end laid out on its first post (descriptors stay as they are).
  void RepublishByHand() {
    auto* avail = reinterpret_cast<uint16_t*>(ring_->avail_user_addr());
    const uint16_t avail_idx = avail[1];
    for (int i = 0; i < kBatch; ++i) {
      // The heads of the first post, in avail slots 0 to kBatch - 1.
      const uint16_t slot = (avail_idx + i) & (kQueueSize - 1);
      if (avail[2 + slot] != avail[2 + i]) avail[2 + slot] = avail[2 + i];
    }
    std::atomic_ref<uint16_t>(avail[1]).store(static_cast<uint16_t>(avail_idx + kBatch),
                                              std::memory_order_release);
  }

 private:
  bool ok_ = false;
  GuestMemory memory_;
  std::unique_ptr<SplitRing> ring_;
  vdev::SplitQueue queue_{0};
  Buffer req_[kBatch], resp_[kBatch];
  uint8_t* req_data_[kBatch] = {};
  uint8_t* resp_data_[kBatch] = {};
  ChainBuffers chains_[kBatch];
  vdev::Chain popped_[kBatch];
  uint32_t written_[kBatch] = {};
  Completion done_[kBatch];
};

// Everything a request costs through vdev on one CPU.
void BM_VdevRoundTrip(benchmark::State& state) {
  Rig rig;
  if (!rig.ok()) return state.SkipWithError("set-up failed");
  for (auto _ : state) {
    if (!rig.Post() || !rig.Serve() || !rig.Collect()) return state.SkipWithError("lost a chain");
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_VdevRoundTrip);

// The front-end's share alone (the device's used entries written by hand).
void BM_FrontEnd(benchmark::State& state) {
  Rig rig;
  if (!rig.ok()) return state.SkipWithError("set-up failed");
  for (auto _ : state) {
    if (!rig.Post()) return state.SkipWithError("post failed");
    rig.CompleteByHand();
    if (!rig.Collect()) return state.SkipWithError("lost a chain");
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_FrontEnd);

// The back-end's share alone: the same chains re-published by hand, popped,
// echoed and completed.
void BM_BackEnd(benchmark::State& state) {
  Rig rig;
  if (!rig.ok() || !rig.Post() || !rig.Serve()) return state.SkipWithError("set-up failed");
  for (auto _ : state) {
    rig.RepublishByHand();
    if (!rig.Serve()) return state.SkipWithError("lost a chain");
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_BackEnd);

// The reference: the same data work with no ring. Requests are written into
// slots, echoed into response slots and read back.
void BM_CopyOnly(benchmark::State& state) {
  struct alignas(64) Slot {
    uint8_t bytes[kMsg];
  };
  std::vector<Slot> req(kQueueSize), resp(kQueueSize);
  uint64_t next = 0;
  for (auto _ : state) {
    for (uint64_t i = next; i < next + kBatch; ++i) {
      std::memset(req[i % kQueueSize].bytes, static_cast<int>(i), kMsg);
    }
    for (uint64_t i = next; i < next + kBatch; ++i) {
      std::memcpy(resp[i % kQueueSize].bytes, req[i % kQueueSize].bytes, kMsg);
      benchmark::ClobberMemory();
    }
    for (uint64_t i = next; i < next + kBatch; ++i) Consume(resp[i % kQueueSize].bytes);
    next += kBatch;
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_CopyOnly);

// Keeps each case's nanoseconds per request for the summary lines.
class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.iterations == 0) continue;
      ns_per_request[run.benchmark_name()] =
          run.GetAdjustedCPUTime() * ToNs(run.time_unit) / kBatch;
    }
  }
  std::map<std::string, double> ns_per_request;

 private:
  static double ToNs(benchmark::TimeUnit unit) {
    switch (unit) {
      case benchmark::kSecond:
        return 1e9;
      case benchmark::kMillisecond:
        return 1e6;
      case benchmark::kMicrosecond:
        return 1e3;
      default:
        return 1;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The table goes to stderr; stdout carries only the JSON lines.
  Collector collector;
  collector.SetOutputStream(&std::cerr);
  collector.SetErrorStream(&std::cerr);
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();
  const auto ref = collector.ns_per_request.find("BM_CopyOnly");
  for (const auto& [name, ns] : collector.ns_per_request) {
    nlohmann::json j{{"bench", "vdev_ring_ops"}, {"case", name}, {"ns_per_request", ns}};
    if (ref != collector.ns_per_request.end() && name != ref->first) {
      // Above 1: what the ring's bookkeeping adds to the bare data work.
      j["ratio_to_copy_only"] = ns / std::max(ref->second, 1e-9);
    }
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}
