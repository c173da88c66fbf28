// Negotiation and batch-size hints in harmonaized, end to end through
// libharmonaize: request -> offers at the decision point -> accept ->
// reservation -> the window starts -> the allocation is visible to the
// operator and CAPACITY and HINT events reach the tenant; decline, counter,
// release, expiry, bad requests, and tenants kept apart.
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "hz_client.h"
#include "provider_host.h"

namespace {

using hz::testing::HzClient;
using hz::testing::NextEventOf;
using hz::testing::OpenVm;
using hz::testing::PayloadAt;
using hz::testing::Reply;
using hz::testing::UnixNow;
using json = nlohmann::json;

class ServiceEngineNegotiation : public hz::testing::TwoTenantHostTest {
 protected:
  void SetUp() override {
    TwoTenantHostTest::SetUp();
    if (HasFatalFailure()) return;
    a_ = OpenVm(socks_a_[0]);
    b_ = OpenVm(socks_b_[0]);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }
  void TearDown() override {
    if (a_ != nullptr) hz_close(a_);
    if (b_ != nullptr) hz_close(b_);
  }

  // GPUs now, for up to a minute.
  static hz_neg_request Gpus(uint16_t count, uint64_t duration_s = 600) {
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

  hz_device_t* a_ = nullptr;
  hz_device_t* b_ = nullptr;
};

TEST_F(ServiceEngineNegotiation, AcceptedOfferStartsAReservationWithCapacityAndHintEvents) {
  ASSERT_EQ(hz_event_subscribe(a_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  ASSERT_EQ(hz_event_subscribe(b_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  uint32_t suggested = 0;
  ASSERT_EQ(hz_hint_declare(a_, 16, 256, 16, &suggested), HZ_OK);
  EXPECT_EQ(suggested, 16u);  // no GPUs yet: the smallest batch

  const uint64_t before = UnixNow();
  hz_neg_request req = Gpus(2);
  hz_negotiation n{};
  ASSERT_EQ(hz_neg_start(a_, &req, &n), HZ_OK);
  EXPECT_NE(n.id, 0u);
  EXPECT_EQ(n.round, 1u);
  ASSERT_GE(n.num_offers, 1u);
  for (uint32_t i = 0; i < n.num_offers; ++i) {
    EXPECT_NE(n.offers[i].offer_id, 0u);
    EXPECT_EQ(n.offers[i].count, 2u);
    EXPECT_EQ(n.offers[i].duration_s, 600u);
    EXPECT_GE(n.offers[i].start_s + 10, before);
    EXPECT_LE(n.offers[i].start_s, req.latest_start_s);
    EXPECT_GT(n.offers[i].expires_s + 10, before);
  }
  // The operator sees the open offer.
  json neg = host_.Control({{"cmd", "negotiation.list"}});
  ASSERT_TRUE(neg.value("ok", false));
  EXPECT_EQ(neg["result"]["offers"].size(), n.num_offers);

  uint64_t rid = 0;
  ASSERT_EQ(hz_neg_accept(a_, n.offers[0].offer_id, &rid), HZ_OK);
  EXPECT_NE(rid, 0u);
  hz_event ev{};
  ASSERT_TRUE(NextEventOf(a_, HZ_TOPIC_CAPACITY, 1 /* RESERVATION_STARTED */, &ev));
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 0), rid);
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 8), 2u);   // count
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 16), 2u);  // devices_now
  EXPECT_EQ(PayloadAt<uint16_t>(ev, 24), HZ_DEV_GPU);
  ASSERT_TRUE(NextEventOf(a_, HZ_TOPIC_HINT, 0, &ev));
  EXPECT_EQ(PayloadAt<uint32_t>(ev, 0), 256u);  // all the GPUs it ever had: the largest batch
  EXPECT_EQ(PayloadAt<uint32_t>(ev, 16), 2u);   // n_now

  // The operator sees the allocation behind the reservation.
  int rc = -1;
  json allocs = host_.Hzctl("allocations", &rc);
  ASSERT_EQ(rc, 0);
  bool found = false;
  for (const json& al : allocs["result"]) {
    if (al.value("reservation", uint64_t{0}) == rid) {
      found = true;
      EXPECT_EQ(al["tenant"], "ta");
      EXPECT_EQ(al["devices"].size(), 2u);
    }
  }
  EXPECT_TRUE(found) << allocs.dump();
  hz_topology* t = nullptr;
  ASSERT_EQ(hz_topology_get(a_, &t), HZ_OK);
  EXPECT_EQ(t->header.num_devices, 2u);
  hz_topology_free(t);

