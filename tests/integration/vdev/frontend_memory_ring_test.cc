// The front-end's own building blocks, without a back-end: guest memory and
// its allocator, and the driver side of a split ring checked against the
// virtio layout (the test plays the device by hand).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#ifndef VIRTIO_RING_NO_LEGACY
#define VIRTIO_RING_NO_LEGACY
#endif
#include <linux/virtio_ring.h>

#include "vdev/frontend/guest_memory.h"
#include "vdev/frontend/split_ring.h"

namespace vdev::frontend {
namespace {

TEST(VdevFrontendMemory, CreateTranslateAndAllocate) {
  GuestMemory mem;
  RegionInfo r;
  ASSERT_TRUE(mem.CreateRegion(1 << 20, true, &r).ok());
  EXPECT_EQ(r.guest_phys_addr, GuestMemory::kFirstGpa);
  EXPECT_EQ(r.size, 1u << 20);
  EXPECT_GE(r.fd, 0);
  // Sealed: nobody can shrink it under the back-end's mapping.
  EXPECT_EQ(fcntl(r.fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
  EXPECT_NE(ftruncate(r.fd, 4096), 0);

  uint64_t gpa = 0;
  void* p = mem.Allocate(100, 256, &gpa);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(mem.Translate(gpa, 100), p);
  uint64_t back = 0;
  ASSERT_TRUE(mem.GpaOf(p, 100, &back));
  EXPECT_EQ(back, gpa);
  // Out of every region, or straddling the end.
  EXPECT_EQ(mem.Translate(r.guest_phys_addr + r.size - 8, 16), nullptr);
  EXPECT_EQ(mem.Translate(UINT64_MAX - 4, 16), nullptr);
  int local = 0;
  EXPECT_FALSE(mem.GpaOf(&local, sizeof(local), &back));

  // The region cannot go while an allocation lives in it.
  EXPECT_FALSE(mem.RemoveRegion(r.guest_phys_addr).ok());
  mem.Free(p);
  EXPECT_EQ(mem.AllocatedBytes(), 0u);
  EXPECT_TRUE(mem.RemoveRegion(r.guest_phys_addr).ok());
  EXPECT_TRUE(mem.Regions().empty());
}

TEST(VdevFrontendMemory, FreeCoalescesSoTheWholeRegionIsReusable) {
  GuestMemory mem;
  ASSERT_TRUE(mem.CreateRegion(64 << 10, true, nullptr).ok());
  std::vector<void*> blocks;
  for (;;) {
    void* p = mem.Allocate(4096, 64, nullptr);
    if (p == nullptr) break;
    blocks.push_back(p);
  }
  ASSERT_EQ(blocks.size(), 16u);
  // Free in an interleaved order to exercise both merge directions.
  for (size_t i = 0; i < blocks.size(); i += 2) mem.Free(blocks[i]);
  for (size_t i = 1; i < blocks.size(); i += 2) mem.Free(blocks[i]);
  EXPECT_NE(mem.Allocate(64 << 10, 4096, nullptr), nullptr);
}

TEST(VdevFrontendMemory, RegionsDoNotOverlapAndNonAllocatableIsSkipped) {
  GuestMemory mem;
  RegionInfo a, b;
  ASSERT_TRUE(mem.CreateRegion(1 << 20, false, &a).ok());
  ASSERT_TRUE(mem.CreateRegion(1 << 20, true, &b).ok());
  EXPECT_GE(b.guest_phys_addr, a.guest_phys_addr + a.size);
  uint64_t gpa = 0;
  ASSERT_NE(mem.Allocate(16, 16, &gpa), nullptr);
  EXPECT_GE(gpa, b.guest_phys_addr);  // only b is allocatable
  EXPECT_FALSE(mem.CreateRegion(4096, true, nullptr, a.guest_phys_addr + 4096).ok());
  EXPECT_FALSE(mem.CreateRegion(4096, true, nullptr, 123).ok());  // misaligned
}

TEST(VdevFrontendMemory, AdoptedMemfdIsSharedWithTheCaller) {
  int fd = memfd_create("arena", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 3 * 4096), 0);
  auto* mine =
      static_cast<uint8_t*>(mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(mine, MAP_FAILED);
  {
    GuestMemory mem;
    RegionInfo r;
    ASSERT_TRUE(mem.AdoptRegion(fd, 4096, 2 * 4096, &r).ok());
    EXPECT_EQ(r.mmap_offset, 4096u);
    EXPECT_NE(r.fd, fd);  // duplicated
    std::memcpy(mine + 4096 + 10, "hello", 5);
    EXPECT_EQ(std::memcmp(mem.Translate(r.guest_phys_addr + 10, 5), "hello", 5), 0);
    EXPECT_EQ(mem.Allocate(16, 16, nullptr), nullptr);  // not allocatable
    EXPECT_FALSE(mem.AdoptRegion(fd, 100, 4096, nullptr).ok());
  }
  // The caller's fd survives the GuestMemory.
  EXPECT_EQ(fcntl(fd, F_GETFD), FD_CLOEXEC);
  munmap(mine, 3 * 4096);
  close(fd);
}

// Plays the device on a SplitRing's memory.
class VdevFrontendRing : public ::testing::Test {
 protected:
  void Make(uint16_t size, bool event_idx, bool indirect) {
    ASSERT_TRUE(mem_.CreateRegion(1 << 20, true, nullptr).ok());
    SplitRing::Options o;
    o.size = size;
    o.event_idx = event_idx;
    o.indirect = indirect;
    ASSERT_TRUE(SplitRing::Create(&mem_, o, &ring_).ok());
    desc_ = reinterpret_cast<vring_desc*>(ring_->desc_user_addr());
    avail_ = reinterpret_cast<vring_avail*>(ring_->avail_user_addr());
    used_ = reinterpret_cast<vring_used*>(ring_->used_user_addr());
  }
  void DeviceComplete(uint16_t head, uint32_t len) {
    used_->ring[used_->idx % ring_->size()] = {head, len};
    __atomic_store_n(&used_->idx, static_cast<uint16_t>(used_->idx + 1), __ATOMIC_RELEASE);
  }
  Buffer Buf(uint32_t len) {
    Buffer b;
    b.len = len;
    EXPECT_NE(mem_.Allocate(len, 16, &b.gpa), nullptr);
    return b;
  }

  GuestMemory mem_;
  std::unique_ptr<SplitRing> ring_;
  vring_desc* desc_ = nullptr;
  vring_avail* avail_ = nullptr;
  vring_used* used_ = nullptr;
};

TEST_F(VdevFrontendRing, LayoutFollowsTheVirtioAlignmentRules) {
  Make(8, true, false);
  EXPECT_EQ(ring_->desc_user_addr() % 16, 0u);
  EXPECT_EQ(ring_->avail_user_addr(), ring_->desc_user_addr() + 16 * 8);
  EXPECT_EQ(ring_->used_user_addr() % 4, 0u);
  EXPECT_GE(ring_->used_user_addr(), ring_->avail_user_addr() + 4 + 2 * 8 + 2);
  // Ring addresses translate back into guest memory.
  uint64_t gpa;
  EXPECT_TRUE(mem_.GpaOf(reinterpret_cast<void*>(ring_->used_user_addr()), 4 + 8 * 8 + 2, &gpa));
}

TEST_F(VdevFrontendRing, ChainIsLinkedReadableFirstAndPublishedOnlyOnPublish) {
  Make(8, false, false);
  Buffer r1 = Buf(10), r2 = Buf(20), w1 = Buf(30);
  Buffer rd[] = {r1, r2};
  uint16_t head = 99;
  ASSERT_TRUE(ring_->AddChain(rd, {&w1, 1}, 42, false, &head).ok());
  EXPECT_EQ(avail_->idx, 0);  // not yet visible
  EXPECT_EQ(ring_->free_descriptors(), 5);

  const vring_desc& d0 = desc_[head];
  EXPECT_EQ(d0.addr, r1.gpa);
  EXPECT_EQ(d0.len, 10u);
  EXPECT_EQ(d0.flags, VRING_DESC_F_NEXT);
  const vring_desc& d1 = desc_[d0.next];
  EXPECT_EQ(d1.addr, r2.gpa);
  EXPECT_EQ(d1.flags, VRING_DESC_F_NEXT);
  const vring_desc& d2 = desc_[d1.next];
  EXPECT_EQ(d2.addr, w1.gpa);
  EXPECT_EQ(d2.len, 30u);
  EXPECT_EQ(d2.flags, VRING_DESC_F_WRITE);

  EXPECT_TRUE(ring_->Publish());  // device did not suppress
  EXPECT_EQ(avail_->idx, 1);
  EXPECT_EQ(avail_->ring[0], head);
  EXPECT_FALSE(ring_->Publish());  // nothing new

  used_->flags = VRING_USED_F_NO_NOTIFY;
  ASSERT_TRUE(ring_->AddChain({&r1, 1}, {}, 43, false, nullptr).ok());
  EXPECT_FALSE(ring_->Publish());  // suppressed by the device

  DeviceComplete(head, 25);
  Completion c[4];
  Status err;
  ASSERT_EQ(ring_->PollUsed(c, 4, &err), 1u);
  EXPECT_TRUE(err.ok());
  EXPECT_EQ(c[0].head, head);
  EXPECT_EQ(c[0].len, 25u);
  EXPECT_EQ(c[0].cookie, 42u);
  EXPECT_EQ(ring_->free_descriptors(), 7);
  EXPECT_EQ(ring_->in_flight(), 1);
}

TEST_F(VdevFrontendRing, FullRingReportsNoSpaceAndRecoversAfterCompletions) {
  Make(4, false, false);
  Buffer b = Buf(8);
  std::vector<uint16_t> heads;
  for (int i = 0; i < 4; ++i) {
    uint16_t h;
    ASSERT_TRUE(ring_->AddChain({&b, 1}, {}, i, false, &h).ok());
    heads.push_back(h);
  }
  uint16_t h;
  EXPECT_EQ(ring_->AddChain({&b, 1}, {}, 9, false, &h).code(), Status::Code::kNoSpace);
  Buffer five[5] = {b, b, b, b, b};
  EXPECT_EQ(ring_->AddChain(five, {}, 9, false, &h).code(), Status::Code::kInvalidArgument);
  ring_->Publish();
  DeviceComplete(heads[2], 0);
  Completion c[4];
  Status err;
  ASSERT_EQ(ring_->PollUsed(c, 4, &err), 1u);
  EXPECT_EQ(c[0].cookie, 2u);
  EXPECT_TRUE(ring_->AddChain({&b, 1}, {}, 10, false, &h).ok());
  EXPECT_EQ(h, heads[2]);
}

TEST_F(VdevFrontendRing, IndirectChainUsesOneDescriptorAndATable) {
  Make(8, false, true);
  Buffer r = Buf(16), w1 = Buf(32), w2 = Buf(64);
  Buffer wr[] = {w1, w2};
  const size_t before = mem_.AllocatedBytes();
  uint16_t head;
  ASSERT_TRUE(ring_->AddChain({&r, 1}, wr, 1, true, &head).ok());
  EXPECT_EQ(ring_->free_descriptors(), 7);
  const vring_desc& d = desc_[head];
  EXPECT_EQ(d.flags, VRING_DESC_F_INDIRECT);
  EXPECT_EQ(d.len, 3 * sizeof(vring_desc));
  const auto* table = reinterpret_cast<const vring_desc*>(mem_.Translate(d.addr, d.len));
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table[0].addr, r.gpa);
  EXPECT_EQ(table[0].flags, VRING_DESC_F_NEXT);
  EXPECT_EQ(table[0].next, 1);
  EXPECT_EQ(table[1].flags, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE);
  EXPECT_EQ(table[2].flags, VRING_DESC_F_WRITE);
  EXPECT_EQ(table[2].len, 64u);
  EXPECT_GT(mem_.AllocatedBytes(), before);
  ring_->Publish();
  DeviceComplete(head, 96);
  Completion c;
  Status err;
  ASSERT_EQ(ring_->PollUsed(&c, 1, &err), 1u);
  EXPECT_EQ(mem_.AllocatedBytes(), before);  // table freed
}

TEST_F(VdevFrontendRing, EventIdxDecidesKicksAndArmsUsedEvent) {
  Make(8, true, false);
  Buffer b = Buf(8);
  auto* avail_event = reinterpret_cast<uint16_t*>(&used_->ring[8]);
  auto* used_event = &avail_->ring[8];
  *avail_event = 0;  // device wants a kick when entry 0 is made available
  ASSERT_TRUE(ring_->AddChain({&b, 1}, {}, 0, false, nullptr).ok());
  EXPECT_TRUE(ring_->Publish());
  *avail_event = 5;  // device says: no kick until idx passes 5
  ASSERT_TRUE(ring_->AddChain({&b, 1}, {}, 1, false, nullptr).ok());
  EXPECT_FALSE(ring_->Publish());

  EXPECT_FALSE(ring_->EnableNotifications());
  EXPECT_EQ(*used_event, 0);
  DeviceComplete(0, 0);
  Completion c[2];
  Status err;
  ASSERT_EQ(ring_->PollUsed(c, 2, &err), 1u);
  EXPECT_EQ(*used_event, 1);  // next completion should interrupt
  ring_->DisableNotifications();
  EXPECT_EQ(*used_event, static_cast<uint16_t>(1 + 0x8000));
}

TEST_F(VdevFrontendRing, BogusUsedEntriesAreProtocolErrors) {
  Make(8, false, false);
  Buffer r = Buf(8), w = Buf(8);
  uint16_t head;
  ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, 0, false, &head).ok());
  ring_->Publish();
  Completion c;
  Status err;
  DeviceComplete(static_cast<uint16_t>(head + 1), 0);  // not a head in flight
  EXPECT_EQ(ring_->PollUsed(&c, 1, &err), 0u);
  EXPECT_EQ(err.code(), Status::Code::kProtocolError);

