#include "vdev/memory_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "spdlog/fmt/fmt.h"
#include "unmapper.h"

namespace vdev {

MappedRegion::~MappedRegion() {
  // The fd goes now (descriptor limits are counted at once); the pages go on
  // the unmap thread, since the last holder is often a shared thread.
  if (fd >= 0) close(fd);
  if (mapping != nullptr) UnmapLater(mapping, mapping_len);
}

// Why guest memory fds must be sealed against shrinking (F_SEAL_SHRINK; the
// back-end adds the seal itself when the memfd allows it, i.e. was created
// with MFD_ALLOW_SEALING and is not F_SEAL_SEAL'ed without it). A front-end
// that shrinks an unsealed file under the mapping makes the next access
// raise SIGBUS in this process, so unsealable memory is refused by default:
// memfds created without MFD_ALLOW_SEALING, and files that cannot carry
// seals at all (tmpfs or hugetlbfs files, QEMU's memory-backend-file).
// QEMU's memory-backend-memfd is sealable (seal=on by default), as is the
// virtio-user front-end's memory. Setting this to false accepts unsealable
// memory and means trusting the front-end never to truncate it: a
// truncation then crashes the back-end (SIGBUS). Only for front-ends as
// trusted as the back-end itself.
bool SealAgainstShrink(int fd) {
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return false;  // not a sealable file (hugetlbfs, tmpfs file, ...)
  if (seals & F_SEAL_SHRINK) return true;
  if (seals & F_SEAL_SEAL) return false;
  return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0;
}

std::shared_ptr<MappedRegion> MapGuestRegion(const vu::MemRegion& desc, int fd, uint64_t max_bytes,
                                             std::string* error, bool require_seal) {
  auto fail = [&](std::string why) -> std::shared_ptr<MappedRegion> {
    if (fd >= 0) close(fd);
    *error = std::move(why);
    return nullptr;
  };
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (fd < 0) return fail("memory region without a file descriptor");
  if (desc.memory_size == 0) return fail("zero-size memory region");
  if (desc.memory_size > max_bytes) {
    return fail(fmt::format("memory region of {} bytes exceeds the limit of {}", desc.memory_size,
                            max_bytes));
  }
  if (desc.guest_phys_addr > kMax - desc.memory_size) {
    return fail(
        fmt::format("memory region gpa {:#x}+{:#x} wraps", desc.guest_phys_addr, desc.memory_size));
  }
  if (desc.userspace_addr > kMax - desc.memory_size) {
    return fail(
        fmt::format("memory region uva {:#x}+{:#x} wraps", desc.userspace_addr, desc.memory_size));
  }
  if (desc.mmap_offset > kMax - desc.memory_size ||
      desc.mmap_offset + desc.memory_size >
          static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return fail(fmt::format("memory region mmap_offset {:#x} too large", desc.mmap_offset));
  }
  uint64_t mapping_len = desc.mmap_offset + desc.memory_size;
  // Seal before checking the size, so the size checked is one that lasts.
  if (!SealAgainstShrink(fd) && require_seal) {
    return fail(
        fcntl(fd, F_GET_SEALS) < 0
            ? "memory region fd is a file that cannot be sealed against shrinking "
              "(F_SEAL_SHRINK); use a memfd, or let the back-end trust the front-end "
              "(require_sealed_memory off)"
            : "memory region memfd is not sealed against shrinking (F_SEAL_SHRINK) and does "
              "not allow adding the seal (created without MFD_ALLOW_SEALING)");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return fail("fstat on memory region fd failed");
  if (!S_ISREG(st.st_mode)) return fail("memory region fd is not a regular file or memfd");
  if (static_cast<uint64_t>(st.st_size) < mapping_len) {
    return fail(fmt::format("memory region needs {} bytes of its file but it has {}", mapping_len,
                            st.st_size));
  }
  void* p = mmap(nullptr, mapping_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) return fail(fmt::format("mmap of {} bytes failed", mapping_len));
  auto region = std::make_shared<MappedRegion>();
  region->guest_phys_addr = desc.guest_phys_addr;
  region->size = desc.memory_size;
  region->userspace_addr = desc.userspace_addr;
  region->mmap_offset = desc.mmap_offset;
  region->mapping = static_cast<uint8_t*>(p);
  region->mapping_len = mapping_len;
  region->host = region->mapping + desc.mmap_offset;
  region->fd = fd;
  return region;
}

MemoryMap::MemoryMap(std::vector<std::shared_ptr<MappedRegion>> regions)
    : regions_(std::move(regions)) {
  std::sort(regions_.begin(), regions_.end(),
            [](const auto& a, const auto& b) { return a->guest_phys_addr < b->guest_phys_addr; });
  ranges_.reserve(regions_.size());
  for (const auto& r : regions_) ranges_.push_back({r->guest_phys_addr, r->gpa_end(), r->host});
}

std::string MemoryMap::Validate(const std::vector<std::shared_ptr<MappedRegion>>& regions) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<const MappedRegion*> sorted;
  for (const auto& r : regions) {
    if (r == nullptr || r->size == 0) return "zero-size memory region";
    if (r->guest_phys_addr > kMax - r->size || r->userspace_addr > kMax - r->size) {
      return fmt::format("memory region {:#x}+{:#x} wraps", r->guest_phys_addr, r->size);
    }
    sorted.push_back(r.get());
  }
  std::sort(sorted.begin(), sorted.end(), [](const MappedRegion* a, const MappedRegion* b) {
    return a->guest_phys_addr < b->guest_phys_addr;
  });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->guest_phys_addr < sorted[i - 1]->gpa_end()) {
      return fmt::format("memory regions at gpa {:#x} and {:#x} overlap",
                         sorted[i - 1]->guest_phys_addr, sorted[i]->guest_phys_addr);
    }
  }
  return {};
}

