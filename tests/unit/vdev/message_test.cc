#include "vdev/message.h"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>

#include "gtest/gtest.h"
#include "test_util.h"

namespace vdev {
namespace {

using testing::FdIsOpen;

std::vector<uint8_t> Raw(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
                         uint32_t header_size) {
  vu::Header h{request, flags, header_size};
  std::vector<uint8_t> out(sizeof(h) + size);
  std::memcpy(out.data(), &h, sizeof(h));
  if (size) std::memcpy(out.data() + sizeof(h), payload, size);
  return out;
}

Message Make(uint32_t request, const void* payload, uint32_t size, int nfds = 0) {
  Message m;
  m.header = {request, vu::kVersion, size};
  if (size) std::memcpy(m.payload, payload, std::min<uint32_t>(size, vu::kMaxPayload));
  for (int i = 0; i < nfds; ++i) m.fds.emplace_back(eventfd(0, EFD_CLOEXEC));
  return m;
}

TEST(VdevMessageReader, ReassemblesAMessageFedOneByteAtATime) {
  vu::VringState st{3, 256};
  auto bytes =
      Raw(vu::kSetVringNum, vu::kVersion | vu::kFlagNeedReply, &st, sizeof(st), sizeof(st));
  MessageReader r;
  EXPECT_EQ(r.Want(), sizeof(vu::Header));
  for (size_t i = 0; i < bytes.size(); ++i) {
    ASSERT_FALSE(r.Ready());
    ASSERT_GE(r.Want(), 1u);
    ASSERT_EQ(r.Feed(&bytes[i], 1, nullptr), "");
  }
  ASSERT_TRUE(r.Ready());
  EXPECT_EQ(r.Want(), 0u);
  Message m = r.Take();
  EXPECT_EQ(m.request(), vu::kSetVringNum);
  EXPECT_TRUE(m.need_reply());
  EXPECT_EQ(m.Get<vu::VringState>().num, 256u);
  EXPECT_FALSE(r.Ready());
  EXPECT_EQ(r.Want(), sizeof(vu::Header));
}

TEST(VdevMessageReader, EmptyPayloadIsReadyAfterTheHeader) {
  auto bytes = Raw(vu::kGetFeatures, vu::kVersion, nullptr, 0, 0);
  MessageReader r;
  ASSERT_EQ(r.Feed(bytes.data(), bytes.size(), nullptr), "");
  EXPECT_TRUE(r.Ready());
}

TEST(VdevMessageReader, FdsTravelWithTheirMessage) {
  auto bytes = Raw(vu::kSetVringKick, vu::kVersion, "\0\0\0\0\0\0\0\0", 8, 8);
  MessageReader r;
  std::vector<UniqueFd> fds;
  fds.emplace_back(eventfd(0, EFD_CLOEXEC));
  int raw = fds[0].get();
  ASSERT_EQ(r.Feed(bytes.data(), sizeof(vu::Header), &fds), "");
  EXPECT_TRUE(fds.empty());
  ASSERT_EQ(r.Feed(bytes.data() + sizeof(vu::Header), 8, nullptr), "");
  Message m = r.Take();
  ASSERT_EQ(m.fds.size(), 1u);
  EXPECT_EQ(m.fds[0].get(), raw);
}

TEST(VdevMessageReader, BadHeadersEndTheStream) {
  struct Case {
    const char* name;
    uint32_t flags;
    uint32_t size;
  } cases[] = {
      {"version 0", 0, 0},
      {"version 2", 2, 0},
      {"reply flag from the front-end", vu::kVersion | vu::kFlagReply, 0},
      {"oversized payload", vu::kVersion, vu::kMaxPayload + 1},
      {"huge payload", vu::kVersion, 0xffffffffu},
  };
  for (const Case& c : cases) {
    auto bytes = Raw(vu::kSetOwner, c.flags, nullptr, 0, c.size);
    MessageReader r;
    EXPECT_NE(r.Feed(bytes.data(), bytes.size(), nullptr), "") << c.name;
  }
}

TEST(VdevMessageReader, ExcessFdsAreRefusedAndClosed) {
  MessageReader r;
  std::vector<UniqueFd> fds;
  std::vector<int> raw;
  for (uint32_t i = 0; i < vu::kMaxFds + 1; ++i) {
    fds.emplace_back(eventfd(0, EFD_CLOEXEC));
    raw.push_back(fds.back().get());
  }
  auto bytes = Raw(vu::kSetOwner, vu::kVersion, nullptr, 0, 0);
  EXPECT_NE(r.Feed(bytes.data(), 4, &fds), "");
  for (int fd : raw) EXPECT_FALSE(FdIsOpen(fd));
}

TEST(VdevValidateMessage, PayloadSizesAndFdCounts) {
  uint64_t u64 = 0;
  vu::VringState st{0, 0};
  vu::VringAddr addr{};
  EXPECT_EQ(ValidateMessage(Make(vu::kGetFeatures, nullptr, 0)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kGetFeatures, &u64, 8)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kGetFeatures, nullptr, 0, 1)), "");  // unexpected fd
  EXPECT_EQ(ValidateMessage(Make(vu::kSetFeatures, &u64, 8)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetFeatures, &u64, 4)), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kSetVringNum, &st, sizeof(st))), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringNum, &st, 4)), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kGetVringBase, &st, sizeof(st))), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kSetVringAddr, &addr, sizeof(addr))), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringAddr, &addr, 32)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringAddr, &addr, sizeof(addr), 1)), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kSetBackendReqFd, nullptr, 0, 1)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetBackendReqFd, nullptr, 0, 0)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetBackendReqFd, nullptr, 0, 2)), "");
}