  Make(8, false, false);
  ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, 0, false, &head).ok());
  ring_->Publish();
  DeviceComplete(head, 9);  // more than the 8 writable bytes
  err = Status();
  EXPECT_EQ(ring_->PollUsed(&c, 1, &err), 0u);
  EXPECT_EQ(err.code(), Status::Code::kProtocolError);

  Make(8, false, false);
  ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, 0, false, &head).ok());
  ring_->Publish();
  used_->idx = 5;  // more used entries than chains in flight
  err = Status();
  EXPECT_EQ(ring_->PollUsed(&c, 1, &err), 0u);
  EXPECT_EQ(err.code(), Status::Code::kProtocolError);
}

TEST_F(VdevFrontendRing, ZeroLengthAndEmptyChainsAreRefused) {
  Make(8, false, false);
  Buffer z{0, 0};
  uint16_t h;
  EXPECT_EQ(ring_->AddChain({&z, 1}, {}, 0, false, &h).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ring_->AddChain(std::span<const Buffer>(), {}, 0, false, &h).code(),
            Status::Code::kInvalidArgument);
}

// The descriptors of the chain at head, following NEXT links.
std::vector<uint16_t> ChainDescriptors(const vring_desc* desc, uint16_t head) {
  std::vector<uint16_t> out{head};
  while ((desc[out.back()].flags & VRING_DESC_F_NEXT) && out.size() < 64) {
    out.push_back(desc[out.back()].next);
  }
  return out;
}