int MemoryMap::FindGpa(uint64_t gpa) const {
  // Few regions in practice (RAM below and above the PCI hole); a short
  // linear scan beats a binary search there, and stays correct for many.
  if (ranges_.size() <= 8) {
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (gpa >= ranges_[i].gpa && gpa < ranges_[i].end) return static_cast<int>(i);
    }
    return -1;
  }
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), gpa,
                             [](uint64_t a, const Range& r) { return a < r.gpa; });
  if (it == ranges_.begin()) return -1;
  --it;
  if (gpa >= it->end) return -1;
  return static_cast<int>(it - ranges_.begin());
}

uint8_t* MemoryMap::GpaToHost(uint64_t gpa, uint64_t len) const {
  HostRange r;
  return FindRange(gpa, &r) ? r.Translate(gpa, len) : nullptr;
}

bool MemoryMap::FindRange(uint64_t gpa, HostRange* out) const {
  int i = FindGpa(gpa);
  if (i < 0) return false;
  const Range& r = ranges_[i];
  *out = {r.gpa, r.end - r.gpa, r.host};
  return true;
}

uint8_t* MemoryMap::UvaToHost(uint64_t uva, uint64_t len) const {
  for (const auto& r : regions_) {
    if (uva < r->userspace_addr) continue;
    uint64_t off = uva - r->userspace_addr;
    if (off >= r->size) continue;
    if (len > r->size - off) return nullptr;
    return r->host + off;
  }
  return nullptr;
}

bool MemoryMap::TranslateGpa(uint64_t gpa, uint64_t len, std::vector<Segment>* out) const {
  if (len == 0) return true;
  if (gpa > std::numeric_limits<uint64_t>::max() - (len - 1)) return false;
  size_t start = out->size();
  while (len > 0) {
    int i = FindGpa(gpa);
    if (i < 0) {
      out->resize(start);
      return false;
    }
    const Range& r = ranges_[i];
    uint64_t n = std::min(len, r.end - gpa);
    uint8_t* host = r.host + (gpa - r.gpa);
    // Host-contiguous neighbours (one mapping split in two regions) merge.
    if (out->size() > start && out->back().data + out->back().len == host) {
      out->back().len += n;
    } else {
      out->push_back({host, static_cast<size_t>(n)});
    }
    len -= n;
    gpa += n;  // <= r.end, which never wraps; when len reaches 0 gpa is unused
  }
  return true;
}

uint64_t MemoryMap::total_bytes() const {
  uint64_t total = 0;
  for (const auto& r : regions_) total += r->size;
  return total;
}

}  // namespace vdev
