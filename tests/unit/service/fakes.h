// Test doubles for driving an HzDevice without sockets: guest memory in a
// memfd mapped through vdev's MemoryMap, hand-built chains, a queue that
// records completions, a context whose posted work the test runs, and
// scripted backends for the collective engine, the checkpoint engine, the
// event bus and the provider side.
#ifndef HZ_TESTS_UNIT_SERVICE_FAKES_H_
#define HZ_TESTS_UNIT_SERVICE_FAKES_H_

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hz/service/ckpt_backend.h"
#include "hz/service/coll_backend.h"
#include "hz/service/energy_backend.h"
#include "hz/service/event_backend.h"
#include "hz/service/provider_backend.h"
#include "protocol/harmonaize.h"
#include "vdev/device.h"
#include "vdev/memory_map.h"

namespace hz::service::testing {

// Guest RAM: one memfd region of `size` bytes at guest-physical `base`.
class GuestRam {
 public:
  explicit GuestRam(uint64_t size = 1 << 20, uint64_t base = 1 << 20) : base_(base), size_(size) {
    int fd = memfd_create("hz-test-ram", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) abort();
    vdev::vu::MemRegion desc{};
    desc.guest_phys_addr = base;
    desc.memory_size = size;
    desc.userspace_addr = 0x7000'0000'0000ull;
    desc.mmap_offset = 0;
    std::string error;
    auto region = vdev::MapGuestRegion(desc, fd, 1ull << 40, &error);
    if (!region) abort();
    host_ = region->host;
    map_ =
        std::make_shared<vdev::MemoryMap>(std::vector<std::shared_ptr<vdev::MappedRegion>>{region});
  }
  uint8_t* at(uint64_t gpa) const { return host_ + (gpa - base_); }
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  const vdev::MemoryMapPtr& map() const { return map_; }

 private:
  uint64_t base_, size_;
  uint8_t* host_ = nullptr;
  vdev::MemoryMapPtr map_;
};

// Builds a request chain in guest RAM: readable header+args+data, writable
// result space + status. Each part is one segment unless split is asked for.
struct ChainBuilder {
  GuestRam* ram;
  uint64_t next_gpa;
  explicit ChainBuilder(GuestRam* r) : ram(r), next_gpa(r->base() + r->size() / 2) {}

  vdev::Segment Alloc(size_t len) {
    uint8_t* p = ram->at(next_gpa);
    next_gpa += (len + 63) & ~size_t{63};
    std::memset(p, 0, len);
    return {p, len};
  }

  // A request with the given readable bytes, split into segments of at most
  // `chunk` bytes, and `writable` bytes of writable space (in one segment).
  vdev::Chain Make(const std::vector<uint8_t>& readable, size_t writable, size_t chunk = 0,
                   uint16_t head = 0) {
    std::vector<vdev::Segment> r, w;
    if (chunk == 0) chunk = readable.size() == 0 ? 1 : readable.size();
    for (size_t off = 0; off < readable.size(); off += chunk) {
      size_t n = std::min(chunk, readable.size() - off);
      vdev::Segment s = Alloc(n);
      std::memcpy(s.data, readable.data() + off, n);
      r.push_back(s);
    }
    if (writable > 0) w.push_back(Alloc(writable));
    return vdev::Chain(head, std::move(r), std::move(w), ram->map());
  }
};

template <typename Args>
std::vector<uint8_t> RequestBytes(uint16_t opcode, const Args& args, uint64_t request_id,
                                  const void* data = nullptr, size_t data_len = 0) {
  hz_req_hdr h{};
  h.opcode = opcode;
  h.args_len = sizeof(Args);
  h.request_id = request_id;
  std::vector<uint8_t> out(sizeof(h) + sizeof(Args) + data_len);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), &args, sizeof(Args));
  if (data_len > 0) std::memcpy(out.data() + sizeof(h) + sizeof(Args), data, data_len);
  return out;
}