TEST_F(VdevFrontendRing, RepostedBuffersGetTheirDescriptorsBackInOrder) {
  Make(8, false, false);
  Buffer r[3] = {Buf(8), Buf(8), Buf(8)}, w[3] = {Buf(16), Buf(16), Buf(16)};
  uint16_t first[3];
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ring_->AddChain({&r[i], 1}, {&w[i], 1}, i, false, &first[i]).ok());
  }
  ring_->PublishPolled();
  EXPECT_EQ(avail_->idx, 3);
  for (int i = 0; i < 3; ++i) DeviceComplete(first[i], 16);
  Completion c[8];
  Status err;
  ASSERT_EQ(ring_->PollUsed(c, 8, &err), 3u);
  ASSERT_TRUE(err.ok());
  // Completed in order and posted again: the same heads, the same links.
  for (int i = 0; i < 3; ++i) {
    uint16_t h;
    ASSERT_TRUE(ring_->AddChain({&r[i], 1}, {&w[i], 1}, 10 + i, false, &h).ok());
    EXPECT_EQ(h, first[i]);
    std::vector<uint16_t> d = ChainDescriptors(desc_, h);
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(desc_[d[0]].addr, r[i].gpa);
    EXPECT_EQ(desc_[d[0]].flags, VRING_DESC_F_NEXT);
    EXPECT_EQ(desc_[d[1]].addr, w[i].gpa);
    EXPECT_EQ(desc_[d[1]].len, 16u);
    EXPECT_EQ(desc_[d[1]].flags, VRING_DESC_F_WRITE);
  }
  ring_->PublishPolled();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(avail_->ring[3 + i], first[i]);
}