  // Scale down by one, then give back the rest.
  ASSERT_EQ(hz_neg_release(a_, rid, 1), HZ_OK);
  ASSERT_TRUE(NextEventOf(a_, HZ_TOPIC_CAPACITY, 3 /* RESERVATION_RELEASED */, &ev));
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 16), 1u);
  ASSERT_TRUE(NextEventOf(a_, HZ_TOPIC_HINT, 0, &ev));
  EXPECT_EQ(PayloadAt<uint32_t>(ev, 0), 128u);  // half the peak: half the batch
  EXPECT_EQ(hz_neg_release(a_, rid, 5), HZ_EINVAL);
  EXPECT_EQ(hz_neg_release(b_, rid, 0), HZ_EPERM);
  ASSERT_EQ(hz_neg_release(a_, rid, 0), HZ_OK);
  EXPECT_EQ(hz_neg_release(a_, rid, 0), HZ_ESTATE);
  // Acknowledged: none is the tenant's any more, and all leave its VM.
  EXPECT_TRUE(host_.DevicesOf("ta", /*releasing=*/false).empty());
  EXPECT_TRUE(host_.WaitUntilDevicesOf("ta", 0));
  // Nothing of this reached the other tenant.
  EXPECT_EQ(hz_event_next(b_, &ev, 200), HZ_ETIMEDOUT);
}

TEST_F(ServiceEngineNegotiation, CounterAndDecline) {
  hz_neg_request req = Gpus(2);
  hz_negotiation n{};
  ASSERT_EQ(hz_neg_start(a_, &req, &n), HZ_OK);
  ASSERT_GE(n.num_offers, 1u);
  const uint64_t old_offer = n.offers[0].offer_id;

  hz_neg_request more = Gpus(3);
  hz_negotiation c{};
  ASSERT_EQ(hz_neg_counter(a_, n.id, &more, &c), HZ_OK);
  EXPECT_EQ(c.id, n.id);
  EXPECT_EQ(c.round, 2u);
  ASSERT_GE(c.num_offers, 1u);
  EXPECT_EQ(c.offers[0].count, 3u);
  uint64_t rid = 0;
  EXPECT_EQ(hz_neg_accept(a_, old_offer, &rid), HZ_ENOENT) << "the counter released it";

  ASSERT_EQ(hz_neg_decline(a_, n.id), HZ_OK);
  EXPECT_EQ(hz_neg_decline(a_, n.id), HZ_ENOENT);
  EXPECT_EQ(hz_neg_accept(a_, c.offers[0].offer_id, &rid), HZ_ENOENT);
  EXPECT_EQ(hz_neg_counter(a_, n.id, &more, &c), HZ_ENOENT);
  json neg = host_.Control({{"cmd", "negotiation.list"}});
  EXPECT_TRUE(neg["result"]["offers"].empty()) << neg.dump();
  EXPECT_TRUE(neg["result"]["reservations"].empty()) << neg.dump();
}

