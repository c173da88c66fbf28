// Maintenance as a workflow, end to end: the operator schedules a maintenance
// of the host (the control API, as hzctl maintenance sends it); every tenant
// with a VM there is told and no other; approvals, or the start time, start
// it: STARTED goes out, the hook runs and nothing new is placed until the
// operator completes it. A maintenance of one VM saves only that VM's
// streams just in time. Tenants use only libharmonaize.
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace {

using hz::testing::ServiceProcess;
using json = nlohmann::json;

constexpr int kWaitMs = 15000;  // only detects hangs

struct MaintenancePayload {  // SPEC §8.3.2
  uint64_t duration_s;
  uint32_t device_index;
  uint32_t reserved;
};

class ServiceMaintenance : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    const std::string fixtures = HZ_SCHED_FIXTURES;
    const std::string sysfs = svc_.dir() + "/sysfs";
    fs::copy(fixtures + "/hgx8/sysfs", sysfs,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    hook_out_ = svc_.dir() + "/hook.out";
    const std::string hook = svc_.dir() + "/hook.sh";
    std::ofstream(hook) << "#!/bin/sh\necho \"$@\" >> " << hook_out_ << "\n";
    chmod(hook.c_str(), 0755);
    const std::string config = svc_.WriteConfig(
        "[scheduler]\nsysfs_root = \"" + sysfs + "\"\nprovider_file = \"" + fixtures +
        "/hgx8/inventory.toml\"\nsync = false\n[maintenance]\nhook = \"" + hook + "\"\n");
    ASSERT_TRUE(svc_.Start({"--config", config, "--metrics-port", "0"}));
    json s = svc_.Control({{"cmd", "maintenance.status"}});
    ASSERT_TRUE(s.value("ok", false)) << s.dump();
    host_ = s["result"]["host"];
  }
  void TearDown() override {
    for (hz_device_t* d : devs_) hz_close(d);
  }

  hz_device_t* Open(const std::string& sock) {
    hz_device_t* d = nullptr;
    EXPECT_EQ(hz_open(("vhost-user:" + sock).c_str(), &d), HZ_OK);
    if (d != nullptr) devs_.push_back(d);
    return d;
  }

  // The next maintenance event, acknowledging what comes before; false on a
  // timeout.
  static bool NextMaintenance(hz_device_t* d, hz_event* ev, int timeout_ms = kWaitMs) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      if (hz_event_next(d, ev, 200) != HZ_OK) continue;
      if (ev->topic == HZ_TOPIC_MAINTENANCE) return true;
      EXPECT_EQ(hz_event_ack(d, ev->seq, 0), HZ_OK);
    }
    return false;
  }

  json Schedule(const json& fields) {
    json req = fields;
    req["cmd"] = "maintenance.schedule";
    if (!req.contains("host")) req["host"] = host_;
    if (!req.contains("duration_s")) req["duration_s"] = 600;
    return svc_.Control(req);
  }

  json Maintenance(uint64_t id) {
    json s = svc_.Control({{"cmd", "maintenance.status"}});
    for (const json& m : s["result"]["maintenances"]) {
      if (m["id"] == id) return m;
    }
    return json();
  }

  // Waits until maintenance id reaches state; its status then.
  json WaitState(uint64_t id, const std::string& state) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    json m;
    while (std::chrono::steady_clock::now() < until) {
      m = Maintenance(id);
      if (m.value("state", "") == state) return m;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return m;
  }

  std::string HookOutput() const {
    std::ifstream in(hook_out_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  ServiceProcess svc_;
  std::string host_;
  std::string hook_out_;
  std::vector<hz_device_t*> devs_;
};

TEST_F(ServiceMaintenance, EveryTenantOnTheHostIsToldAndTheirApprovalsStartIt) {
  std::vector<std::string> a = svc_.TenantWithVms("ma", 2);
  std::vector<std::string> b = svc_.TenantWithVms("mb", 1);
  ASSERT_TRUE(svc_.Control({{"cmd", "tenant.create"}, {"name", "idle"}}).value("ok", false));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 1u);
  std::vector<hz_device_t*> vms = {Open(a[0]), Open(a[1]), Open(b[0])};
  for (hz_device_t* d : vms) {
    ASSERT_NE(d, nullptr);
    ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  }
  const uint64_t now = static_cast<uint64_t>(std::time(nullptr));
  json r = Schedule({{"in_s", 3600}, {"duration_s", 905}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const uint64_t id = r["result"]["maintenance"];
  const uint64_t at = r["result"]["at_s"];
  EXPECT_GE(at, now + 3600);
  EXPECT_EQ(r["result"]["told"], 2);

  // Each VM of both tenants reads the notice, coarse and approvable.
  std::vector<hz_event> notices(vms.size());
  for (size_t i = 0; i < vms.size(); ++i) {
    ASSERT_TRUE(NextMaintenance(vms[i], &notices[i])) << i;
    const hz_event& ev = notices[i];
    EXPECT_EQ(ev.kind, 0);  // SCHEDULED
    EXPECT_TRUE(ev.flags & HZ_EVENT_F_APPROVABLE);
    EXPECT_EQ(ev.deadline_s, at / 10 * 10);
    MaintenancePayload p;
    std::memcpy(&p, ev.payload, sizeof(p));
    EXPECT_EQ(p.duration_s, 900u);
    EXPECT_EQ(p.device_index, 0xFFFFFFFFu);
  }
  json m = Maintenance(id);
  ASSERT_EQ(m["told"].size(), 2u);
  EXPECT_EQ(m["told"][0]["tenant"], "ma");
  EXPECT_EQ(m["told"][1]["tenant"], "mb");
  EXPECT_EQ(m["state"], "scheduled");

  // One tenant approving is not enough.
  ASSERT_EQ(hz_event_ack(vms[0], notices[0].seq, HZ_ACK_F_APPROVE), HZ_OK);
  m = Maintenance(id);
  EXPECT_NE(m["told"][0]["approved_s"], 0);
  EXPECT_EQ(m["state"], "scheduled");
  EXPECT_TRUE(svc_.Control({{"cmd", "alloc"}, {"tenant", "idle"}, {"gpus", 1}}).value("ok", false));
  // The operator's metrics say so too.
  const json st = svc_.Control({{"cmd", "status"}});
  const std::string metrics =
      hz::testing::HttpGet(st["result"]["metrics_port"].get<uint16_t>(), "/metrics");
  EXPECT_NE(metrics.find("hz_maintenances{state=\"scheduled\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("hz_maintenance_tenants_unapproved 1\n"), std::string::npos) << metrics;

  // The last approval starts it, long before its time.
  ASSERT_EQ(hz_event_ack(vms[2], notices[2].seq, HZ_ACK_F_APPROVE), HZ_OK);
  m = WaitState(id, "started");
  ASSERT_EQ(m["state"], "started") << m.dump();
  EXPECT_TRUE(m["started_early"].get<bool>());
  hz_event started{};
  for (hz_device_t* d : vms) {
    ASSERT_TRUE(NextMaintenance(d, &started));
    EXPECT_EQ(started.kind, 1);  // STARTED
    EXPECT_EQ(started.flags & HZ_EVENT_F_APPROVABLE, 0u);
  }
  // Nothing new is placed on the host while it is under way.
  json alloc = svc_.Control({{"cmd", "alloc"}, {"tenant", "idle"}, {"gpus", 1}});
  EXPECT_FALSE(alloc.value("ok", false));
  EXPECT_NE(alloc.value("error", "").find("maintenance"), std::string::npos) << alloc.dump();
  // The hook ran with the maintenance's id and host.
  const std::string want = "start " + std::to_string(id) + " " + host_ + "\n";
  for (int i = 0; i < 200 && HookOutput() != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(HookOutput(), want);
  // The hook's exit is recorded once its thread has waited for it, a moment
  // after its output is written.
  json hook;
  for (int i = 0; i < 200 && hook != "start: exit 0"; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    hook = Maintenance(id).value("hook", json());
  }
  EXPECT_EQ(hook, "start: exit 0");

  json done = svc_.Control({{"cmd", "maintenance.complete"}, {"maintenance", id}});
  ASSERT_TRUE(done.value("ok", false)) << done.dump();
  hz_event completed{};
  ASSERT_TRUE(NextMaintenance(vms[2], &completed));
  EXPECT_EQ(completed.kind, 3);  // COMPLETED
  EXPECT_TRUE(svc_.Control({{"cmd", "alloc"}, {"tenant", "idle"}, {"gpus", 1}}).value("ok", false));
  // The idle tenant, with no VM and nothing placed when it was scheduled, was never told.
  json told = Maintenance(id)["told"];
  for (const json& t : told) EXPECT_NE(t["tenant"], "idle");
}

TEST_F(ServiceMaintenance, ItStartsAtItsTimeWithoutApprovals) {
  std::vector<std::string> a = svc_.TenantWithVms("late", 1);
  hz_device_t* d = Open(a[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  json r = Schedule({{"in_s", 1}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  json m = WaitState(r["result"]["maintenance"], "started");
  EXPECT_EQ(m["state"], "started");
  EXPECT_FALSE(m["started_early"].get<bool>());
  EXPECT_EQ(m["told"][0]["approved_s"], 0);
  hz_event ev{};
  ASSERT_TRUE(NextMaintenance(d, &ev));
  EXPECT_EQ(ev.kind, 0);
  ASSERT_EQ(hz_event_ack(d, ev.seq, 0), HZ_OK);
  ASSERT_TRUE(NextMaintenance(d, &ev));
  EXPECT_EQ(ev.kind, 1);
}

TEST_F(ServiceMaintenance, ACancelledMaintenanceTellsTheTenantsAndNeverStarts) {
  std::vector<std::string> a = svc_.TenantWithVms("cx", 1);
  hz_device_t* d = Open(a[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  json r = Schedule({{"in_s", 3600}});
  ASSERT_TRUE(r.value("ok", false));
  const uint64_t id = r["result"]["maintenance"];
  json c = svc_.Control({{"cmd", "maintenance.cancel"}, {"maintenance", id}});
  ASSERT_TRUE(c.value("ok", false)) << c.dump();
  hz_event ev{};
  ASSERT_TRUE(NextMaintenance(d, &ev));
  ASSERT_EQ(hz_event_ack(d, ev.seq, 0), HZ_OK);
  ASSERT_TRUE(NextMaintenance(d, &ev));
  EXPECT_EQ(ev.kind, 2);  // CANCELLED
  EXPECT_EQ(Maintenance(id)["state"], "cancelled");
  EXPECT_FALSE(
      svc_.Control({{"cmd", "maintenance.complete"}, {"maintenance", id}}).value("ok", true));
  EXPECT_FALSE(
      svc_.Control({{"cmd", "maintenance.cancel"}, {"maintenance", id}}).value("ok", true));
}

TEST_F(ServiceMaintenance, BadRequestsAreRefusedByName) {
  EXPECT_FALSE(Schedule({{"host", "not-this-host"}, {"in_s", 60}}).value("ok", true));
  EXPECT_FALSE(Schedule({{"at_s", 1}}).value("ok", true));  // in the past
  EXPECT_FALSE(Schedule({}).value("ok", true));             // no start
  EXPECT_FALSE(Schedule({{"in_s", 60}, {"at_s", 99999999999}}).value("ok", true));
  json r = Schedule({{"in_s", 60}, {"vms", {"/no/such/vm.sock"}}});
  EXPECT_FALSE(r.value("ok", true));
  EXPECT_NE(r.value("error", "").find("/no/such/vm.sock"), std::string::npos) << r.dump();
  EXPECT_FALSE(
      svc_.Control({{"cmd", "maintenance.complete"}, {"maintenance", 42}}).value("ok", true));
}

// SPEC §7.5.7 with a maintenance of one VM: the streams registered by that
// VM are saved just in time, those of the tenant's other VM are not.
TEST_F(ServiceMaintenance, AMaintenanceOfOneVmSavesOnlyThatVmsStreams) {
  std::vector<std::string> socks = svc_.TenantWithVms("two", 2);
  ASSERT_EQ(socks.size(), 2u);
  hz_device_t* vm[2] = {Open(socks[0]), Open(socks[1])};
  std::vector<void*> words, states;
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_NE(vm[i], nullptr);
    const uint32_t stream = i + 1;
    hz_ckpt_policy p{HZ_CKPT_F_AUTO_SAVE_ON_NOTICE, 2, HZ_TIER_LOCAL_DISK, 1000, 0};
    ASSERT_EQ(hz_ckpt_set_policy(vm[i], stream, &p), HZ_OK);
    void* w = nullptr;
    void* s = nullptr;
    ASSERT_EQ(hz_mem_alloc(vm[i], 4096, &w), HZ_OK);
    ASSERT_EQ(hz_mem_alloc(vm[i], 16 * 1024, &s), HZ_OK);
    std::memset(s, 0x40 + static_cast<int>(i), 16 * 1024);
    auto* word = static_cast<hz_quiesce_word*>(w);
    word->step = 7;
    __atomic_store_n(&word->seq, 2, __ATOMIC_RELEASE);  // even: consistent
    hz_buf slice{s, 16 * 1024};
    ASSERT_EQ(hz_ckpt_quiesce(vm[i], stream, word, &slice, 1), HZ_OK);
  }
  ASSERT_EQ(hz_event_subscribe(vm[0], HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  json r = Schedule({{"in_s", 3600}, {"vms", {socks[0]}}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();

  // The saved stream's DURABLE counts as the tenant's checkpoint.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  json m;
  while (std::chrono::steady_clock::now() < until) {
    m = Maintenance(r["result"]["maintenance"]);
    if (!m["told"].empty() && m["told"][0]["checkpoints"] != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(m["told"][0]["checkpoints"], 1) << m.dump();
  hz_ckpt_info e[4];
  size_t n = 0;
  ASSERT_EQ(hz_ckpt_list(vm[0], 1, e, 4, &n), HZ_OK);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(e[0].step, 7u);
  ASSERT_EQ(hz_ckpt_list(vm[1], 2, e, 4, &n), HZ_OK);
  EXPECT_EQ(n, 0u);
}

// The plan survives a restart; an unreadable plan stops the service, named.
TEST_F(ServiceMaintenance, ThePlanSurvivesARestartAndACorruptOneIsRefused) {
  std::vector<std::string> a = svc_.TenantWithVms("keep", 1);
  json r = Schedule({{"in_s", 3600}});
  ASSERT_TRUE(r.value("ok", false));
  ASSERT_EQ(svc_.Terminate(), 0);
  ASSERT_TRUE(svc_.Start({"--config", svc_.dir() + "/harmonaized.toml"}));
  json m = Maintenance(r["result"]["maintenance"]);
  EXPECT_EQ(m["state"], "scheduled");
  ASSERT_EQ(m["told"].size(), 1u);
  EXPECT_EQ(m["told"][0]["tenant"], "keep");
  ASSERT_EQ(svc_.Terminate(), 0);

  const std::string path = svc_.dir() + "/maintenance.json";
  std::ofstream(path) << "{\"version\": 1, \"next_id\": ";
  std::string out;
  EXPECT_NE(svc_.RunToExit({"--config", svc_.dir() + "/harmonaized.toml"}, &out), 0);
  EXPECT_NE(out.find("maintenance.json"), std::string::npos) << out;
  std::ifstream in(path);
  std::stringstream kept;
  kept << in.rdbuf();
  EXPECT_EQ(kept.str(), "{\"version\": 1, \"next_id\": ");
}

}  // namespace
