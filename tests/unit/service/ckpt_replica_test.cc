// The peer-host tier's pieces that need no cluster: where a replica goes,
// and the request the store carries (input like any other).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "ckpt_replica.h"
#include "ckpt_replica_wire.h"

namespace hz::service {
namespace {

cluster::HostInfo Host(const std::string& name, bool self = false,
                       std::vector<std::string> tenants = {}) {
  cluster::HostInfo h;
  h.name = name;
  h.self = self;
  for (const auto& t : tenants) h.attributes["tenants"][t] = nlohmann::json::object();
  return h;
}

TEST(ReplicaPlacement, NeverThisHostAndNoneWhenAlone) {
  EXPECT_FALSE(ChooseReplicaHost({}, "acme", 1));
  EXPECT_FALSE(ChooseReplicaHost({Host("h0", true, {"acme"})}, "acme", 1));
  for (uint32_t stream = 1; stream < 50; ++stream) {
    auto h = ChooseReplicaHost({Host("h0", true), Host("h1"), Host("h2")}, "acme", stream);
    ASSERT_TRUE(h);
    EXPECT_NE(*h, "h0");
  }
}

TEST(ReplicaPlacement, PrefersAHostWhereTheTenantHasDevices) {
  std::vector<cluster::HostInfo> hosts = {Host("h0", true, {"acme"}), Host("h1", false, {"eve"}),
                                          Host("h2", false, {"acme", "eve"}), Host("h3")};
  for (uint32_t stream = 1; stream < 50; ++stream) {
    EXPECT_EQ(ChooseReplicaHost(hosts, "acme", stream), "h2");
  }
  // Without such a host, any other live member; streams spread, each stays put.
  std::set<std::string> chosen;
  for (uint32_t stream = 1; stream < 50; ++stream) {
    auto h = ChooseReplicaHost(hosts, "zeta", stream);
    ASSERT_TRUE(h);
    EXPECT_EQ(h, ChooseReplicaHost(hosts, "zeta", stream));
    chosen.insert(*h);
  }
  EXPECT_EQ(chosen, (std::set<std::string>{"h1", "h2", "h3"}));
}

ReplicaRequest Sample() {
  ReplicaRequest r;
  r.id = "00ff00ff00ff00ff00ff00ff00ff00ff";
  r.source = "h0";
  r.tenant = "acme";
  r.manifest.tenant = 7;
  r.manifest.stream = 3;
  r.manifest.step = 42;
  r.manifest.chunk_bytes = 4096;
  r.manifest.slice_sizes = {5000, 10};
  r.manifest.meta_len = 4;
  r.manifest.chunk_crcs = {1, 2};
  r.policy.retention = 3;
  r.policy.tier = checkpoint::TierKind::kPeerHost;
  r.deadline_unix_ms = 123456789;
  return r;
}

TEST(ReplicaRequestWire, RoundTrips) {
  ReplicaRequest out;
  ASSERT_TRUE(DecodeRequest(EncodeRequest(Sample()), &out).ok());
  EXPECT_EQ(out.id, Sample().id);
  EXPECT_EQ(out.tenant, "acme");
  EXPECT_EQ(out.manifest.step, 42u);
  EXPECT_EQ(out.manifest.chunk_crcs, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(out.policy.retention, 3u);
  EXPECT_EQ(out.policy.tier, checkpoint::TierKind::kPeerHost);
  EXPECT_EQ(out.deadline_unix_ms, 123456789u);
}

TEST(ReplicaForgetWire, RoundTripsAndRefusesWhatIsNotAForget) {
  ReplicaForget f{"h0", "acme", 3, 77, 0xdeadbeef}, out;
  ASSERT_TRUE(DecodeForget(EncodeForget(f), &out).ok());
  EXPECT_EQ(out.source, "h0");
  EXPECT_EQ(out.tenant, "acme");
  EXPECT_EQ(out.stream, 3u);
  EXPECT_EQ(out.step, 77u);
  EXPECT_EQ(out.digest, 0xdeadbeefu);
  // A replica request is not a forget, nor is a forget a request.
  EXPECT_FALSE(DecodeForget(EncodeRequest(Sample()), &out).ok());
  ReplicaRequest req;
  EXPECT_FALSE(DecodeRequest(EncodeForget(f), &req).ok());
  for (const char* bad :
       {"", "{}", "[1]", R"({"version":1,"forget":{}})",
        R"({"version":2,"forget":{"source":"h","tenant":"a","stream":1,"step":1,"digest":1}})",
        R"({"version":1,"forget":{"source":"h","tenant":"a","stream":0,"step":1,"digest":1}})",
        R"({"version":1,"forget":{"source":"h","tenant":"a","stream":1,"step":0,"digest":1}})",
        R"({"version":1,"forget":{"source":"h","tenant":"../x","stream":1,"step":1,"digest":1}})",
        R"({"version":1,"forget":{"source":"h","tenant":"a","stream":1,"step":1,"digest":-1}})"}) {
    EXPECT_EQ(DecodeForget(bad, &out).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ReplicaRequestWire, RefusesWhatIsNotARequest) {
  ReplicaRequest out;
  auto with = [](auto edit) {
    nlohmann::json j = nlohmann::json::parse(EncodeRequest(Sample()));
    edit(j);
    return j.dump();
  };
  for (const std::string& text :
       {std::string("not json"), std::string("[]"), std::string(kMaxReplicaRequestBytes + 1, ' '),
        with([](auto& j) { j["version"] = 2; }), with([](auto& j) { j["tenant"] = "../x"; }),
        with([](auto& j) { j["id"] = "key/../../other"; }),
        with([](auto& j) { j["policy"]["retention"] = 0; }),
        with([](auto& j) { j["policy"]["tier"] = 3; }), with([](auto& j) { j["manifest"] = "{}"; }),
        with([](auto& j) { j.erase("deadline_unix_ms"); })}) {
    EXPECT_EQ(DecodeRequest(text, &out).code(), StatusCode::kInvalidArgument) << text.substr(0, 80);
  }
  // A manifest edited in transit fails its own checksum.
  std::string text = EncodeRequest(Sample());
  text.replace(text.find("5000"), 4, "5001");
  EXPECT_EQ(DecodeRequest(text, &out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hz::service
