// Fuzzes the split-virtqueue walker: the input is queue parameters followed by
// a guest memory image split over two non-contiguous regions; the ring is
// started on it and every chain popped is echoed (touching each byte of each
// segment, so ASan flags any segment that is not inside guest memory) and
// completed.
//
// Input: RingParams (12 bytes), then the memory image (zero-padded to at
// least kMinImage bytes, truncated at kMaxImage).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "spdlog/spdlog.h"
#include "vdev/echo_device.h"
#include "vdev/memory_map.h"
#include "vdev/split_queue.h"

namespace {

struct RingParams {
  uint8_t size_log2;  // ring size 1 << (size_log2 % 11)
  uint8_t flags;      // bit 0 EVENT_IDX, bit 1 INDIRECT, bit 2 busy-poll, bit 3 remap midway
  uint16_t last_avail;
  uint16_t desc_off;  // ring parts' offsets in the image
  uint16_t avail_off;
  uint16_t used_off;
  uint8_t pops;   // chains to pop at most
  uint8_t split;  // region A holds split * 256 bytes of the image
};
static_assert(sizeof(RingParams) == 12);

constexpr size_t kMinImage = 16384;
constexpr size_t kMaxImage = 65536;
constexpr uint64_t kGpaBase = 0x1000;
constexpr uint64_t kUvaBase = 0x7f0000000000;

std::shared_ptr<vdev::MappedRegion> HeapRegion(std::vector<uint8_t>& buf, uint64_t gpa,
                                               uint64_t uva) {
  auto r = std::make_shared<vdev::MappedRegion>();
  r->guest_phys_addr = gpa;
  r->size = buf.size();
  r->userspace_addr = uva;
  r->host = buf.data();  // not mmapped: mapping stays null, nothing to unmap
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(RingParams)) return 0;
  RingParams p;
  std::memcpy(&p, data, sizeof(p));
  data += sizeof(p);
  size -= sizeof(p);

  std::vector<uint8_t> image(std::max(kMinImage, std::min(size, kMaxImage)));
  std::memcpy(image.data(), data, std::min(size, image.size()));
  size_t a_len = std::clamp<size_t>(size_t{p.split} * 256, 4096, image.size() - 4096);
  // Two separate heap blocks: guest-adjacent, host-disjoint, exact-sized so
  // ASan catches a byte past either.
  std::vector<uint8_t> a(image.begin(), image.begin() + a_len);
  std::vector<uint8_t> b(image.begin() + a_len, image.end());
  std::vector<std::shared_ptr<vdev::MappedRegion>> regions = {
      HeapRegion(a, kGpaBase, kUvaBase), HeapRegion(b, kGpaBase + a_len, kUvaBase + 0x10000000)};
  auto memory = std::make_shared<const vdev::MemoryMap>(regions);
  auto uva = [&](uint16_t off) -> uint64_t {
    return off < a_len ? kUvaBase + off : kUvaBase + 0x10000000 + (off - a_len);
  };

  vdev::SplitQueue q(0, vdev::QueueLimits{.max_indirect = 64, .max_chain_bytes = 1u << 20});
  q.set_size(static_cast<uint16_t>(1u << (p.size_log2 % 11)));
  q.set_addresses(uva(p.desc_off), uva(p.avail_off), uva(p.used_off));
  q.set_features(p.flags & 1, p.flags & 2);
  q.set_last_avail(p.last_avail);
  q.set_polling(p.flags & 4);
  std::string error;
  if (!q.Start(memory, &error)) return 0;

  std::vector<vdev::Chain> held;
  vdev::Chain chain;
  for (int i = 0; i < p.pops; ++i) {
    if (i == p.pops / 2 && (p.flags & 8)) {
      auto again = std::make_shared<const vdev::MemoryMap>(regions);
      q.Remap(again, &error);
    }
    if (i % 2 == 1) q.HasAvailable();  // the busy-poll probe, interleaved
    if (i % 7 == 6) q.NewTurn();
    if (!q.Pop(&chain)) break;
    size_t n = vdev::EchoChain(chain);
    if (i % 3 == 0) {
      held.push_back(chain);  // completed later, out of order
    } else {
      q.Complete(chain, static_cast<uint32_t>(n + i));
    }
    if (i % 5 == 4) q.Flush();
  }
  for (auto it = held.rbegin(); it != held.rend(); ++it) q.Complete(*it, 1);
  q.Flush();
  q.Stop();
  return 0;
}
