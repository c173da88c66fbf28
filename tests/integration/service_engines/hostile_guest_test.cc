// A hostile guest against the real daemon with every engine attached: tenant
// "mallory" sends thousands of seeded, half-valid requests of every opcode
// family (regions, communicators, collectives, checkpoints, events, topology,
// negotiation, hints) with arguments built from values that reach deep into
// the handlers: her own and another tenant's region ids and streams, zero,
// one, huge lengths, overlapping slices. Tenant "alice" keeps working beside
// her. The test asserts what a tenant relies on:
//  - every request of mallory's is answered, none hangs (collectives and
//    communicator set-up, which wait for peers by design, are exempt);
//  - the daemon never dies and its control socket keeps answering;
//  - none of alice's bytes or checkpoint steps ever reaches mallory's memory
//    or results, and alice's checkpoint restores bit-exact throughout;
//  - the daemon still stops cleanly at the end.
// The seed and request count come from HZ_HOSTILE_SEED and
// HZ_HOSTILE_REQUESTS; a failure prints the seed to reproduce it.
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hz_client.h"
#include "protocol/harmonaize_opcodes.h"
#include "provider_host.h"

namespace {

using hz::testing::GuestBuffer;
using hz::testing::HzClient;
using hz::testing::ProviderHost;
using hz::testing::Reply;

constexpr uint16_t kReq = HZ_VQ_REQUEST_BASE;
constexpr uint32_t kAliceStream = 7;
constexpr uint32_t kMalloryStream = 3;
// Values mallory's arguments are never built from, so finding one in her
// results or memory can only mean it came from alice.
constexpr uint64_t kAliceStep = 0x5eed5eed12345ull;
constexpr char kAliceMagic[] = "ALICE-ONLY-BYTES";  // 16 bytes without the NUL
constexpr uint64_t kAliceBytes = 256 * 1024;
constexpr uint64_t kScratchBytes = 4ull << 20;
constexpr auto kHang = std::chrono::milliseconds(10000);  // only detects hangs

// An answer that only a handler looking at the request's content gives.
bool PastTheChecks(uint32_t status) {
  return status != HZ_S_EINVAL && status != HZ_S_ENOTSUP && status != HZ_S_EQUEUE &&
         status != HZ_S_ESTATE && status != HZ_S_EVERSION;
}

// Requests that wait for peers by design; an unanswered one is not a hang.
bool MayWaitForPeers(uint16_t opcode) {
  return opcode == HZ_OP_COMM_INIT || (opcode >= HZ_OP_ALLREDUCE && opcode <= HZ_OP_BARRIER);
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

bool Contains(const uint8_t* p, size_t n, const void* needle, size_t len) {
  if (n < len) return false;
  for (size_t i = 0; i + len <= n; ++i) {
    if (std::memcmp(p + i, needle, len) == 0) return true;
  }
  return false;
}

struct Request {
  uint16_t opcode = 0;
  uint16_t queue = HZ_VQ_CONTROL;
  std::vector<uint8_t> args, data;
};

// Builds half-valid arguments and data from values that matter to handlers,
// or mutates a few words of a request that succeeded before.
class Mutator {
 public:
  Mutator(uint64_t seed, uint32_t other_region, uint64_t scratch_gpa)
      : rng_(seed), other_(other_region), scratch_gpa_(scratch_gpa) {}
  // The session's own objects; a new HELLO ends them and makes new ones.
  void SetSession(uint32_t own_region, uint64_t comm) {
    own_ = own_region;
    comm_ = comm;
  }

  uint32_t Word() {
    if (Pick(3) == 0) return 0;  // reserved fields and flags must be zero
    switch (Pick(14)) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
        return Pick(17);
      case 3:
        return own_;
      case 4:
        return other_;
      case 5:
        return kAliceStream;
      case 6:
        return 0xffffffffu;
      case 7:
        return 0x80000000u;
      case 8:
        return 4096;
      case 9:
        return 1u << 20;
      case 10:
        return static_cast<uint32_t>(scratch_gpa_ + Pick(1 << 16));
      case 11:
        return Pick(2) ? static_cast<uint32_t>(comm_) : static_cast<uint32_t>(comm_ >> 32);
      case 12:
        return Pick(2) ? kMalloryStream : 0xffffu;
      default:
        return static_cast<uint32_t>(rng_());
    }
  }
  // args_len bytes: the first `fill` are words, the rest zero (longer
  // arguments must end in zeros, so this reaches past the length check).
  std::vector<uint8_t> Args(uint16_t opcode) {
    auto known = lengths_.find(opcode);
    size_t len = known != lengths_.end() && Pick(4) != 0 ? known->second : 4 * Pick(17);
    std::vector<uint8_t> a(len);
    size_t fill = Pick(8) == 0 ? 4 * Pick(len / 4 + 1) : len;
    for (size_t i = 0; i + 4 <= fill; i += 4) {
      uint32_t w = Word();
      std::memcpy(a.data() + i, &w, 4);
    }
    return a;
  }
  // Slices, extents or random bytes.
  std::vector<uint8_t> Data() {
    std::vector<uint8_t> d;
    if (Pick(2) == 0) return d;  // most opcodes take no data
    const uint32_t kind = Pick(4);
    const uint32_t n = Pick(9);
    for (uint32_t i = 0; i < n; ++i) {
      if (kind == 0) {  // hz_slice
        hz_slice s{};
        s.region_id = Pick(3) == 0 ? other_ : own_;
        s.offset = Pick(2) ? Pick(1 << 16) : (uint64_t{Word()} << (Pick(2) * 32));
        s.length = Pick(2) ? 1 + Pick(1 << 16) : (uint64_t{Word()} << (Pick(2) * 32));
        Append(&d, &s, sizeof(s));
      } else if (kind == 1) {  // hz_extent
        hz_extent e{};
        e.gpa = Pick(4) ? scratch_gpa_ + Pick(kScratchBytes) : (uint64_t{Word()} << 12);
        e.len = Pick(3) ? 1 + Pick(1 << 16) : uint64_t{Word()};
        Append(&d, &e, sizeof(e));
      } else {
        uint32_t w = Word();
        Append(&d, &w, sizeof(w));
      }
    }
    return d;
  }
  Request Next() {
    Request r;
    r.opcode = Opcode();
    auto it = corpus_.find(r.opcode);
    if (it != corpus_.end() && Pick(2) == 0) {
      r = it->second[Pick(it->second.size())];
      for (uint32_t n = 1 + Pick(3); n > 0; --n) Mutate(Pick(2) ? &r.args : &r.data);
      if (Pick(8) == 0) {  // a slice more, or a few bytes less
        size_t grown = r.data.size() + sizeof(hz_slice) * Pick(2);
        r.data.resize(grown - std::min<size_t>(grown, Pick(9)));
      }
      return r;
    }
    r.queue = Queue(r.opcode);
    r.args = Args(r.opcode);
    r.data = Data();
    return r;
  }
  uint16_t Opcode() {
    if (Pick(50) == 0) return static_cast<uint16_t>(rng_());  // unknown opcodes too
    return hz_opcode_names[Pick(HZ_NUM_OPCODES)].opcode;
  }
  uint16_t Queue(uint16_t opcode) {
    auto it = queues_.find(opcode);
    if (it != queues_.end() && Pick(16) != 0) return it->second;
    return Pick(2) ? HZ_VQ_CONTROL : kReq;
  }
  // What an answer taught: the queue an opcode belongs on, and argument
  // length that got past the length check, so later requests go deeper.
  void Learn(const Request& r, uint32_t status) {
    const uint16_t opcode = r.opcode, queue = r.queue;
    const size_t args_len = r.args.size();
    if (status == HZ_S_OK && corpus_[opcode].size() < 8) corpus_[opcode].push_back(r);
    if (status == HZ_S_EQUEUE) {
      queues_[opcode] = queue == HZ_VQ_CONTROL ? kReq : HZ_VQ_CONTROL;
      return;
    }
    queues_[opcode] = queue;
    if (!PastTheChecks(status)) return;
    auto known = lengths_.find(opcode);
    if (known == lengths_.end() || args_len < known->second) lengths_[opcode] = args_len;
  }
  uint32_t ResultSpace() {
    const uint32_t sizes[] = {0, 4, 8, 24, 64, 4096};
    return sizes[Pick(std::size(sizes))];
  }
  uint32_t Pick(size_t n) { return static_cast<uint32_t>(rng_() % n); }

 private:
  void Mutate(std::vector<uint8_t>* b) {
    if (b->size() < 4) return;
    uint32_t w = Word();
    std::memcpy(b->data() + 4 * Pick(b->size() / 4), &w, 4);
  }
  static void Append(std::vector<uint8_t>* d, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    d->insert(d->end(), b, b + n);
  }
  std::mt19937_64 rng_;
  uint32_t own_ = 0, other_;
  uint64_t comm_ = 0;
  uint64_t scratch_gpa_;
  std::map<uint16_t, uint16_t> queues_;
  std::map<uint16_t, size_t> lengths_;               // the shortest that got past the checks
  std::map<uint16_t, std::vector<Request>> corpus_;  // requests that succeeded
};

class HostileGuest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.Start());
    alice_socks_ = host_.svc().TenantWithVms("alice", 1);
    mallory_socks_ = host_.svc().TenantWithVms("mallory", 1);
    ASSERT_EQ(alice_socks_.size(), 1u);
    ASSERT_EQ(mallory_socks_.size(), 1u);
    ASSERT_TRUE(alice_.Connect(alice_socks_[0]));
    ASSERT_EQ(alice_.Hello(~0ull), HZ_S_OK);
    ASSERT_EQ(alice_.Register(kAliceBytes, 3, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &secret_),
              HZ_S_OK);
    ASSERT_EQ(alice_.Register(kAliceBytes, 1, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &restored_),
              HZ_S_OK);
    std::vector<uint8_t> bytes(kAliceBytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = kAliceMagic[i % 16];
    secret_.Write(0, bytes.data(), bytes.size());
    hz_ckpt_policy_args p{};
    p.stream = kAliceStream;
    p.retention = 2;
    p.tier = HZ_TIER_HOST_MEMORY;
    p.stall_budget_ms = 1000;
    ASSERT_EQ(alice_.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_POLICY, p).status, HZ_S_OK);
    hz_ckpt_save_args s{};
    s.stream = kAliceStream;
    s.num_slices = 1;
    s.step = kAliceStep;
    hz_slice all = hz::testing::SliceOf(secret_, 0, kAliceBytes);
    ASSERT_EQ(alice_.Call(kReq, HZ_OP_CKPT_SAVE, &s, sizeof(s), &all, sizeof(all)).status, HZ_S_OK);
  }

  // Alice's service is intact: her checkpoint restores bit-exact and the
  // topology call answers.
  void CheckAlice(const char* when) {
    SCOPED_TRACE(when);
    std::vector<uint8_t> zero(kAliceBytes, 0);
    restored_.Write(0, zero.data(), zero.size());
    hz_ckpt_restore_args r{};
    r.stream = kAliceStream;
    r.num_slices = 1;
    r.step = kAliceStep;
    hz_slice to = hz::testing::SliceOf(restored_, 0, kAliceBytes);
    ASSERT_EQ(alice_.Call(kReq, HZ_OP_CKPT_RESTORE, &r, sizeof(r), &to, sizeof(to)).status,
              HZ_S_OK);
    std::vector<uint8_t> want(kAliceBytes), got(kAliceBytes);
    secret_.Read(0, want.data(), want.size());
    restored_.Read(0, got.data(), got.size());
    EXPECT_EQ(want, got) << "alice's checkpoint changed";
    EXPECT_EQ(alice_.Call(HZ_VQ_CONTROL, HZ_OP_TOPOLOGY_GET, nullptr, 0, nullptr, 0, 4096).status,
              HZ_S_OK);
    EXPECT_TRUE(host_.Control({{"cmd", "tenant.list"}}).value("ok", false));
  }

  static Reply Send(HzClient& c, const Request& q, uint32_t result_space) {
    return c.Wait(q.queue,
                  c.Post(q.queue, q.opcode, q.args.data(), static_cast<uint32_t>(q.args.size()),
                         q.data.data(), static_cast<uint32_t>(q.data.size()), result_space),
                  kHang);
  }
  // Sends a well-formed request on whichever queue takes it and adds it to
  // the mutator's corpus when it succeeds; its status.
  template <typename A>
  static uint32_t Seed(HzClient& c, Mutator* m, uint16_t opcode, const A& args,
                       const std::vector<hz_slice>& slices = {}) {
    Request q;
    q.opcode = opcode;
    const auto* a = reinterpret_cast<const uint8_t*>(&args);
    q.args.assign(a, a + sizeof(A));
    const auto* d = reinterpret_cast<const uint8_t*>(slices.data());
    q.data.assign(d, d + slices.size() * sizeof(hz_slice));
    uint32_t status = HZ_S_EQUEUE;
    for (uint16_t queue : {uint16_t{HZ_VQ_CONTROL}, kReq}) {
      if (status != HZ_S_EQUEUE) break;
      q.queue = queue;
      status = Send(c, q, 4096).status;
      m->Learn(q, status);
    }
    return status;
  }

  // Mallory's session: every feature, a region, a communicator of one rank
  // and a checkpoint stream of her own, so requests get past the lookups.
  void StartSession(HzClient& mallory, Mutator* m) {
    ASSERT_EQ(mallory.Hello(~0ull), HZ_S_OK);
    GuestBuffer own;
    ASSERT_EQ(mallory.Register(64 * 1024, 2, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &own), HZ_S_OK);
    hz_comm_uid uid{};
    uint64_t comm = 0;
    ASSERT_EQ(mallory.NewUid(&uid), HZ_S_OK);
    ASSERT_EQ(mallory.InitComm(uid, 1, 0, &comm), HZ_S_OK);
    m->SetSession(own.region, comm);
    hz_ckpt_policy_args p{};
    p.stream = kMalloryStream;
    p.retention = 2;
    p.tier = HZ_TIER_HOST_MEMORY;
    p.flags = HZ_CKPT_F_AUTO_SAVE_ON_NOTICE;
    p.stall_budget_ms = 100;
    ASSERT_EQ(Seed(mallory, m, HZ_OP_CKPT_POLICY, p), HZ_S_OK);
    // One valid request of each kind that needs structure to get far: the
    // mutations start from these.
    hz_coll_args a{};
    a.comm = comm;
    a.count = 16;
    a.dtype = HZ_FP32;
    a.redop = HZ_SUM;
    a.send = hz::testing::SliceOf(own, 0, 64);
    a.recv = hz::testing::SliceOf(own, 64, 64);
    Seed(mallory, m, HZ_OP_ALLREDUCE, a);
    hz_slice state = hz::testing::SliceOf(own, 4096, 4096);
    hz_ckpt_save_args save{};
    save.stream = kMalloryStream;
    save.num_slices = 1;
    save.step = ++session_;
    Seed(mallory, m, HZ_OP_CKPT_SAVE, save, {state});
    hz_ckpt_restore_args restore{};
    restore.stream = kMalloryStream;
    restore.num_slices = 1;
    restore.step = session_;
    Seed(mallory, m, HZ_OP_CKPT_RESTORE, restore, {state});
    hz_ckpt_quiesce_args quiesce{};
    quiesce.stream = kMalloryStream;
    quiesce.word = hz::testing::SliceOf(own, 0, sizeof(hz_quiesce_word));
    quiesce.num_slices = 1;
    Seed(mallory, m, HZ_OP_CKPT_QUIESCE, quiesce, {state});
    hz_neg_request neg{};
    neg.kind = HZ_DEV_GPU;
    neg.count = 1;
    neg.locality = HZ_LOC_ANY;
    neg.priority_class = HZ_PRIO_NORMAL;
    neg.earliest_start_s = static_cast<uint64_t>(time(nullptr));
    neg.latest_start_s = neg.earliest_start_s + 3600;
    neg.duration_s = 60;
    Seed(mallory, m, HZ_OP_NEG_REQUEST, neg);
    hz_hint_declare_args hint{1, 64, 1, 0};
    Seed(mallory, m, HZ_OP_HINT_DECLARE, hint);
    hz_event_subscribe_args sub{};
    sub.topics = ~0ull;
    sub.from_seq = HZ_SEQ_CURSOR;
    Seed(mallory, m, HZ_OP_EVENT_SUBSCRIBE, sub);
  }

  // Not exited: a daemon that crashed stays a zombie until reaped, so a
  // signal 0 would not tell.
  bool DaemonRunning() {
    int status = 0;
    return waitpid(host_.svc().pid(), &status, WNOHANG) == 0;
  }

  // Nothing of alice's in what mallory got back or in her memory.
  void CheckNoLeak(const Reply& r, const uint8_t* scratch) {
    leaked_ |= Contains(r.result.data(), r.result.size(), kAliceMagic, 16);
    leaked_ |= Contains(r.result.data(), r.result.size(), &kAliceStep, sizeof(kAliceStep));
    if (scratch != nullptr) leaked_ |= Contains(scratch, kScratchBytes, kAliceMagic, 16);
  }

  ProviderHost host_;
  std::vector<std::string> alice_socks_, mallory_socks_;
  HzClient alice_;
  GuestBuffer secret_, restored_;
  uint64_t session_ = 0;  // mallory's sessions, also her checkpoint steps
  bool leaked_ = false;
};

