// Fuzzes the split-virtqueue walker: the input is queue parameters followed by
// a guest memory image split over two non-contiguous regions; the ring is
// started on it and every chain popped is echoed (touching each byte of each
// segment, so ASan flags any segment that is not inside guest memory) and
// completed.
//
// With flag bit 4 the same image is also served by PopBatch (batches of
// 1 + flags >> 5 chains) on a copy of the memory, and the two must agree chain
// for chain: same heads, segments at the same offsets, same totals, the same
// used ring afterwards.
//
// Input: RingParams (12 bytes), then the memory image (zero-padded to at
// least kMinImage bytes, truncated at kMaxImage).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "spdlog/spdlog.h"
#include "vdev/echo_device.h"
#include "vdev/memory_map.h"
#include "vdev/split_queue.h"

namespace {

struct RingParams {
  uint8_t size_log2;  // ring size 1 << (size_log2 % 11)
  uint8_t flags;      // bit 0 EVENT_IDX, bit 1 INDIRECT, bit 2 busy-poll, bit 3 remap
                      // midway, bit 4 compare with PopBatch, bits 5-7 its batch size - 1
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

// A chain as offsets into its region's buffer, so that chains popped from
// two copies of the memory compare equal.
struct ChainView {
  uint16_t head;
  std::vector<std::pair<ptrdiff_t, size_t>> segments;
  size_t num_readable;
  size_t readable_bytes;
  size_t writable_bytes;
  bool operator==(const ChainView&) const = default;
};

ChainView View(const vdev::Chain& c, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  ChainView v{c.head(), {}, c.readable().size(), c.readable_bytes(), c.writable_bytes()};
  auto offset = [&](const uint8_t* p) -> ptrdiff_t {
    if (p >= a.data() && p < a.data() + a.size()) return p - a.data();
    return 0x1000000 + (p - b.data());
  };
  for (const vdev::Segment& s : c.readable()) v.segments.emplace_back(offset(s.data), s.len);
  for (const vdev::Segment& s : c.writable()) v.segments.emplace_back(offset(s.data), s.len);
  return v;
}

// One queue on its own copy of the two regions.
struct Guest {
  Guest(const std::vector<uint8_t>& image, size_t a_len)
      : a(image.begin(), image.begin() + static_cast<ptrdiff_t>(a_len)),
        b(image.begin() + static_cast<ptrdiff_t>(a_len), image.end()),
        regions{HeapRegion(a, kGpaBase, kUvaBase),
                HeapRegion(b, kGpaBase + a_len, kUvaBase + 0x10000000)},
        memory(std::make_shared<const vdev::MemoryMap>(regions)),
        q(0, vdev::QueueLimits{.max_indirect = 64, .max_chain_bytes = 1u << 20}) {}

  bool Start(const RingParams& p, size_t a_len) {
    auto uva = [&](uint16_t off) -> uint64_t {
      return off < a_len ? kUvaBase + off : kUvaBase + 0x10000000 + (off - a_len);
    };
    q.set_size(static_cast<uint16_t>(1u << (p.size_log2 % 11)));
    q.set_addresses(uva(p.desc_off), uva(p.avail_off), uva(p.used_off));
    q.set_features(p.flags & 1, p.flags & 2);
    q.set_last_avail(p.last_avail);
    q.set_polling(p.flags & 4);
    std::string error;
    return q.Start(memory, &error);
  }

  // Two separate heap blocks: guest-adjacent, host-disjoint, exact-sized so
  // ASan catches a byte past either.
  std::vector<uint8_t> a;
  std::vector<uint8_t> b;
  std::vector<std::shared_ptr<vdev::MappedRegion>> regions;
  std::shared_ptr<const vdev::MemoryMap> memory;
  vdev::SplitQueue q;
};

// Pops up to `pops` chains one at a time and in batches from two copies of
// the image (nothing is echoed or completed in between, so both walks see
// the same memory), and aborts if they differ.
void ComparePopBatch(const RingParams& p, const std::vector<uint8_t>& image, size_t a_len) {
  Guest one(image, a_len), batched(image, a_len);
  if (!one.Start(p, a_len) || !batched.Start(p, a_len)) return;
  std::vector<vdev::Chain> singles(p.pops);
  size_t n1 = 0;
  while (n1 < singles.size() && one.q.Pop(&singles[n1])) ++n1;
  std::vector<vdev::Chain> batches(p.pops);
  const size_t batch = 1u + (p.flags >> 5);
  size_t n2 = 0;
  while (n2 < batches.size()) {
    const size_t want = std::min(batch, batches.size() - n2);
    const size_t got = batched.q.PopBatch({batches.data() + n2, want});
    n2 += got;
    if (got < want) break;
  }
  if (n1 != n2) __builtin_trap();
  for (size_t i = 0; i < n1; ++i) {
    if (!(View(singles[i], one.a, one.b) == View(batches[i], batched.a, batched.b))) {
      __builtin_trap();
    }
  }
  if (one.q.last_avail() != batched.q.last_avail() || one.q.broken() != batched.q.broken() ||
      one.q.stats().malformed != batched.q.stats().malformed) {
    __builtin_trap();
  }
  // Completing all of them one way and in one batch the other way leaves
  // the same bytes in guest memory.
  std::vector<uint32_t> written(n1);
  for (size_t i = 0; i < n1; ++i) {
    written[i] = static_cast<uint32_t>(i * 7);
    one.q.Complete(singles[i], written[i]);
  }
  batched.q.CompleteBatch({batches.data(), n1}, written);
  one.q.Flush();
  batched.q.Flush();
  if (one.a != batched.a || one.b != batched.b) __builtin_trap();
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
  if (p.flags & 16) ComparePopBatch(p, image, a_len);

  Guest g(image, a_len);
  if (!g.Start(p, a_len)) return 0;
  vdev::SplitQueue& q = g.q;
  std::string error;
  std::vector<vdev::Chain> held;
  vdev::Chain chain;
  for (int i = 0; i < p.pops; ++i) {
    if (i == p.pops / 2 && (p.flags & 8)) {
      auto again = std::make_shared<const vdev::MemoryMap>(g.regions);
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