inline std::vector<uint8_t> HeaderOnly(uint16_t opcode, uint64_t request_id, uint32_t args_len = 0,
                                       uint16_t flags = 0) {
  hz_req_hdr h{};
  h.opcode = opcode;
  h.flags = flags;
  h.args_len = args_len;
  h.request_id = request_id;
  std::vector<uint8_t> out(sizeof(h));
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

// Reads hz_status from the end of a chain's writable part.
inline hz_status StatusOf(const vdev::Chain& c) {
  hz_status s{};
  std::vector<uint8_t> all(c.writable_bytes());
  size_t off = 0;
  for (const auto& seg : c.writable()) {
    std::memcpy(all.data() + off, seg.data, seg.len);
    off += seg.len;
  }
  std::memcpy(&s, all.data() + all.size() - sizeof(s), sizeof(s));
  return s;
}

class FakeQueue : public vdev::Queue {
 public:
  explicit FakeQueue(uint16_t index) : index_(index) {}
  uint16_t index() const override { return index_; }
  uint16_t size() const override { return 256; }
  bool Pop(vdev::Chain* out) override {
    if (avail.empty()) return false;
    *out = avail.front();
    avail.pop_front();
    return true;
  }
  void Complete(const vdev::Chain& chain, uint32_t written) override {
    used.push_back({chain, written});
  }
  void Flush() override { flushes++; }
  // A returned chain is popped again first, as SplitQueue does.
  void Return(const vdev::Chain& chain) override { avail.push_front(chain); }

  std::deque<vdev::Chain> avail;
  struct Used {
    vdev::Chain chain;
    uint32_t len;
  };
  std::vector<Used> used;
  int flushes = 0;

 private:
  uint16_t index_;
};

class FakeContext : public vdev::DeviceContext {
 public:
  explicit FakeContext(vdev::MemoryMapPtr memory) : memory_(std::move(memory)) {}
  void Post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(fn));
  }
  vdev::MemoryMapPtr Memory() const override { return memory_; }
  void NotifyConfigChanged() override { config_changes++; }
  // The crash journal would be written now: keeps what it would hold.
  void StateChanged() override {
    state_changes++;
    if (journal_source) journaled = journal_source();
  }
  // Runs everything posted so far (as the connection's executor would).
  size_t RunPosted() {
    size_t n = 0;
    for (;;) {
      std::function<void()> fn;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (posted_.empty()) return n;
        fn = std::move(posted_.front());
        posted_.pop_front();
      }
      fn();
      n++;
    }
  }
  int config_changes = 0;
  int state_changes = 0;
  std::function<std::string()> journal_source;  // the device's DurableState
  std::string journaled;

 private:
  vdev::MemoryMapPtr memory_;
  std::mutex mu_;
  std::deque<std::function<void()>> posted_;
};

class FakeMember : public CommMember {
 public:
  FakeMember(uint32_t rank, uint32_t nranks, uint64_t id) : rank_(rank), nranks_(nranks), id_(id) {}
  uint32_t rank() const override { return rank_; }
  uint32_t nranks() const override { return nranks_; }
  uint64_t comm_id() const override { return id_; }

 private:
  uint32_t rank_, nranks_;
  uint64_t id_;
};

// Scripted backend: uids remember their tenant; Init of a 1-rank communicator
// completes at once, others wait for the test; posted ops wait for the test.
class FakeBackend : public CollBackend {
 public:
  Status NewUid(const TenantId& tenant, coll::Uid* out) override {
    std::lock_guard<std::mutex> lock(mu);
    coll::Uid u;
    u.bytes[0] = static_cast<uint8_t>(++uids);
    uid_tenant[u] = tenant;
    *out = u;
    return Status::Ok();
  }
  void Init(const TenantId& tenant, const coll::Uid& uid, uint32_t nranks, uint32_t rank,
            coll::Constraints c, std::function<void(Status, MemberPtr)> done) override {
    Status st = Status::Ok();
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = uid_tenant.find(uid);
      if (it == uid_tenant.end())
        st = Status::NotFound();
      else if (it->second != tenant)
        st = Status::Permission();
      last_constraints = c;
      if (st.ok() && nranks > 1) {
        inits.push_back({rank, nranks, std::move(done)});
        return;
      }
    }
    if (!st.ok()) return done(st, nullptr);
    done(Status::Ok(), std::make_shared<FakeMember>(rank, nranks, 100 + uid.bytes[0]));
  }
  void Post(const MemberPtr& m, coll::OpDesc op, coll::Done done) override {
    std::lock_guard<std::mutex> lock(mu);
    posts.push_back({m, std::move(op), std::move(done)});
  }
  void Destroy(const MemberPtr& m) override {
    std::lock_guard<std::mutex> lock(mu);
    destroyed.push_back(m);
  }
  void DestroyAsync(MemberPtr m) override { Destroy(m); }
  void Abort(const MemberPtr& m) override {
    std::lock_guard<std::mutex> lock(mu);
    aborted.push_back(m);
  }
  // Every op of m still waiting for the test is withdrawn.
  size_t Withdraw(const MemberPtr& m) override {
    std::vector<coll::Done> withdrawn;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = posts.begin(); it != posts.end();) {
        if (it->member != m) {
          ++it;
          continue;
        }
        withdrawn.push_back(std::move(it->done));
        it = posts.erase(it);
      }
    }
    for (coll::Done& done : withdrawn) done(Status::TryAgain("withdrawn"));
    return withdrawn.size();
  }
  Status SaveMember(const MemberPtr& m, SavedMember* out) const override {
    out->engine.uid.bytes[0] = static_cast<uint8_t>(m->comm_id() - 100);
    out->engine.nranks = m->nranks();
    out->engine.rank = m->rank();
    out->engine.next_seq = next_seq;
    out->backend = backend_state;
    return Status::Ok();
  }
  // Rejoins wait for the test.
  void Rejoin(const TenantId& /*tenant*/, const SavedMember& saved,
              std::function<void(Status, MemberPtr)> done) override {
    std::lock_guard<std::mutex> lock(mu);
    rejoins.push_back({saved.engine, saved.backend, std::move(done)});
  }
  void Shutdown() override { shutdown = true; }
  BackendStats Stats() const override {
    BackendStats s;
    s.algorithms = {{"inline", 3}, {"blocked_parallel", 1}};
    s.communicators = 2;
    return s;
  }
  std::vector<CommSummary> Communicators() const override { return {}; }

  struct PendingInit {
    uint32_t rank, nranks;
    std::function<void(Status, MemberPtr)> done;
  };
  struct Posted {
    MemberPtr member;
    coll::OpDesc op;
    coll::Done done;
  };
  std::mutex mu;
  int uids = 0;
  std::map<coll::Uid, TenantId> uid_tenant;
  struct PendingRejoin {
    coll::MemberState state;
    nlohmann::json backend;
    std::function<void(Status, MemberPtr)> done;
  };
  std::vector<PendingInit> inits;
  std::vector<Posted> posts;
  std::vector<PendingRejoin> rejoins;
  uint64_t next_seq = 0;         // what SaveMember reports
  nlohmann::json backend_state;  // ... and as the backend's part
  std::vector<MemberPtr> destroyed, aborted;
  coll::Constraints last_constraints;
  bool shutdown = false;
};