// AddChains is AddChain in a loop, only cheaper: a second ring fed the same
// chains one at a time must end up byte for byte the same.
TEST_F(VdevFrontendRing, AddChainsLaysOutWhatAddChainWouldOneByOne) {
  Make(16, false, false);
  GuestMemory other_mem;
  ASSERT_TRUE(other_mem.CreateRegion(1 << 20, true, nullptr).ok());
  std::unique_ptr<SplitRing> other;
  SplitRing::Options o;
  o.size = 16;
  ASSERT_TRUE(SplitRing::Create(&other_mem, o, &other).ok());

  Buffer a = Buf(8), b = Buf(16), c = Buf(24), d = Buf(32);
  Buffer rr[] = {a, b}, ww[] = {c, d};
  // Every shape: the usual one-each-way chain, readable only, writable
  // only, and several buffers on either side.
  const std::vector<ChainBuffers> chains = {
      {{&a, 1}, {&b, 1}, 100}, {{&c, 1}, {}, 101},      {{}, {&d, 1}, 102},
      {rr, ww, 103},           {{&b, 1}, {&a, 1}, 104},
  };
  size_t added = 0;
  ASSERT_TRUE(ring_->AddChains(chains, &added).ok());
  EXPECT_EQ(added, chains.size());
  std::vector<uint16_t> heads;
  for (const ChainBuffers& ch : chains) {
    uint16_t h;
    ASSERT_TRUE(other->AddChain(ch.readable, ch.writable, ch.cookie, false, &h).ok());
    heads.push_back(h);
  }
  EXPECT_EQ(ring_->in_flight(), other->in_flight());
  EXPECT_EQ(ring_->free_descriptors(), other->free_descriptors());
  EXPECT_EQ(ring_->avail_idx(), other->avail_idx());
  ring_->PublishPolled();
  other->PublishPolled();
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(ring_->desc_user_addr()),
                        reinterpret_cast<void*>(other->desc_user_addr()), 16 * sizeof(vring_desc)),
            0);
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(ring_->avail_user_addr()),
                        reinterpret_cast<void*>(other->avail_user_addr()), 4 + 2 * 16),
            0);

  // Completions carry each chain's cookie and respect its writable bytes.
  DeviceComplete(heads[3], 56);
  DeviceComplete(heads[0], 16);
  Completion got[8];
  Status err;
  ASSERT_EQ(ring_->PollUsed(got, 8, &err), 2u);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(got[0].cookie, 103u);
  EXPECT_EQ(got[0].len, 56u);
  EXPECT_EQ(got[1].cookie, 100u);
  DeviceComplete(heads[1], 1);  // readable only: nothing may be written
  EXPECT_EQ(ring_->PollUsed(got, 8, &err), 0u);
  EXPECT_EQ(err.code(), Status::Code::kProtocolError);
}

