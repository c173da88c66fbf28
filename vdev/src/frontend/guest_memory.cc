#include "vdev/frontend/guest_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace vdev::frontend {

namespace {

uint64_t PageSize() {
  return static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Rounds v up to a multiple of the power of two a; false on overflow.
bool AlignUp(uint64_t v, uint64_t a, uint64_t* out) {
  if (v > UINT64_MAX - (a - 1)) return false;
  *out = (v + a - 1) & ~(a - 1);
  return true;
}

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

GuestMemory::Region::~Region() {
  if (mapping != nullptr) munmap(mapping, mapping_len);
  if (info.fd >= 0) close(info.fd);
}

GuestMemory::~GuestMemory() = default;

Status GuestMemory::CreateRegion(uint64_t size, bool allocatable, RegionInfo* out, uint64_t gpa) {
  uint64_t len = 0;
  if (size == 0 || !AlignUp(size, PageSize(), &len) || len > (1ull << 46)) {
    return Status::InvalidArgument("region size must be between 1 byte and 64 TiB");
  }
  int fd = memfd_create("vdev-guest-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::IoError(Errno("memfd_create"));
  // Sealed against resizing, so a back-end can verify (F_GET_SEALS) that its
  // mapping can never lose its pages to a truncate (SIGBUS on access).
  if (ftruncate(fd, static_cast<off_t>(len)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status s = Status::IoError(Errno("memfd set-up"));
    close(fd);
    return s;
  }
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s = Status::IoError(Errno("mmap"));
    close(fd);
    return s;
  }
  auto region = std::make_unique<Region>();
  region->mapping = static_cast<uint8_t*>(p);
  region->mapping_len = len;
  region->info.size = len;
  region->info.host = region->mapping;
  region->info.fd = fd;
  region->info.allocatable = allocatable;
  if (allocatable) region->free[0] = len;
  return Insert(std::move(region), gpa, out);
}

Status GuestMemory::AdoptRegion(int fd, uint64_t offset, uint64_t size, RegionInfo* out,
                                uint64_t gpa) {
  const uint64_t page = PageSize();
  uint64_t end = 0;
  if (size == 0 || size % page != 0 || offset % page != 0 || offset > UINT64_MAX - size ||
      size > (1ull << 46)) {
    return Status::InvalidArgument("adopted region must be a non-empty page-aligned range");
  }
  end = offset + size;
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (own < 0) return Status::IoError(Errno("dup"));
  // Map from file offset 0 as the back-end will (it maps mmap_offset + size),
  // so the same address arithmetic holds on both sides.
  void* p = mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (p == MAP_FAILED) {
    Status s = Status::IoError(Errno("mmap"));
    close(own);
    return s;
  }
  auto region = std::make_unique<Region>();
  region->mapping = static_cast<uint8_t*>(p);
  region->mapping_len = end;
  region->info.size = size;
  region->info.host = region->mapping + offset;
  region->info.mmap_offset = offset;
  region->info.fd = own;
  region->info.allocatable = false;
  return Insert(std::move(region), gpa, out);
}

Status GuestMemory::Insert(std::unique_ptr<Region> region, uint64_t gpa, RegionInfo* out) {
  std::unique_lock lock(mu_);
  const uint64_t size = region->info.size;
  if (gpa == 0) {
    uint64_t next = kFirstGpa;
    for (const auto& r : regions_) {
      uint64_t end = r->info.guest_phys_addr + r->info.size;
      // Leave one alignment unit of hole after each region.
      if (!AlignUp(end, kRegionAlign, &end) || end > UINT64_MAX - kRegionAlign) {
        return Status::NoSpace("guest-physical address space exhausted");
      }
      next = std::max(next, end + kRegionAlign);
    }
    gpa = next;
  } else if (gpa % PageSize() != 0) {
    return Status::InvalidArgument("region GPA must be page aligned");
  }
  if (gpa > UINT64_MAX - size) return Status::InvalidArgument("region wraps the address space");
  for (const auto& r : regions_) {
    const uint64_t a = r->info.guest_phys_addr;
    const uint64_t b = a + r->info.size;
    if (gpa < b && a < gpa + size) return Status::InvalidArgument("region overlaps another");
  }
  region->info.guest_phys_addr = gpa;
  if (out != nullptr) *out = region->info;
  regions_.push_back(std::move(region));
  std::sort(regions_.begin(), regions_.end(), [](const auto& x, const auto& y) {
    return x->info.guest_phys_addr < y->info.guest_phys_addr;
  });
  return Status::Ok();
}

Status GuestMemory::RemoveRegion(uint64_t gpa) {
  std::unique_lock lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if ((*it)->info.guest_phys_addr != gpa) continue;
    {
      std::lock_guard alloc_lock(alloc_mu_);
      if (!(*it)->used.empty()) return Status::InvalidArgument("region still has allocations");
    }
    regions_.erase(it);
    return Status::Ok();
  }
  return Status::InvalidArgument("no region starts at that GPA");
}

bool GuestMemory::HasAllocations(uint64_t gpa) const {
  std::shared_lock lock(mu_);
  std::lock_guard alloc_lock(alloc_mu_);
  for (const auto& r : regions_) {
    if (r->info.guest_phys_addr == gpa) return !r->used.empty();
  }
  return false;
}

std::vector<RegionInfo> GuestMemory::Regions() const {
  std::shared_lock lock(mu_);
  std::vector<RegionInfo> out;
  out.reserve(regions_.size());
  for (const auto& r : regions_) out.push_back(r->info);
  return out;
}

bool GuestMemory::FindRegion(uint64_t gpa, RegionInfo* out) const {
  std::shared_lock lock(mu_);
  for (const auto& r : regions_) {
    if (gpa >= r->info.guest_phys_addr && gpa - r->info.guest_phys_addr < r->info.size) {
      *out = r->info;
      return true;
    }
  }
  return false;
}

uint8_t* GuestMemory::Translate(uint64_t gpa, uint64_t len) const {
  std::shared_lock lock(mu_);
  for (const auto& r : regions_) {
    const RegionInfo& i = r->info;
    if (gpa < i.guest_phys_addr) continue;
    const uint64_t off = gpa - i.guest_phys_addr;
    if (off < i.size && len <= i.size - off) return i.host + off;
  }
  return nullptr;
}

bool GuestMemory::GpaOf(const void* p, uint64_t len, uint64_t* gpa) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(mu_);
  for (const auto& r : regions_) {
    const RegionInfo& i = r->info;
    const auto base = reinterpret_cast<uintptr_t>(i.host);
    if (addr < base) continue;
    const uint64_t off = addr - base;
    if (off < i.size && len <= i.size - off) {
      *gpa = i.guest_phys_addr + off;
      return true;
    }
  }
  return false;
}

void* GuestMemory::Allocate(size_t len, size_t align, uint64_t* gpa) {
  if (len == 0 || align == 0 || (align & (align - 1)) != 0 || align > 4096) return nullptr;
  align = std::max<size_t>(align, 16);
  uint64_t want = 0;
  if (!AlignUp(len, 16, &want)) return nullptr;
  std::shared_lock lock(mu_);
  std::lock_guard alloc_lock(alloc_mu_);
  for (const auto& r : regions_) {
    if (!r->info.allocatable) continue;
    // First fit over the free extents, respecting alignment of the host
    // address (regions are page aligned, so GPA alignment follows).
    for (auto it = r->free.begin(); it != r->free.end(); ++it) {
      uint64_t start = 0;
      if (!AlignUp(it->first, align, &start)) continue;
      const uint64_t ext_end = it->first + it->second;
      if (start > ext_end || ext_end - start < want) continue;
      const uint64_t ext_start = it->first;
      r->free.erase(it);
      if (start > ext_start) r->free[ext_start] = start - ext_start;
      if (ext_end > start + want) r->free[start + want] = ext_end - (start + want);
      r->used[start] = want;
      allocated_ += want;
      if (gpa != nullptr) *gpa = r->info.guest_phys_addr + start;
      return r->info.host + start;
    }
  }
  return nullptr;
}

void GuestMemory::Free(void* p) {
  if (p == nullptr) return;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(mu_);
  std::lock_guard alloc_lock(alloc_mu_);
  for (const auto& r : regions_) {
    const auto base = reinterpret_cast<uintptr_t>(r->info.host);
    if (!r->info.allocatable || addr < base || addr - base >= r->info.size) continue;
    const uint64_t off = addr - base;
    auto it = r->used.find(off);
    if (it == r->used.end()) return;  // not an allocation: ignore
    uint64_t start = off;
    uint64_t len = it->second;
    r->used.erase(it);
    allocated_ -= len;
    // Coalesce with the free neighbours.
    auto next = r->free.lower_bound(start);
    if (next != r->free.end() && next->first == start + len) {
      len += next->second;
      next = r->free.erase(next);
    }
    if (next != r->free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        len += prev->second;
        r->free.erase(prev);
      }
    }
    r->free[start] = len;
    return;
  }
}

size_t GuestMemory::AllocatedBytes() const {
  std::lock_guard alloc_lock(alloc_mu_);
  return allocated_;
}

}  // namespace vdev::frontend
