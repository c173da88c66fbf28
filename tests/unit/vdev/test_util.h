// Test helpers: guest RAM in a memfd, mapped the way the back-end maps what a
// front-end sends, and a minimal driver that lays out split rings in it.
#ifndef VDEV_TESTS_UNIT_TEST_UTIL_H_
#define VDEV_TESTS_UNIT_TEST_UTIL_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vdev/memory_map.h"

namespace vdev::testing {

constexpr uint64_t kEventFdMax = 0xfffffffffffffffeull;  // the most an eventfd holds
constexpr uint16_t kRingSize = 8;  // the queue size of a test that needs no more

inline bool FdIsOpen(int fd) {
  return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

// Reads and resets an eventfd counter (0 when not signalled).
inline uint64_t Drain(int fd) {
  uint64_t v = 0;
  return read(fd, &v, sizeof(v)) == sizeof(v) ? v : 0;
}

// True when p and q view the same guest byte. The back-end maps guest RAM
// itself, so its pointers differ from the test's; compare through the memfd.
inline bool Aliases(uint8_t* p, uint8_t* q) {
  if (p == nullptr || q == nullptr) return false;
  uint8_t saved = *q;
  *q = static_cast<uint8_t>(saved ^ 0x5a);
  bool same = *p == *q;
  *q = static_cast<uint8_t>(saved ^ 0xa5);
  same = same && *p == *q;
  *q = saved;
  return same;
}

inline int MakeMemfd(size_t size) {
  int fd = memfd_create("vdev-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) return -1;
  return fd;
}

// One memfd holding all guest RAM; regions are windows of it.
class GuestRam {
 public:
  explicit GuestRam(size_t size) : size_(size) {
    fd_ = MakeMemfd(size);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~GuestRam() {
    if (base_) munmap(base_, size_);
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  uint8_t* at(size_t file_offset) { return base_ + file_offset; }
  size_t size() const { return size_; }

  // A region mapping [file_offset, file_offset+size) of the memfd at gpa.
  std::shared_ptr<MappedRegion> Region(uint64_t gpa, uint64_t size, uint64_t file_offset,
                                       uint64_t uva) {
    vu::MemRegion d{gpa, size, uva, file_offset};
    std::string error;
    auto r = MapGuestRegion(d, dup(fd_), 1ull << 40, &error);
    EXPECT_NE(r, nullptr) << error;
    return r;
  }

 private:
  size_t size_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
};

// Guest RAM as one region: gpa 0x10000.., uva = gpa + kUvaDelta.
constexpr uint64_t kGpaBase = 0x10000;
constexpr uint64_t kUvaDelta = 0x7f0000000000;

// Where the split-queue tests put a ring's parts, an indirect table and
// their buffers.
constexpr uint64_t kDesc = kGpaBase;
constexpr uint64_t kAvail = kGpaBase + 0x1000;
constexpr uint64_t kUsed = kGpaBase + 0x2000;
constexpr uint64_t kTable = kGpaBase + 0x8000;
constexpr uint64_t kBuf = kGpaBase + 0x10000;
// <linux/virtio_ring.h> descriptor flags (its inline helpers are not C++).
constexpr uint16_t N = 1;  // VRING_DESC_F_NEXT
constexpr uint16_t W = 2;  // VRING_DESC_F_WRITE
constexpr uint16_t I = 4;  // VRING_DESC_F_INDIRECT

struct SimpleGuest {
  explicit SimpleGuest(size_t size = 1 << 20) : ram(size) {
    memory = std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{
        ram.Region(kGpaBase, size, 0, kGpaBase + kUvaDelta)});
  }
  uint8_t* host(uint64_t gpa) { return ram.at(gpa - kGpaBase); }
  GuestRam ram;
  MemoryMapPtr memory;
};

// Driver side of a split ring at fixed guest addresses.
class RingDriver {
 public:
  RingDriver(SimpleGuest* guest, uint16_t size, uint64_t desc_gpa, uint64_t avail_gpa,
             uint64_t used_gpa)
      : g_(guest), size_(size), desc_(desc_gpa), avail_(avail_gpa), used_(used_gpa) {}

  uint64_t desc_uva() const { return desc_ + kUvaDelta; }
  uint64_t avail_uva() const { return avail_ + kUvaDelta; }
  uint64_t used_uva() const { return used_ + kUvaDelta; }

  void SetDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next,
               uint64_t table_gpa = 0) {
    uint8_t* d = g_->host((table_gpa ? table_gpa : desc_) + 16ull * i);
    std::memcpy(d, &addr, 8);
    std::memcpy(d + 8, &len, 4);
    std::memcpy(d + 12, &flags, 2);
    std::memcpy(d + 14, &next, 2);
  }
  // Puts head on the avail ring and bumps avail idx.
  void Publish(uint16_t head) {
    uint16_t idx = avail_idx();
    std::memcpy(g_->host(avail_ + 4 + 2ull * (idx % size_)), &head, 2);
    set_avail_idx(static_cast<uint16_t>(idx + 1));
  }
  uint16_t avail_idx() { return Get16(avail_ + 2); }
  void set_avail_idx(uint16_t v) { Set16(avail_ + 2, v); }
  void set_avail_flags(uint16_t v) { Set16(avail_, v); }
  void set_used_event(uint16_t v) { Set16(avail_ + 4 + 2ull * size_, v); }
  uint16_t used_idx() { return Get16(used_ + 2); }
  uint16_t used_flags() { return Get16(used_); }
  uint16_t avail_event() { return Get16(used_ + 4 + 8ull * size_); }
  // Whether moving the avail index from old_idx to new_idx kicks, by the
  // used ring's flags or, with EVENT_IDX, its avail_event (the virtio
  // spec's vring_need_event, 2.7.10).
  bool Kicks(bool event_idx, uint16_t old_idx, uint16_t new_idx) {
    if (!event_idx) return (used_flags() & 1) == 0;  // VRING_USED_F_NO_NOTIFY
    return static_cast<uint16_t>(new_idx - avail_event() - 1) <
           static_cast<uint16_t>(new_idx - old_idx);
  }
  std::pair<uint32_t, uint32_t> used_elem(uint16_t i) {
    uint32_t id, len;
    std::memcpy(&id, g_->host(used_ + 4 + 8ull * (i % size_)), 4);
    std::memcpy(&len, g_->host(used_ + 4 + 8ull * (i % size_) + 4), 4);
    return {id, len};
  }

 private:
  uint16_t Get16(uint64_t gpa) {
    uint16_t v;
    std::memcpy(&v, g_->host(gpa), 2);
    return v;
  }
  void Set16(uint64_t gpa, uint16_t v) { std::memcpy(g_->host(gpa), &v, 2); }

  SimpleGuest* g_;
  uint16_t size_;
  uint64_t desc_, avail_, used_;
};

}  // namespace vdev::testing

#endif  // VDEV_TESTS_UNIT_TEST_UTIL_H_