TEST_F(ServiceEngineNegotiation, TenantsNeverReachEachOthersNegotiations) {
  ASSERT_EQ(hz_event_subscribe(b_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  hz_neg_request req = Gpus(1);
  hz_negotiation n{};
  ASSERT_EQ(hz_neg_start(a_, &req, &n), HZ_OK);
  ASSERT_GE(n.num_offers, 1u);
  uint64_t rid = 0;
  EXPECT_EQ(hz_neg_accept(b_, n.offers[0].offer_id, &rid), HZ_EPERM);
  EXPECT_EQ(hz_neg_decline(b_, n.id), HZ_EPERM);
  hz_negotiation c{};
  EXPECT_EQ(hz_neg_counter(b_, n.id, &req, &c), HZ_EPERM);
  // b's own request is answered with b's offers only.
  hz_negotiation nb{};
  ASSERT_EQ(hz_neg_start(b_, &req, &nb), HZ_OK);
  ASSERT_GE(nb.num_offers, 1u);
  std::set<uint64_t> mine;
  for (uint32_t i = 0; i < n.num_offers; ++i) mine.insert(n.offers[i].offer_id);
  for (uint32_t i = 0; i < nb.num_offers; ++i) EXPECT_EQ(mine.count(nb.offers[i].offer_id), 0u);
  ASSERT_EQ(hz_neg_accept(a_, n.offers[0].offer_id, &rid), HZ_OK);
  EXPECT_EQ(hz_neg_release(b_, rid, 0), HZ_EPERM);
  // a's reservation starting is no event of b's.
  hz_event ev{};
  EXPECT_FALSE(NextEventOf(b_, HZ_TOPIC_CAPACITY, 1, &ev, 500));
}

TEST_F(ServiceEngineNegotiation, BadRequestsGetClearStatuses) {
  hz_negotiation n{};
  hz_neg_request r = Gpus(0);
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_EINVAL);  // count 0
  r = Gpus(1);
  r.kind = 7;
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_EINVAL);
  r = Gpus(1);
  r.locality = 9;
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_EINVAL);
  r = Gpus(1);
  r.latest_start_s = r.earliest_start_s - 100;
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_EINVAL);
  r = Gpus(1);
  r.duration_s = 0;
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_EINVAL);
  r = Gpus(1, 400 * 86400);
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_ELIMIT);  // beyond the longest duration
  r = Gpus(1);
  r.latest_start_s = UnixNow() + 30 * 86400;
  EXPECT_EQ(hz_neg_start(a_, &r, &n), HZ_ELIMIT);  // beyond the lookahead
  uint64_t rid = 0;
  EXPECT_EQ(hz_neg_accept(a_, 0x1234567890ull, &rid), HZ_ENOENT);
  EXPECT_EQ(hz_neg_decline(a_, 0x1234567890ull), HZ_ENOENT);
  EXPECT_EQ(hz_neg_release(a_, 0x1234567890ull, 0), HZ_ENOENT);
  uint32_t s = 0;
  EXPECT_EQ(hz_hint_declare(a_, 64, 32, 8, &s), HZ_EINVAL);
  EXPECT_EQ(hz_hint_declare(a_, 8, 32, 0, &s), HZ_EINVAL);
  // A request that can never be met is answered, with no offers.
  r = Gpus(9);
  ASSERT_EQ(hz_neg_start(a_, &r, &n), HZ_OK);
  EXPECT_EQ(n.num_offers, 0u);
}

// What libharmonaize cannot send: short result spaces, reserved fields,
// truncated arguments.
TEST_F(ServiceEngineNegotiation, WireLevelChecks) {
  HzClient c;
  hz_close(a_);  // one front-end per socket
  a_ = nullptr;
  bool connected = false;
  for (int i = 0; i < 500 && !connected; ++i) {
    connected = c.Connect(socks_a_[0]);
    if (!connected) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(connected);
  ASSERT_EQ(c.Hello((1ull << HZ_F_NEGOTIATION) | (1ull << HZ_F_TOPOLOGY) | (1ull << HZ_F_HINTS)),
            HZ_S_OK);
  hz_neg_request r = Gpus(1);
  Reply rep = c.Call(HZ_VQ_CONTROL, HZ_OP_NEG_REQUEST, &r, sizeof(r), nullptr, 0, 64);
  EXPECT_EQ(rep.status, HZ_S_ETOOSMALL);
  EXPECT_EQ(rep.st.detail, 336u);
  r.reserved = 1;
  rep = c.Call(HZ_VQ_CONTROL, HZ_OP_NEG_REQUEST, &r, sizeof(r), nullptr, 0, 336);
  EXPECT_EQ(rep.status, HZ_S_ENOTSUP);
  rep = c.Call(HZ_VQ_CONTROL, HZ_OP_NEG_REQUEST, &r, 16, nullptr, 0, 336);
  EXPECT_EQ(rep.status, HZ_S_EINVAL);
  hz_neg_release_args rel{};
  rel.reservation_id = 1;
  rel.reserved2 = 1;
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_NEG_RELEASE, rel).status, HZ_S_ENOTSUP);
  hz_hint_declare_args h{8, 64, 8, 1};
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_HINT_DECLARE, h).status, HZ_S_ENOTSUP);
  // TOPOLOGY_GET takes no arguments; a short result space gets the size.
  uint64_t junk = 0;
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, HZ_OP_TOPOLOGY_GET, junk).status, HZ_S_EINVAL);
  ASSERT_TRUE(host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 2}}).value("ok", false));
  rep = c.Call(HZ_VQ_CONTROL, HZ_OP_TOPOLOGY_GET, nullptr, 0, nullptr, 0, 16);
  EXPECT_EQ(rep.status, HZ_S_ETOOSMALL);
  EXPECT_GT(rep.st.detail, 16u);
  rep = c.Call(HZ_VQ_CONTROL, HZ_OP_TOPOLOGY_GET, nullptr, 0, nullptr, 0, rep.st.detail);
  EXPECT_EQ(rep.status, HZ_S_OK);
  // A request on a data queue is refused.
  r.reserved = 0;
  rep = c.Call(HZ_VQ_REQUEST_BASE, HZ_OP_NEG_REQUEST, &r, sizeof(r), nullptr, 0, 336);
  EXPECT_EQ(rep.status, HZ_S_EQUEUE);
}