TEST(VdevValidateMessage, VringFdMessages) {
  uint64_t v = 2;
  EXPECT_EQ(ValidateMessage(Make(vu::kSetVringKick, &v, 8, 1)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringKick, &v, 8, 0)), "");  // fd missing
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringCall, &v, 8, 2)), "");  // excess fd
  v = 2 | vu::kVringNoFd;
  EXPECT_EQ(ValidateMessage(Make(vu::kSetVringCall, &v, 8, 0)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringErr, &v, 8, 1)), "");  // NOFD yet an fd
  v = 1ull << 9;
  EXPECT_NE(ValidateMessage(Make(vu::kSetVringKick, &v, 8, 1)), "");  // unknown bits
}

TEST(VdevValidateMessage, MemoryTables) {
  uint8_t payload[vu::kMaxPayload] = {};
  auto set_n = [&](uint32_t n) { std::memcpy(payload, &n, 4); };
  set_n(2);
  EXPECT_EQ(ValidateMessage(Make(vu::kSetMemTable, payload, 8 + 64, 2)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetMemTable, payload, 8 + 64, 1)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetMemTable, payload, 8 + 96, 2)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kSetMemTable, payload, 4, 0)), "");
  set_n(0);
  EXPECT_NE(ValidateMessage(Make(vu::kSetMemTable, payload, 8, 0)), "");
  set_n(9);
  EXPECT_NE(ValidateMessage(Make(vu::kSetMemTable, payload, 8 + 9 * 32, 8)), "");
  set_n(0xffffffffu);
  EXPECT_NE(ValidateMessage(Make(vu::kSetMemTable, payload, 8, 0)), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kAddMemReg, payload, 40, 1)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kAddMemReg, payload, 40, 0)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kAddMemReg, payload, 32, 1)), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kRemMemReg, payload, 40, 0)), "");
  EXPECT_EQ(ValidateMessage(Make(vu::kRemMemReg, payload, 40, 1)), "");  // fd closed, not refused
}

TEST(VdevValidateMessage, ConfigMessages) {
  uint8_t payload[vu::kMaxPayload] = {};
  vu::ConfigHeader h{0, 8, 0};
  std::memcpy(payload, &h, sizeof(h));
  EXPECT_EQ(ValidateMessage(Make(vu::kGetConfig, payload, 12 + 8)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kGetConfig, payload, 12 + 7)), "");
  EXPECT_NE(ValidateMessage(Make(vu::kGetConfig, payload, 8)), "");
  h.size = 257;
  std::memcpy(payload, &h, sizeof(h));
  EXPECT_NE(ValidateMessage(Make(vu::kSetConfig, payload, vu::kMaxPayload)), "");
}

TEST(VdevValidateMessage, UnknownRequestsAreRefused) {
  for (uint32_t r : {0u, 6u, 7u, 22u, 31u, 32u, 35u, 44u, 1000u}) {
    EXPECT_NE(ValidateMessage(Make(r, nullptr, 0)), "") << r;
  }
}

TEST(VdevMessage, RepliesCarryExactlyVersionAndReplyFlags) {
  auto reply = MakeU64Reply(vu::kGetFeatures, 42);
  ASSERT_EQ(reply.size(), sizeof(vu::Header) + 8);
  vu::Header h;
  std::memcpy(&h, reply.data(), sizeof(h));
  EXPECT_EQ(h.flags, 0x5u);
  EXPECT_EQ(h.request, vu::kGetFeatures);
  EXPECT_EQ(h.size, 8u);
  uint64_t v;
  std::memcpy(&v, reply.data() + sizeof(h), 8);
  EXPECT_EQ(v, 42u);
}

}  // namespace
}  // namespace vdev