TEST_F(VdevFrontendRing, AddChainsStopsAtTheFirstChainAddChainWouldRefuse) {
  Make(8, false, false);
  Buffer r = Buf(8), w = Buf(8), empty{r.gpa, 0};
  const std::vector<ChainBuffers> chains = {
      {{&r, 1}, {&w, 1}, 1},
      {{&r, 1}, {&w, 1}, 2},
      {{&r, 1}, {&empty, 1}, 3},  // refused: a zero-length buffer
      {{&r, 1}, {&w, 1}, 4},
  };
  size_t added = 99;
  EXPECT_EQ(ring_->AddChains(chains, &added).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(added, 2u);
  EXPECT_EQ(ring_->in_flight(), 2);
  EXPECT_EQ(ring_->free_descriptors(), 4);
  ring_->PublishPolled();
  EXPECT_EQ(avail_->idx, 2);

  // The refused chain left nothing behind: the rest of the ring still takes
  // exactly two more such chains, then reports that it is full, mid-batch.
  const std::vector<ChainBuffers> more(3, ChainBuffers{{&r, 1}, {&w, 1}, 5});
  EXPECT_EQ(ring_->AddChains(more, &added).code(), Status::Code::kNoSpace);
  EXPECT_EQ(added, 2u);
  EXPECT_EQ(ring_->free_descriptors(), 0);
  ring_->PublishPolled();
  EXPECT_EQ(avail_->idx, 4);
  for (uint16_t i = 0; i < 4; ++i) {
    EXPECT_EQ(ChainDescriptors(desc_, avail_->ring[i]).size(), 2u);
  }
  // Nothing at all to add is not an error.
  EXPECT_TRUE(ring_->AddChains({}, &added).ok());
  EXPECT_EQ(added, 0u);
}

TEST_F(VdevFrontendRing, OutOfOrderCompletionsKeepTheFreeListWhole) {
  Make(8, false, false);
  Buffer r = Buf(8), w = Buf(8);
  uint16_t heads[4];
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, i, false, &heads[i]).ok());
  }
  EXPECT_EQ(ring_->free_descriptors(), 0);
  ring_->PublishPolled();
  for (int i : {2, 0, 3}) DeviceComplete(heads[i], 0);
  Completion c[8];
  Status err;
  ASSERT_EQ(ring_->PollUsed(c, 2, &err), 2u);  // two now, one later
  ASSERT_EQ(ring_->PollUsed(c, 8, &err), 1u);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(ring_->free_descriptors(), 6);
  // Refill the ring: every chain gets descriptors no other chain in flight uses.
  std::vector<uint16_t> in_flight = {heads[1]};
  for (int i = 0; i < 3; ++i) {
    uint16_t h;
    ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, 20 + i, false, &h).ok());
    in_flight.push_back(h);
  }
  uint16_t h;
  EXPECT_EQ(ring_->AddChain({&r, 1}, {}, 9, false, &h).code(), Status::Code::kNoSpace);
  std::vector<uint16_t> all;
  for (uint16_t head : in_flight) {
    std::vector<uint16_t> d = ChainDescriptors(desc_, head);
    EXPECT_EQ(d.size(), 2u);
    all.insert(all.end(), d.begin(), d.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 8u);
}

