#include <gtest/gtest.h>

#include "hz/service/control_api.h"

namespace hz::service {
namespace {

using json = nlohmann::json;

class FakeTarget : public ControlTarget {
 public:
  hz::Status CreateTenant(const TenantSpec& spec) override {
    created.push_back(spec);
    return reg.Create(spec);
  }
  hz::Status RemoveTenant(const std::string& name, bool purge) override {
    purged = purge;
    return reg.Remove(name);
  }
  bool purged = false;
  hz::Status SetTenantFeatures(const std::string& name, uint64_t features) override {
    std::shared_ptr<Tenant> t = reg.Find(name);
    if (!t) return hz::Status::NotFound("no tenant " + name);
    t->set_features(features);
    return hz::Status::Ok();
  }
  hz::StatusOr<std::string> BindVm(const std::string& tenant, const std::string& path,
                                   const std::string& domain) override {
    if (!reg.Find(tenant)) return hz::Status::NotFound("no tenant " + tenant);
    std::string resolved = path[0] == '/' ? path : "/vms/" + path;
    bound.push_back(resolved);
    domains.push_back(domain);
    return resolved;
  }
  hz::Status UnbindVm(const std::string& path, const std::string& /*domain*/) override {
    if (std::erase(bound, path) == 0) return hz::Status::NotFound(path + " is not bound");
    return hz::Status::Ok();
  }
  std::vector<std::shared_ptr<Tenant>> Tenants() const override { return reg.List(); }
  std::vector<VmView> Vms() const override {
    VmView v;
    v.socket_path = "/vms/a.sock";
    v.tenant = "t1";
    v.listening = true;
    DeviceInfo d;
    d.connected = true;
    d.hello = true;
    d.regions = 2;
    d.comms.push_back({1, 42, 0, 4});
    v.devices.push_back(d);
    return {v};
  }
  std::vector<CommSummary> Communicators() const override {
    CommSummary c;
    c.id = 42;
    c.nranks = 4;
    c.state = "active";
    return {c};
  }
  json Status() const override { return {{"draining", false}}; }
  json Counters() const override { return {{"requests", json::array()}}; }
  TenantLimits DefaultTenantLimits() const override {
    TenantLimits l;
    l.max_regions = 7;
    return l;
  }

  hz::StatusOr<VmAttachment> AttachVm(const VmAttachRequest& req) override {
    attached.push_back(req);
    return VmAttachment{req.domain, req.tenant, "/vms/" + req.domain + ".sock", true, true};
  }
  hz::StatusOr<VmAttachment> DetachVm(const std::string& domain) override {
    if (attached.empty()) return hz::Status::NotFound("no device in " + domain);
    return VmAttachment{domain, attached.back().tenant, "/vms/x.sock", false, false};
  }