TEST_F(ServiceEngineNegotiation, ExpiredOfferCannotBeAccepted) {
  ASSERT_EQ(hz_event_subscribe(a_, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  hz_neg_request req = Gpus(1);
  hz_negotiation n{};
  ASSERT_EQ(hz_neg_start(a_, &req, &n), HZ_OK);
  ASSERT_GE(n.num_offers, 1u);
  hz_event ev{};
  // The offer lives at most offer_ttl_s (10 s here).
  ASSERT_TRUE(NextEventOf(a_, HZ_TOPIC_NEGOTIATION, 2 /* OFFER_EXPIRED */, &ev));
  EXPECT_GE(UnixNow(), n.offers[0].expires_s);
  uint64_t rid = 0;
  bool expired_first = false;
  for (uint32_t i = 0; i < n.num_offers; ++i) {
    if (PayloadAt<uint64_t>(ev, 16) == n.offers[i].offer_id) expired_first = true;
  }
  EXPECT_TRUE(expired_first);
  EXPECT_EQ(hz_neg_accept(a_, n.offers[0].offer_id, &rid), HZ_ENOENT);
}

}  // namespace

namespace {

// One GPU now: a request every tenant may open.
hz_neg_request OneGpu() {
  hz_neg_request r{};
  r.kind = HZ_DEV_GPU;
  r.count = 1;
  r.locality = HZ_LOC_ANY;
  r.earliest_start_s = UnixNow();
  r.latest_start_s = UnixNow() + 60;
  r.duration_s = 60;
  return r;
}

TEST(ServiceNegotiationLimit, ATenantsOwnLimitOfOpenNegotiationsHoldsAndOthersKeepTheDefault) {
  hz::testing::ProviderHost host;
  ASSERT_TRUE(host.Start());
  std::string out;
  ASSERT_EQ(host.svc().Hzctl(HZ_HZCTL_PATH, "tenant create small --max-open-negotiations 2", &out),
            0)
      << out;
  std::vector<std::string> small = host.svc().TenantWithVms("small", 1);
  std::vector<std::string> other = host.svc().TenantWithVms("other", 1);
  ASSERT_EQ(small.size(), 1u);
  ASSERT_EQ(other.size(), 1u);
  hz_device_t* s = OpenVm(small[0]);
  hz_device_t* o = OpenVm(other[0]);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(o, nullptr);

  hz_neg_request req = OneGpu();
  hz_negotiation n{};
  EXPECT_EQ(hz_neg_start(s, &req, &n), HZ_OK);
  EXPECT_EQ(hz_neg_start(s, &req, &n), HZ_OK);
  EXPECT_EQ(hz_neg_start(s, &req, &n), HZ_ELIMIT);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(hz_neg_start(o, &req, &n), HZ_OK) << i;
  hz_close(s);
  hz_close(o);

  // The operator sees the limit, and it survives a restart.
  for (int pass = 0; pass < 2; ++pass) {
    json list = host.Hzctl("tenant list")["result"];
    ASSERT_TRUE(list.is_array()) << list.dump();
    ASSERT_EQ(list.size(), 2u) << list.dump();
    for (const json& t : list) {
      const uint64_t expected = t.value("name", std::string()) == "small" ? 2 : 0;
      EXPECT_EQ(t.value("max_open_negotiations", uint64_t{99}), expected) << t.dump();
    }
    if (pass == 0) {
      ASSERT_EQ(host.svc().Terminate(), 0);
      ASSERT_TRUE(host.svc().Start({"--config", host.svc().dir() + "/harmonaized.toml"}));
    }
  }
  // More than the most any tenant may have is refused.
  EXPECT_NE(
      host.svc().Hzctl(HZ_HZCTL_PATH, "tenant create big --max-open-negotiations 65537", &out), 0);
}

}  // namespace