// Scripted checkpoint engine: work handed to RunAsync waits for the test
// (RunQueued, as an engine thread would); Save records what it was given.
class FakeCkptBackend : public CkptBackend {
 public:
  // A quiescence registration as the engine was given it.
  struct Declared {
    checkpoint::StreamId stream;
    const uint8_t* word;
    std::vector<checkpoint::IoSpan> slices;
  };

  Status SetPolicy(const TenantId&, checkpoint::StreamId, const checkpoint::Policy&) override {
    ++policies;
    return Status::Ok();
  }
  Status Save(const checkpoint::SaveRequest& req, checkpoint::SaveResult* result) override {
    std::lock_guard<std::mutex> lock(mu);
    saved.clear();
    for (const checkpoint::IoSpan& s : req.slices)
      saved.insert(saved.end(), s.data, s.data + s.len);
    result->step = req.step;
    result->state = checkpoint::CkptState::kStaged;
    return save_status;
  }
  Status Restore(const checkpoint::RestoreRequest&, checkpoint::RestoreResult*) override {
    return Status::NotFound();
  }
  Status List(const TenantId&, checkpoint::StreamId, uint64_t, uint32_t,
              std::vector<checkpoint::ListEntry>*, bool* more) override {
    *more = false;
    return Status::Ok();
  }
  Status Delete(const TenantId&, checkpoint::StreamId, uint64_t) override {
    ++deletes;
    return Status::NotFound();
  }
  Status DeclareQuiesce(const TenantId&, checkpoint::StreamId stream, checkpoint::IoSpan word,
                        std::span<const checkpoint::IoSpan> slices) override {
    declared.push_back({stream, word.data, {slices.begin(), slices.end()}});
    return declare_status;
  }
  Status CancelQuiesce(const TenantId&, checkpoint::StreamId) override {
    ++cancels;
    return Status::Ok();
  }
  bool ClaimQuiesce(const TenantId&, checkpoint::StreamId, const void*,
                    const std::string&) override {
    return true;
  }
  void ReleaseQuiesce(const TenantId&, checkpoint::StreamId, const void*) override {}
  void RunAsync(const TenantId&, std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu);
    queued.push_back(std::move(fn));
  }
  // Runs every queued piece of work; returns how many ran.
  size_t RunQueued() {
    std::deque<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(mu);
      work.swap(queued);
    }
    for (auto& fn : work) fn();
    return work.size();
  }

  std::mutex mu;
  std::deque<std::function<void()>> queued;
  std::vector<uint8_t> saved;  // the bytes of the last save's slices
  Status save_status = Status::Ok();
  std::atomic<int> policies{0};    // SetPolicy calls
  std::atomic<int> deletes{0};     // Delete calls
  std::vector<Declared> declared;  // DeclareQuiesce calls, in order
  Status declare_status = Status::Ok();
  int cancels = 0;  // CancelQuiesce calls
};