  TenantRegistry reg;
  std::vector<VmAttachRequest> attached;
  std::vector<TenantSpec> created;
  std::vector<std::string> bound;
  std::vector<std::string> domains;  // as each bind named it
};

class ControlApiTest : public ::testing::Test {
 protected:
  json Do(const std::string& line) { return api.Handle(line); }
  FakeTarget target;
  ControlApi api{&target};
};

TEST_F(ControlApiTest, MalformedInputIsAnErrorNeverACrash) {
  for (const char* bad : {"", "{", "nul", "[1,2]", "42", "\"x\"", "{\"cmd\":5}", "{\"nocmd\":1}",
                          "{\"cmd\":\"tenant.create\"}", "{\"cmd\":\"bogus\"}",
                          "{\"cmd\":\"ping\",\"extra\":1}", "\xff\xfe"}) {
    json r = Do(bad);
    EXPECT_FALSE(r.value("ok", true)) << bad;
    EXPECT_TRUE(r["error"].is_string()) << bad;
  }
}

TEST_F(ControlApiTest, PingEchoesId) {
  json r = Do(R"({"cmd":"ping","id":"abc"})");
  EXPECT_TRUE(r["ok"].get<bool>());
  EXPECT_EQ(r["result"], "pong");
  EXPECT_EQ(r["id"], "abc");
}

TEST_F(ControlApiTest, TenantCreateListRemove) {
  json r = Do(
      R"({"cmd":"tenant.create","name":"t1","weight":3,"priority":"high","max_region_bytes":1000})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  ASSERT_EQ(target.created.size(), 1u);
  EXPECT_EQ(target.created[0].weight, 3u);
  EXPECT_EQ(target.created[0].priority, HZ_PRIO_HIGH);
  EXPECT_EQ(target.created[0].limits.max_region_bytes, 1000u);
  EXPECT_EQ(target.created[0].limits.max_regions, 7u) << "defaults fill what is not given";
  r = Do(R"({"cmd":"tenant.create","name":"t1"})");
  EXPECT_FALSE(r["ok"].get<bool>());
  EXPECT_NE(r["error"].get<std::string>().find("exists"), std::string::npos);
  EXPECT_FALSE(Do(R"({"cmd":"tenant.create","name":"t2","weight":-1})")["ok"].get<bool>());
  EXPECT_FALSE(Do(R"({"cmd":"tenant.create","name":"t2","priority":"urgent"})")["ok"].get<bool>());
  EXPECT_FALSE(Do(R"({"cmd":"tenant.create","name":"t2","max_regions":1e20})")["ok"].get<bool>());
  r = Do(R"({"cmd":"tenant.list"})");
  ASSERT_EQ(r["result"].size(), 1u);
  EXPECT_EQ(r["result"][0]["name"], "t1");
  EXPECT_EQ(r["result"][0]["priority"], "high");
  EXPECT_TRUE(Do(R"({"cmd":"tenant.remove","name":"t1"})")["ok"].get<bool>());
  EXPECT_FALSE(target.purged);
  EXPECT_FALSE(Do(R"({"cmd":"tenant.remove","name":"t1"})")["ok"].get<bool>());
}

TEST_F(ControlApiTest, TenantCreateTakesAnExtentQuota) {
  json r = Do(R"({"cmd":"tenant.create","name":"t1","max_extents":12})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  ASSERT_EQ(target.created.size(), 1u);
  EXPECT_EQ(target.created[0].limits.max_extents, 12u);
  r = Do(R"({"cmd":"tenant.list"})");
  EXPECT_EQ(r["result"][0]["max_extents"], 12u);
  EXPECT_EQ(r["result"][0]["extents"], 0u);
}

TEST_F(ControlApiTest, TenantFeaturesAreNamedSetAndShown) {
  ASSERT_TRUE(Do(R"({"cmd":"tenant.create","name":"all"})")["ok"].get<bool>());
  EXPECT_EQ(target.created[0].features, kEveryFeature) << "by default every feature";
  json r = Do(R"({"cmd":"tenant.create","name":"few","features":["events","inline-data"]})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(target.created[1].features, (1ull << HZ_F_EVENTS) | (1ull << HZ_F_INLINE_DATA));
  for (const char* bad : {R"({"cmd":"tenant.create","name":"x","features":"events"})",
                          R"({"cmd":"tenant.create","name":"x","features":[3]})",
                          R"({"cmd":"tenant.create","name":"x","features":["warp"]})",
                          R"({"cmd":"tenant.features","name":"few"})",
                          R"({"cmd":"tenant.features","name":"few","features":["warp"]})",
                          R"({"cmd":"tenant.features","name":"ghost","features":["all"]})",
                          R"({"cmd":"tenant.features","name":"few","features":[],"x":1})"}) {
    r = Do(bad);
    EXPECT_FALSE(r["ok"].get<bool>()) << bad;
    EXPECT_TRUE(r["error"].is_string()) << bad;
  }
  EXPECT_EQ(target.created.size(), 2u);
  r = Do(R"({"cmd":"tenant.features","name":"all","features":["none"]})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["features"], json::array());
  r = Do(R"({"cmd":"tenant.list"})");
  EXPECT_EQ(r["result"][0]["features"], json::array());
  EXPECT_EQ(r["result"][1]["features"], json({"events", "inline-data"}));
}

TEST_F(ControlApiTest, TenantRemovePurgeIsAnExplicitBoolean) {
  ASSERT_TRUE(Do(R"({"cmd":"tenant.create","name":"t1"})")["ok"].get<bool>());
  EXPECT_FALSE(Do(R"({"cmd":"tenant.remove","name":"t1","purge":"yes"})")["ok"].get<bool>());
  EXPECT_TRUE(Do(R"({"cmd":"tenant.remove","name":"t1","purge":true})")["ok"].get<bool>());
  EXPECT_TRUE(target.purged);
}

TEST_F(ControlApiTest, VmBindUnbindList) {
  EXPECT_FALSE(Do(R"({"cmd":"vm.bind","tenant":"t1","socket":"a.sock"})")["ok"].get<bool>());
  Do(R"({"cmd":"tenant.create","name":"t1"})");
  json r = Do(R"({"cmd":"vm.bind","tenant":"t1","socket":"a.sock"})");
  ASSERT_TRUE(r["ok"].get<bool>());
  EXPECT_EQ(r["result"]["socket"], "/vms/a.sock");
  r = Do(R"({"cmd":"vm.list"})");
  ASSERT_EQ(r["result"].size(), 1u);
  EXPECT_EQ(r["result"][0]["devices"][0]["communicators"][0]["comm_id"], 42);
  EXPECT_EQ(r["result"][0]["devices"][0]["regions"], 2);
  EXPECT_TRUE(Do(R"({"cmd":"vm.unbind","socket":"/vms/a.sock"})")["ok"].get<bool>());
  EXPECT_FALSE(Do(R"({"cmd":"vm.unbind","socket":"/vms/a.sock"})")["ok"].get<bool>());
  EXPECT_FALSE(Do(R"({"cmd":"vm.bind","tenant":"t1"})")["ok"].get<bool>());
  // The VM's libvirt domain is optional, and a string.
  ASSERT_TRUE(Do(R"({"cmd":"vm.bind","tenant":"t1","socket":"b.sock","domain":"t1-vm"})")["ok"]
                  .get<bool>());
  EXPECT_EQ(target.domains, (std::vector<std::string>{"", "t1-vm"}));
  EXPECT_FALSE(
      Do(R"({"cmd":"vm.bind","tenant":"t1","socket":"c.sock","domain":7})")["ok"].get<bool>());
}

TEST_F(ControlApiTest, VmAttachAndDetachTakeTheirFieldsAndCheckThem) {
  EXPECT_FALSE(Do(R"({"cmd":"vm.detach","domain":"d"})")["ok"].get<bool>());
  json r = Do(R"({"cmd":"vm.attach","tenant":"t1","domain":"d"})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["socket"], "/vms/d.sock");
  EXPECT_EQ(r["result"]["running"], true);
  EXPECT_EQ(r["result"]["bound"], true);
  ASSERT_EQ(target.attached.size(), 1u);
  EXPECT_TRUE(target.attached[0].socket.empty());
  r = Do(R"({"cmd":"vm.attach","tenant":"t1","domain":"e","socket":"/s.sock"})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(target.attached[1].socket, "/s.sock");
  for (const char* bad :
       {R"({"cmd":"vm.attach","tenant":"t1"})", R"({"cmd":"vm.attach","domain":"d"})",
        R"({"cmd":"vm.attach","tenant":"t1","domain":"d","request_queues":65})",
        R"({"cmd":"vm.attach","tenant":"t1","domain":"d","queue_size":-1})",
        R"({"cmd":"vm.attach","tenant":"t1","domain":"d","shape":1})", R"({"cmd":"vm.detach"})"}) {
    EXPECT_FALSE(Do(bad)["ok"].get<bool>()) << bad;
  }
  EXPECT_EQ(target.attached.size(), 2u);
  r = Do(R"({"cmd":"vm.detach","domain":"e"})");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["bound"], false);
}

TEST_F(ControlApiTest, ViewsOfCommunicatorsStatusCounters) {
  json r = Do(R"({"cmd":"comm.list"})");
  ASSERT_TRUE(r["ok"].get<bool>());
  EXPECT_EQ(r["result"][0]["id"], 42);
  EXPECT_EQ(r["result"][0]["state"], "active");
  EXPECT_EQ(Do(R"({"cmd":"status"})")["result"]["draining"], false);
  EXPECT_TRUE(Do(R"({"cmd":"counters"})")["result"]["requests"].is_array());
}

}  // namespace
}  // namespace hz::service