TEST_F(VdevFrontendRing, DescriptorTheDeviceScribbledOnIsWrittenAgain) {
  Make(8, false, false);
  Buffer r = Buf(8), w = Buf(24);
  uint16_t head;
  ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, 0, false, &head).ok());
  ring_->PublishPolled();
  DeviceComplete(head, 0);
  Completion c;
  Status err;
  ASSERT_EQ(ring_->PollUsed(&c, 1, &err), 1u);
  // A hostile device rewrites the now free descriptors.
  std::vector<uint16_t> d = ChainDescriptors(desc_, head);
  ASSERT_EQ(d.size(), 2u);
  desc_[d[0]].addr = 0xdead0000;
  desc_[d[1]].len = 1;
  desc_[d[1]].flags = VRING_DESC_F_INDIRECT;
  avail_->ring[1] = static_cast<uint16_t>(head + 1);  // the slot the next chain takes
  uint16_t again;
  ASSERT_TRUE(ring_->AddChain({&r, 1}, {&w, 1}, 1, false, &again).ok());
  EXPECT_EQ(again, head);
  EXPECT_EQ(desc_[d[0]].addr, r.gpa);
  EXPECT_EQ(desc_[d[0]].len, 8u);
  EXPECT_EQ(desc_[d[0]].flags, VRING_DESC_F_NEXT);
  EXPECT_EQ(desc_[d[0]].next, d[1]);
  EXPECT_EQ(desc_[d[1]].addr, w.gpa);
  EXPECT_EQ(desc_[d[1]].len, 24u);
  EXPECT_EQ(desc_[d[1]].flags, VRING_DESC_F_WRITE);
  // The avail slot is written again too when it names another head.
  ring_->PublishPolled();
  EXPECT_EQ(avail_->ring[1], head);
  EXPECT_EQ(avail_->idx, 2);
}

TEST_F(VdevFrontendRing, RefusedChainLeavesTheRingAsItWas) {
  Make(8, false, false);
  Buffer r = Buf(8), w = Buf(8), z{w.gpa, 0};
  Buffer wr[] = {w, z};
  uint16_t h = 77;
  EXPECT_EQ(ring_->AddChain({&r, 1}, wr, 0, false, &h).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h, 77);
  EXPECT_EQ(ring_->free_descriptors(), 8);
  EXPECT_EQ(ring_->in_flight(), 0);
  EXPECT_EQ(ring_->avail_idx(), 0);
  // The ring still works and all eight descriptors are still there.
  Buffer eight[8] = {r, r, r, r, r, r, r, w};
  ASSERT_TRUE(ring_->AddChain(std::span<const Buffer>(eight, 7), {&w, 1}, 1, false, &h).ok());
  EXPECT_EQ(ChainDescriptors(desc_, h).size(), 8u);
  EXPECT_EQ(ring_->free_descriptors(), 0);
}

}  // namespace
}  // namespace vdev::frontend
