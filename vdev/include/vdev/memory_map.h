// Guest memory as the back-end sees it: the regions of SET_MEM_TABLE and
// ADD/REM_MEM_REG, each mmapped from the fd the front-end sent.
//
// A MemoryMap is immutable. A memory-table change builds a new map and swaps
// the shared pointer, so chains and device-held translations made from the old
// map stay valid (and mapped) until they are dropped.
#ifndef VDEV_MEMORY_MAP_H_
#define VDEV_MEMORY_MAP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vdev/device.h"
#include "vdev/vhost_user.h"

namespace vdev {

// One mmapped region. When the last map holding it goes, its fd is closed and
// its pages are unmapped soon after, off the releasing thread (unmapper.h).
struct MappedRegion {
  uint64_t guest_phys_addr = 0;
  uint64_t size = 0;
  uint64_t userspace_addr = 0;  // front-end virtual address
  uint64_t mmap_offset = 0;
  uint8_t* host = nullptr;     // host address of guest_phys_addr
  uint8_t* mapping = nullptr;  // what mmap returned (host - mmap_offset)
  size_t mapping_len = 0;
  int fd = -1;
  ~MappedRegion();

  uint64_t gpa_end() const { return guest_phys_addr + size; }  // exclusive; never wraps
};

// Maps one region sent by the front-end. Takes ownership of fd (closed on
// failure). Rejects zero-size regions, sizes above max_bytes, address ranges
// that wrap 2^64, and fds that are not regular files large enough for
// mmap_offset + size (touching past the end of a shorter file would SIGBUS).
// It first tries to seal the file against shrinking (F_SEAL_SHRINK), which
// keeps a later truncation by the front-end from turning accesses into
// SIGBUS; with require_seal, files that are not sealed that way are refused.
// Returns nullptr and sets *error on failure. (The default, false, is kept
// for source compatibility; Session passes SessionOptions::require_sealed_memory,
// which defaults to true.)
std::shared_ptr<MappedRegion> MapGuestRegion(const vu::MemRegion& desc, int fd, uint64_t max_bytes,
                                             std::string* error, bool require_seal = false);

// True when fd cannot shrink (F_SEAL_SHRINK present), adding the seal when
// the file allows it.
bool SealAgainstShrink(int fd);

class MemoryMap {
 public:
  MemoryMap() = default;
  explicit MemoryMap(std::vector<std::shared_ptr<MappedRegion>> regions);

  // Empty when the regions can form a map; otherwise why not (a zero-size
  // region, a range wrapping 2^64, or two regions overlapping in guest-physical
  // space).
  static std::string Validate(const std::vector<std::shared_ptr<MappedRegion>>& regions);

  // Host pointer for [gpa, gpa+len) when it lies wholly in one region, else
  // nullptr. Overflow-safe: gpa+len wrapping past 2^64 is rejected.
  uint8_t* GpaToHost(uint64_t gpa, uint64_t len) const;
  // Same for a front-end virtual address (ring addresses of SET_VRING_ADDR).
  uint8_t* UvaToHost(uint64_t uva, uint64_t len) const;
  // Translates [gpa, gpa+len) into host segments, following adjacent regions
  // across their boundary. Appends to *out. Returns false, leaving *out as it
  // was, if any byte lies outside guest RAM or the range overflows.
  bool TranslateGpa(uint64_t gpa, uint64_t len, std::vector<Segment>* out) const;

  // One region's guest-physical range and where it is mapped. The map is
  // immutable, so a copy stays valid for as long as the map is held; the
  // queues cache the region they hit last to translate most buffers inline.
  struct HostRange {
    uint64_t gpa = 0;
    uint64_t size = 0;  // 0: empty, holds nothing
    uint8_t* host = nullptr;
    // Host view of [addr, addr+len) when it lies wholly in this range, else
    // nullptr. Overflow-safe: addr below gpa wraps to a huge offset.
    uint8_t* Translate(uint64_t addr, uint64_t len) const {
      uint64_t off = addr - gpa;
      if (off >= size || len > size - off) return nullptr;
      return host + off;
    }
  };
  // The range of the region holding gpa; false (and *out untouched) if none.
  bool FindRange(uint64_t gpa, HostRange* out) const;

  const std::vector<std::shared_ptr<MappedRegion>>& regions() const { return regions_; }
  uint64_t total_bytes() const;

 private:
  // The region holding gpa, or -1.
  int FindGpa(uint64_t gpa) const;

  // Flat copy of the translation fields, sorted by gpa, for cache-friendly lookup.
  struct Range {
    uint64_t gpa;
    uint64_t end;  // exclusive
    uint8_t* host;
  };
  std::vector<std::shared_ptr<MappedRegion>> regions_;  // sorted by guest_phys_addr
  std::vector<Range> ranges_;
};

}  // namespace vdev

#endif  // VDEV_MEMORY_MAP_H_