TEST_F(HostileGuest, EveryRequestIsAnsweredAndTheNeighbourIsUntouched) {
  const uint64_t seed = EnvOr("HZ_HOSTILE_SEED", 1);
  const uint64_t requests = EnvOr("HZ_HOSTILE_REQUESTS", 4000);
  SCOPED_TRACE("HZ_HOSTILE_SEED=" + std::to_string(seed));
  CheckAlice("before");

  HzClient mallory;
  ASSERT_TRUE(mallory.Connect(mallory_socks_[0], 32ull << 20));
  uint64_t scratch_gpa = 0;
  auto* scratch = static_cast<uint8_t*>(mallory.dev().Allocate(kScratchBytes, &scratch_gpa, 4096));
  ASSERT_NE(scratch, nullptr);
  Mutator m(seed, secret_.region, scratch_gpa);
  ASSERT_NO_FATAL_FAILURE(StartSession(mallory, &m));

  std::map<uint32_t, uint64_t> statuses;
  std::set<uint16_t> reached;  // opcodes whose handler looked past the framing
  uint64_t waiting_for_peers = 0;
  for (uint64_t i = 0; i < requests; ++i) {
    const Request q = m.Next();
    const uint16_t op = q.opcode;
    Reply r = Send(mallory, q, m.ResultSpace());
    if (r.status == 0xffffffff) {
      ASSERT_TRUE(MayWaitForPeers(op))
          << "request " << i << " opcode 0x" << std::hex << op << " was never answered";
      ++waiting_for_peers;
      continue;
    }
    ++statuses[r.status];
    if (PastTheChecks(r.status)) reached.insert(op);
    // A HELLO of hers that succeeded ended her session (and may have granted
    // fewer features): start a full one again so later requests go deep.
    if (op == HZ_OP_HELLO && r.status == HZ_S_OK) {
      ASSERT_NO_FATAL_FAILURE(StartSession(mallory, &m));
    }
    m.Learn(q, r.status);
    CheckNoLeak(r, (i % 256) == 0 ? scratch : nullptr);
    ASSERT_FALSE(leaked_) << "alice's data reached mallory at request " << i;
    ASSERT_TRUE(DaemonRunning()) << "the daemon died at request " << i;
    if (i % 1000 == 999) CheckAlice("during");
  }
  CheckNoLeak(Reply{}, scratch);
  EXPECT_FALSE(leaked_);
  mallory.dev().Disconnect();
  CheckAlice("after");

  std::string totals =
      "{\"seed\":" + std::to_string(seed) + ",\"requests\":" + std::to_string(requests) +
      ",\"waiting_for_peers\":" + std::to_string(waiting_for_peers) + ",\"statuses\":{";
  for (auto [status, n] : statuses) {
    totals += "\"" + std::to_string(status) + "\":" + std::to_string(n) + ",";
  }
  totals.back() = '}';
  std::printf("%s}\n", totals.c_str());
  // Mallory got past the framing into every family's handlers, and was
  // refused there for what she asked.
  for (uint16_t op : {HZ_OP_REGION_REGISTER, HZ_OP_ALLREDUCE, HZ_OP_CKPT_SAVE, HZ_OP_CKPT_RESTORE,
                      HZ_OP_CKPT_LIST, HZ_OP_EVENT_SUBSCRIBE, HZ_OP_TOPOLOGY_GET, HZ_OP_NEG_REQUEST,
                      HZ_OP_HINT_DECLARE}) {
    EXPECT_EQ(reached.count(op), 1u)
        << "no request of opcode 0x" << std::hex << op << " got past the framing";
  }
  for (uint32_t st : {HZ_S_EINVAL, HZ_S_ENOENT, HZ_S_EFAULT, HZ_S_ETOOSMALL}) {
    EXPECT_GT(statuses[st], 0u) << "status " << st;
  }
  EXPECT_EQ(host_.svc().Terminate(), 0);
}

}  // namespace
