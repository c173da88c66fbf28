// What the provider's engines tell tenants on their own, end to end through
// libharmonaize: a preemption notice before a reservation's end and
// PREEMPTION/STARTED at it (SPEC §8.3.3, §9.6), and CAPACITY/AVAILABLE to the
// tenants waiting for a device kind when devices are freed (§8.3.4).
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "provider_host.h"

namespace {

using hz::testing::NextEventOf;
using hz::testing::OpenVm;
using hz::testing::PayloadAt;
using hz::testing::UnixNow;
using json = nlohmann::json;

hz_neg_request Gpus(uint16_t count, uint64_t duration_s) {
  hz_neg_request r{};
  r.kind = HZ_DEV_GPU;
  r.count = count;
  r.locality = HZ_LOC_ANY;
  r.priority_class = HZ_PRIO_NORMAL;
  r.earliest_start_s = UnixNow();
  r.latest_start_s = UnixNow() + 60;
  r.duration_s = duration_s;
  return r;
}

// Every event of `d` up to and including the first of (topic, kind);
// empty when it did not come.
std::vector<hz_event> EventsUntil(hz_device_t* d, uint16_t topic, uint16_t kind) {
  std::vector<hz_event> seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(60000);
  while (std::chrono::steady_clock::now() < deadline) {
    hz_event ev{};
    int rc = hz_event_next(d, &ev, 200);
    if (rc == HZ_ETIMEDOUT) continue;
    if (rc != HZ_OK) break;
    hz_event_ack(d, ev.seq, 0);
    seen.push_back(ev);
    if (ev.topic == topic && ev.kind == kind) return seen;
  }
  return {};
}

size_t CountOf(const std::vector<hz_event>& events, uint16_t topic, uint16_t kind) {
  size_t n = 0;
  for (const hz_event& ev : events) n += ev.topic == topic && ev.kind == kind;
  return n;
}

class ServiceEngineNotices : public ::testing::Test {
 protected:
  // `negotiation`: further [negotiation] lines of the service's configuration.
  void StartHost(const std::string& negotiation) {
    ASSERT_TRUE(host_.Start("hgx8", negotiation));
    std::vector<std::string> socks_a = host_.svc().TenantWithVms("ta", 1);
    std::vector<std::string> socks_b = host_.svc().TenantWithVms("tb", 1);
    ASSERT_EQ(socks_a.size(), 1u);
    ASSERT_EQ(socks_b.size(), 1u);
    a_ = OpenVm(socks_a[0]);
    b_ = OpenVm(socks_b[0]);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ASSERT_EQ(hz_event_subscribe(a_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
    ASSERT_EQ(hz_event_subscribe(b_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  }
  void TearDown() override {
    if (a_ != nullptr) hz_close(a_);
    if (b_ != nullptr) hz_close(b_);
  }

  // Publishes a marker event to `tenant`: what it reads before the marker
  // was published before it.
  void Mark(const std::string& tenant) {
    json r = host_.Control({{"cmd", "event.inject"},
                            {"tenant", tenant},
                            {"event", {{"topic", "energy"}, {"level", 0}}}});
    ASSERT_TRUE(r.value("ok", false)) << r.dump();
  }

  // The reservation of the first offer for `req`, once it has started.
  uint64_t ReserveStarted(hz_device_t* d, const hz_neg_request& req, hz_neg_offer* offer) {
    hz_negotiation n{};
    EXPECT_EQ(hz_neg_start(d, &req, &n), HZ_OK);
    EXPECT_GE(n.num_offers, 1u);
    if (n.num_offers == 0) return 0;
    *offer = n.offers[0];
    uint64_t rid = 0;
    EXPECT_EQ(hz_neg_accept(d, n.offers[0].offer_id, &rid), HZ_OK);
    hz_event ev{};
    EXPECT_TRUE(NextEventOf(d, HZ_TOPIC_CAPACITY, 1 /* RESERVATION_STARTED */, &ev));
    return rid;
  }

  hz::testing::ProviderHost host_;
  hz_device_t* a_ = nullptr;
  hz_device_t* b_ = nullptr;
};

TEST_F(ServiceEngineNotices, AReservationsHolderIsNoticedOnceThenTheDevicesAreTaken) {
  StartHost("preemption_notice_s = 120\n");
  // 10 s, less than the notice's lead: the notice comes as soon as it starts.
  hz_neg_offer offer{};
  const uint64_t rid = ReserveStarted(a_, Gpus(1, 10), &offer);
  ASSERT_NE(rid, 0u);
  const uint64_t end = offer.start_s + offer.duration_s;

  std::vector<hz_event> events = EventsUntil(a_, HZ_TOPIC_CAPACITY, 2 /* RESERVATION_ENDED */);
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(CountOf(events, HZ_TOPIC_PREEMPTION, 0 /* SCHEDULED */), 1u);
  ASSERT_EQ(CountOf(events, HZ_TOPIC_PREEMPTION, 1 /* STARTED */), 1u);
  size_t scheduled = 0, started = 0, ended = events.size() - 1;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].topic != HZ_TOPIC_PREEMPTION) continue;
    (events[i].kind == 0 ? scheduled : started) = i;
  }
  EXPECT_LT(scheduled, started);
  EXPECT_LT(started, ended) << "STARTED comes before RESERVATION_ENDED";

  const hz_event& notice = events[scheduled];
  EXPECT_EQ(notice.deadline_s, end - end % 10);  // the end, coarse
  EXPECT_EQ(notice.time_s % 10, 0u);
  EXPECT_LE(notice.time_s, notice.deadline_s);
  EXPECT_EQ(notice.flags & HZ_EVENT_F_APPROVABLE, 0u);
  EXPECT_EQ(PayloadAt<uint32_t>(notice, 0), 1u);  // devices: exact
  EXPECT_EQ(PayloadAt<uint32_t>(notice, 4), 0u);  // its one device: the tenant's index 0
  EXPECT_EQ(events[started].deadline_s, 0u);
  EXPECT_EQ(PayloadAt<uint32_t>(events[started], 0), 1u);
  EXPECT_EQ(PayloadAt<uint64_t>(events[ended], 0), rid);
  EXPECT_GE(UnixNow(), end);
  EXPECT_TRUE(host_.DevicesOf("ta", /*releasing=*/false).empty());
  EXPECT_TRUE(host_.WaitUntilDevicesOf("ta", 0));

  // Nothing of it reached the other tenant.
  Mark("tb");
  std::vector<hz_event> other = EventsUntil(b_, HZ_TOPIC_ENERGY, 0);
  ASSERT_FALSE(other.empty());
  EXPECT_EQ(other.size(), 1u) << "tb saw " << other.front().topic << "/" << other.front().kind;
}

TEST_F(ServiceEngineNotices, AReservationReleasedBeforeItsNoticeGetsNone) {
  StartHost("preemption_notice_s = 30\n");
  hz_neg_offer offer{};
  const uint64_t rid = ReserveStarted(a_, Gpus(2, 600), &offer);
  ASSERT_NE(rid, 0u);
  ASSERT_EQ(hz_neg_release(a_, rid, 0), HZ_OK);
  Mark("ta");
  std::vector<hz_event> events = EventsUntil(a_, HZ_TOPIC_ENERGY, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(CountOf(events, HZ_TOPIC_CAPACITY, 3 /* RESERVATION_RELEASED */), 1u);
  for (const hz_event& ev : events) EXPECT_NE(ev.topic, HZ_TOPIC_PREEMPTION) << ev.kind;
}

TEST_F(ServiceEngineNotices, FreedDevicesAreAnnouncedToTheWaitingTenantOnlyBucketedAndRateLimited) {
  // A request decided without offers stays open, its tenant waiting, for an
  // offer lifetime.
  StartHost("offer_ttl_s = 300\n");
  int rc = -1;
  json inventory = host_.Hzctl("inventory", &rc);
  ASSERT_EQ(rc, 0);
  uint16_t gpus = 0;
  for (const json& d : inventory["result"]) gpus += d.value("kind", std::string()) == "gpu";
  ASSERT_GE(gpus, 8u);

  hz_neg_offer offer{};
  const uint64_t all = ReserveStarted(a_, Gpus(gpus, 600), &offer);
  ASSERT_NE(all, 0u);
  hz_neg_request one = Gpus(1, 60);
  hz_negotiation waiting{};
  ASSERT_EQ(hz_neg_start(b_, &one, &waiting), HZ_OK);
  ASSERT_EQ(waiting.num_offers, 0u) << "every GPU is reserved";

  ASSERT_EQ(hz_neg_release(a_, all, 3), HZ_OK);  // 3 free
  hz_event ev{};
  ASSERT_TRUE(NextEventOf(b_, HZ_TOPIC_CAPACITY, 0 /* AVAILABLE */, &ev));
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 0), 0u);  // no reservation
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 8), 2u);  // 3 free: the bucket 2-3
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 16), 0u);
  EXPECT_EQ(PayloadAt<uint16_t>(ev, 24), HZ_DEV_GPU);
  EXPECT_EQ(ev.deadline_s, 0u);

  // The tenant that freed them waits for nothing: it is not told.
  Mark("ta");
  std::vector<hz_event> events = EventsUntil(a_, HZ_TOPIC_ENERGY, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(CountOf(events, HZ_TOPIC_CAPACITY, 0), 0u);

  // Another bucket within 60 s is held back. tb's next request is decided
  // after a decision point that saw the release.
  ASSERT_EQ(hz_neg_release(a_, all, 3), HZ_OK);  // 6 free: the bucket 4-7
  hz_negotiation later{};
  ASSERT_EQ(hz_neg_start(b_, &one, &later), HZ_OK);
  EXPECT_GE(later.num_offers, 1u);
  Mark("tb");
  events = EventsUntil(b_, HZ_TOPIC_ENERGY, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(CountOf(events, HZ_TOPIC_CAPACITY, 0), 0u);
}

// A stream of `vm` that the provider may save on a notice, quiesced at step 7.
void RegisterStream(hz_device_t* vm, uint32_t stream) {
  hz_ckpt_policy p{HZ_CKPT_F_AUTO_SAVE_ON_NOTICE, 2, HZ_TIER_LOCAL_DISK, 1000, 0};
  ASSERT_EQ(hz_ckpt_set_policy(vm, stream, &p), HZ_OK);
  void* w = nullptr;
  void* s = nullptr;
  ASSERT_EQ(hz_mem_alloc(vm, 4096, &w), HZ_OK);
  ASSERT_EQ(hz_mem_alloc(vm, 16 * 1024, &s), HZ_OK);
  std::memset(s, static_cast<int>(stream), 16 * 1024);
  auto* word = static_cast<hz_quiesce_word*>(w);
  word->step = 7;
  __atomic_store_n(&word->seq, 2, __ATOMIC_RELEASE);  // even: consistent
  hz_buf slice{s, 16 * 1024};
  ASSERT_EQ(hz_ckpt_quiesce(vm, stream, word, &slice, 1), HZ_OK);
}

size_t CheckpointsOf(hz_device_t* vm, uint32_t stream) {
  hz_ckpt_info e[4];
  size_t n = 0;
  EXPECT_EQ(hz_ckpt_list(vm, stream, e, 4, &n), HZ_OK);
  return n;
}

// SPEC §7.5.7 with a preemption: the scheduler attaches the tenant's devices
// to its libvirt domain, so the just-in-time save covers the VM bound with
// that domain and a VM whose domain was never named (it may be that one),
// not the tenant's VM on another domain. The bindings' domains survive a
// restart.
TEST_F(ServiceEngineNotices, APreemptionSavesOnlyTheVmsOfTheTenantsDomain) {
  StartHost("preemption_notice_s = 120\n");
  int rc = -1;
  host_.Hzctl("tenant domain ta --domain ta-main", &rc);
  ASSERT_EQ(rc, 0);
  const std::string main_sock = host_.svc().dir() + "/ta-main.sock";
  const std::string side_sock = host_.svc().dir() + "/ta-side.sock";
  host_.Hzctl("vm bind --tenant ta --socket " + main_sock + " --domain ta-main", &rc);
  ASSERT_EQ(rc, 0);
  host_.Hzctl("vm bind --tenant ta --socket " + side_sock + " --domain ta-side", &rc);
  ASSERT_EQ(rc, 0);
  hz_device_t* main_vm = OpenVm(main_sock);
  hz_device_t* side_vm = OpenVm(side_sock);
  ASSERT_NE(main_vm, nullptr);
  ASSERT_NE(side_vm, nullptr);
  ASSERT_EQ(hz_event_subscribe(main_vm, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  RegisterStream(a_, 1);  // ta's first VM: no domain named
  RegisterStream(main_vm, 2);
  RegisterStream(side_vm, 3);

  // 60 s, less than the notice's lead: the notice comes as soon as it starts.
  hz_neg_offer offer{};
  ASSERT_NE(ReserveStarted(main_vm, Gpus(1, 60), &offer), 0u);
  hz_event ev{};
  ASSERT_TRUE(NextEventOf(a_, HZ_TOPIC_PREEMPTION, 0 /* SCHEDULED */, &ev));
  auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(hz::testing::kProviderWaitMs);
  while (host_.Control({{"cmd", "counters"}})["result"]["checkpoints"].value("jit_notices_done",
                                                                             uint64_t{0}) < 1) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the notice's saves never finished";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(CheckpointsOf(main_vm, 2), 1u) << "the domain's VM is saved";
  EXPECT_EQ(CheckpointsOf(a_, 1), 1u) << "a VM of no named domain is saved";
  EXPECT_EQ(CheckpointsOf(side_vm, 3), 0u) << "the VM of another domain is not";
  hz_close(main_vm);
  hz_close(side_vm);

  hz_close(a_);
  hz_close(b_);
  a_ = b_ = nullptr;
  ASSERT_EQ(host_.svc().Terminate(), 0);
  ASSERT_TRUE(host_.svc().Start({"--config", host_.svc().dir() + "/harmonaized.toml"}));
  json vms = host_.Control({{"cmd", "vm.list"}});
  ASSERT_TRUE(vms.value("ok", false)) << vms.dump();
  std::map<std::string, std::string> domains;
  for (const json& v : vms["result"]) {
    domains[v.value("socket", "")] = v.value("domain", "?");
  }
  ASSERT_EQ(domains.size(), 4u) << vms.dump();
  EXPECT_EQ(domains[main_sock], "ta-main");
  EXPECT_EQ(domains[side_sock], "ta-side");
  EXPECT_EQ(domains[host_.svc().dir() + "/ta-vm0.sock"], "");
}

}  // namespace
