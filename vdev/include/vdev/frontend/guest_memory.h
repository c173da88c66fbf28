// "Guest memory" of a user-space virtio driver: memfd-backed regions mapped
// shared into this process, each placed at a guest-physical address (GPA)
// chosen here. The back-end maps the same memfds (SET_MEM_TABLE/ADD_MEM_REG),
// so buffers placed in these regions are seen by the device without copies.
//
// The front-end's own mapping address of a region is the vhost-user
// "userspace_addr"; ring addresses are sent in that address space.
//
// Thread-safety: every method may be called from any thread. Region changes
// are rare and take an exclusive lock; translations and the allocator take
// shared/short locks.
#ifndef VDEV_FRONTEND_GUEST_MEMORY_H_
#define VDEV_FRONTEND_GUEST_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "vdev/frontend/status.h"

namespace vdev::frontend {

// A read-only description of one region, as sent to the back-end.
struct RegionInfo {
  uint64_t guest_phys_addr = 0;
  uint64_t size = 0;
  uint8_t* host = nullptr;   // this process's mapping of guest_phys_addr
  uint64_t mmap_offset = 0;  // offset of guest_phys_addr in fd
  int fd = -1;               // owned by GuestMemory; dup it to keep it
  bool allocatable = false;  // Allocate() may place buffers here

  uint64_t userspace_addr() const { return reinterpret_cast<uint64_t>(host); }
};

class GuestMemory {
 public:
  // First GPA handed out, and the gap left between automatically placed
  // regions (so that adjacency is never assumed by accident).
  static constexpr uint64_t kFirstGpa = 1ull << 20;
  static constexpr uint64_t kRegionAlign = 2ull << 20;

  GuestMemory() = default;
  ~GuestMemory();
  GuestMemory(const GuestMemory&) = delete;
  GuestMemory& operator=(const GuestMemory&) = delete;

  // Creates a memfd of `size` bytes (rounded up to whole pages), sealed
  // against shrinking and growing, and maps it.
  // gpa 0 places it above every existing region; otherwise it must be page
  // aligned and must not overlap an existing region. An allocatable region
  // serves Allocate().
  Status CreateRegion(uint64_t size, bool allocatable, RegionInfo* out, uint64_t gpa = 0);

  // Maps [offset, offset + size) of a caller's memfd (for example a tenant's
  // shared arena). The fd is duplicated; the caller keeps its own. The caller
  // places its own buffers there (see GpaOf); Allocate() never uses it.
  Status AdoptRegion(int fd, uint64_t offset, uint64_t size, RegionInfo* out, uint64_t gpa = 0);

  // Unmaps the region starting at gpa. Fails while allocations live in it.
  Status RemoveRegion(uint64_t gpa);
  // Whether Allocate() handed out memory in the region starting at gpa that
  // was not freed yet (rings live in such memory too).
  bool HasAllocations(uint64_t gpa) const;

  std::vector<RegionInfo> Regions() const;
  bool FindRegion(uint64_t gpa, RegionInfo* out) const;

  // Host pointer for [gpa, gpa+len) if it lies in one region, else nullptr.
  uint8_t* Translate(uint64_t gpa, uint64_t len) const;
  // GPA of [p, p+len) if it lies in one region.
  bool GpaOf(const void* p, uint64_t len, uint64_t* gpa) const;

  // Allocates len bytes (align: a power of two up to 4096) from an
  // allocatable region. Returns nullptr when no region has room.
  void* Allocate(size_t len, size_t align, uint64_t* gpa);
  void Free(void* p);
  // Bytes currently allocated (for tests and leak checks).
  size_t AllocatedBytes() const;

 private:
  struct Region {
    RegionInfo info;
    uint8_t* mapping = nullptr;  // what mmap returned
    size_t mapping_len = 0;
    // Allocator state (allocatable regions only): free extents offset -> len
    // and live allocations offset -> len.
    std::map<uint64_t, uint64_t> free;
    std::map<uint64_t, uint64_t> used;
    ~Region();
  };

  Status Insert(std::unique_ptr<Region> region, uint64_t gpa, RegionInfo* out);

  mutable std::shared_mutex mu_;
  std::vector<std::unique_ptr<Region>> regions_;  // sorted by GPA
  mutable std::mutex alloc_mu_;                   // nests inside mu_ (shared)
  size_t allocated_ = 0;
};

}  // namespace vdev::frontend

#endif  // VDEV_FRONTEND_GUEST_MEMORY_H_