// Scripted event bus: records published by the test are delivered in order.
class FakeEventBackend : public EventBackend {
 public:
  class Subscription : public EventSubscription {
   public:
    explicit Subscription(FakeEventBackend* bus) : bus_(bus) {}
    ~Subscription() override {
      if (bus_->live == this) bus_->live = nullptr;
    }
    Status Subscribe(const hz_event_subscribe_args&, hz_event_subscribe_result* result) override {
      result->next_seq = bus_->next_seq;
      subscribed_ = true;
      return Status::Ok();
    }
    bool Next(hz_event* out) override {
      if (!subscribed_ || bus_->records.empty()) return false;
      *out = bus_->records.front();
      bus_->records.pop_front();
      return true;
    }
    void Ack(const hz_event_ack_args&, std::function<void(Status)> done) override {
      done(Status::Ok());
    }
    void SetNotify(std::function<void()> notify) override { notify_ = std::move(notify); }
    void Notify() {
      if (notify_) notify_();
    }
    events::DeliveryPosition Position() const override {
      return {subscribed_, bus_->topics, bus_->next_seq - bus_->records.size(), bus_->delivered};
    }
    Status Resume(const events::DeliveryPosition& p) override {
      subscribed_ = p.subscribed;
      bus_->resumed.push_back(p);
      return Status::Ok();
    }
    void Abandon() override { bus_->abandoned++; }

   private:
    FakeEventBackend* bus_;
    bool subscribed_ = false;
    std::function<void()> notify_;
  };

  Status Connect(const TenantId& tenant, const std::string& subscriber,
                 std::unique_ptr<EventSubscription>* out) override {
    last_tenant = tenant.name();
    last_subscriber = subscriber;
    auto s = std::make_unique<Subscription>(this);
    live = s.get();
    *out = std::move(s);
    return Status::Ok();
  }
  void CountDelivered(uint64_t n) override { delivered += n; }
  // Publishes a record and notifies the subscriber, as the bus would from
  // the publisher's thread.
  void Publish(uint16_t topic) {
    hz_event ev{};
    ev.seq = next_seq++;
    ev.topic = topic;
    records.push_back(ev);
    if (live != nullptr) live->Notify();
  }

  std::deque<hz_event> records;
  uint64_t next_seq = 1;
  uint64_t delivered = 0;
  Subscription* live = nullptr;
  std::string last_tenant, last_subscriber;
  uint64_t topics = 0;  // what Position reports
  std::vector<events::DeliveryPosition> resumed;
  int abandoned = 0;
};

// Scripted provider: negotiations wait until the test decides them.
class FakeProviderBackend : public ProviderBackend {
 public:
  Status Summary(const TenantId&, std::vector<uint8_t>* bytes) override {
    bytes->assign(16, 0xab);
    return Status::Ok();
  }
  Status Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority, uint32_t,
                const hz_neg_request&, DecisionFn done) override {
    if (!submit_status.ok()) return submit_status;
    last_tenant = tenant.name();
    last_weight = weight;
    last_max_priority = max_priority;
    waiting.push_back(std::move(done));
    return Status::Ok();
  }
  Status Counter(const TenantId&, uint64_t, const hz_neg_request&, DecisionFn done) override {
    waiting.push_back(std::move(done));
    return Status::Ok();
  }
  Status Accept(const TenantId&, uint64_t, uint64_t* reservation_id) override {
    *reservation_id = 5;
    return Status::Ok();
  }
  Status Decline(const TenantId&, uint64_t) override { return Status::Ok(); }
  Status Release(const TenantId&, const hz_neg_release_args&) override { return Status::Ok(); }
  Status DeclareHint(const TenantId&, const hz_hint_declare_args&,
                     hz_hint_declare_result*) override {
    return Status::Ok();
  }
  // The decision point: every waiting request gets negotiation id and one offer.
  void Decide(uint64_t negotiation_id) {
    std::vector<DecisionFn> fns;
    fns.swap(waiting);
    for (auto& fn : fns) {
      negotiation::Decision d;
      d.result.negotiation_id = negotiation_id;
      d.offers.push_back(hz_neg_offer{});
      fn(d);
    }
  }

  std::vector<DecisionFn> waiting;
  Status submit_status = Status::Ok();
  std::string last_tenant;
  uint32_t last_weight = 0;
  uint8_t last_max_priority = 0;
};

// Energy slack declarations, accepted as SPEC §7.10 bounds them.
class FakeEnergyBackend : public EnergyBackend {
 public:
  Status DeclareSlack(const TenantId&, const hz_energy_slack_args& args,
                      hz_energy_slack_result* result) override {
    ++declarations;
    *result = {};
    if (args.slowdown_pct > HZ_ENERGY_SLACK_MAX_PCT || args.duration_s > HZ_ENERGY_SLACK_MAX_S) {
      return Status::InvalidArgument();
    }
    if (args.slowdown_pct != 0) result->expires_s = args.duration_s;
    return Status::Ok();
  }
  uint64_t declarations = 0;
};

}  // namespace hz::service::testing

#endif  // HZ_TESTS_UNIT_SERVICE_FAKES_H_
