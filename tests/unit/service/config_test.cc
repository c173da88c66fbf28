#include <gtest/gtest.h>

#include "hz/common/thread_priority.h"
#include "hz/service/config.h"
#include "hz/service/tenants.h"

namespace hz::service {
namespace {

TEST(ServiceConfigTest, DefaultsNeedNoFile) {
  ServiceConfig c;
  std::string error;
  EXPECT_TRUE(ValidateConfig(c, &error)) << error;
  EXPECT_EQ(c.ControlSocketPath(), "/var/lib/harmonaize/control.sock");
  EXPECT_EQ(c.VmSocketDir(), "/var/lib/harmonaize/vms");
  EXPECT_EQ(c.metrics_address, "127.0.0.1");
  EXPECT_FALSE(c.coll_stream_min_bytes.has_value());         // the engine's own default
  EXPECT_FALSE(c.coll_single_thread_max_bytes.has_value());  // likewise
  c.state_dir = "/tmp/x";
  EXPECT_EQ(c.ControlSocketPath(), "/tmp/x/control.sock");
}

TEST(ServiceConfigTest, ParsesEverySection) {
  const char* text = R"(
state_dir = "/srv/hz"
log_level = "debug"
log_format = "json"
worker_threads = 3
connection_poll_us = 0
region_thread_nice = 12
[control]
socket = "/run/hz/ctl.sock"
max_line_bytes = 4096
[vm]
socket_dir = "/run/hz/vms"
[metrics]
enabled = false
port = 9999
[device]
num_request_queues = 8
max_regions = 16
max_region_bytes = 1048576
max_comm_ranks = 8
max_device_extents = 9000
min_connect_interval_ms = 5
chains_per_turn = 7
turn_time_us = 120
[tenant_defaults]
max_regions = 5
max_region_bytes = 123
max_extents = 77
[collectives]
unused_uid_lifetime_s = 120
worker_threads = 3
worker_nice = 7
worker_poll_us = 250
stream_min_bytes = 1048576
single_thread_max_bytes = 2097152
[shutdown]
timeout_ms = 2500
[scheduler]
sysfs_root = "/srv/sysfs"
provider_file = "/etc/hz/inventory.toml"
libvirt_uri = "test:///default"
state_file = "sched.json"
bind_vfio = false
sync = false
health_poll_ms = 250
[negotiation]
window_s = 20
offer_ttl_s = 15
max_lookahead_s = 3600
max_duration_s = 7200
max_open_per_tenant = 4
decide_budget = 5000
decide_interval_ms = 100
preemption_notice_s = 45
)";
  ServiceConfig c;
  std::string error;
  ASSERT_TRUE(ParseConfig(text, "test.toml", &c, &error)) << error;
  EXPECT_EQ(c.state_dir, "/srv/hz");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.log_format, "json");
  EXPECT_EQ(c.worker_threads, 3u);
  EXPECT_EQ(c.connection_poll_us, 0u);
  EXPECT_EQ(c.region_thread_nice, 12u);
  EXPECT_EQ(c.ControlSocketPath(), "/run/hz/ctl.sock");
  EXPECT_EQ(c.control_max_line_bytes, 4096u);
  EXPECT_EQ(c.VmSocketDir(), "/run/hz/vms");
  EXPECT_FALSE(c.metrics_enabled);
  EXPECT_EQ(c.metrics_port, 9999);
  EXPECT_EQ(c.device.num_request_queues, 8);
  EXPECT_EQ(c.device.max_regions, 16u);
  EXPECT_EQ(c.device.max_region_bytes, 1048576u);
  EXPECT_EQ(c.device.max_comm_ranks, 8u);
  EXPECT_EQ(c.tenant_defaults.max_regions, 5u);
  EXPECT_EQ(c.tenant_defaults.max_region_bytes, 123u);
  EXPECT_EQ(c.tenant_defaults.max_extents, 77u);
  EXPECT_EQ(c.coll_unused_uid_lifetime_s, 120u);
  EXPECT_EQ(c.coll_worker_threads, 3u);
  EXPECT_EQ(c.coll_worker_nice, 7u);
  EXPECT_EQ(c.coll_worker_poll_us, 250u);
  EXPECT_EQ(c.coll_stream_min_bytes, std::optional<uint64_t>(1048576));
  EXPECT_EQ(c.coll_single_thread_max_bytes, std::optional<uint64_t>(2097152));
  EXPECT_EQ(c.device.max_device_extents, 9000u);
  EXPECT_EQ(c.device.min_connect_interval_ms, 5u);
  EXPECT_EQ(c.device.chains_per_turn, 7u);
  EXPECT_EQ(c.device.turn_time_us, 120u);
  EXPECT_EQ(c.shutdown_timeout_ms, 2500u);
  EXPECT_EQ(c.scheduler.sysfs_root, "/srv/sysfs");
  EXPECT_EQ(c.scheduler.provider_file, "/etc/hz/inventory.toml");
  EXPECT_EQ(c.scheduler.libvirt_uri, "test:///default");
  EXPECT_EQ(c.SchedulerStatePath(), "/srv/hz/sched.json");
  EXPECT_FALSE(c.scheduler.bind_vfio);
  EXPECT_FALSE(c.scheduler.sync);
  EXPECT_EQ(c.scheduler.health_poll_ms, 250u);
  EXPECT_EQ(c.negotiation.window_s, 20u);
  EXPECT_EQ(c.negotiation.offer_ttl_s, 15u);
  EXPECT_EQ(c.negotiation.max_lookahead_s, 3600u);
  EXPECT_EQ(c.negotiation.max_duration_s, 7200u);
  EXPECT_EQ(c.negotiation.max_open_per_tenant, 4u);
  EXPECT_EQ(c.negotiation.decide_budget, 5000u);
  EXPECT_EQ(c.negotiation.decide_interval_ms, 100u);
  EXPECT_EQ(c.negotiation.preemption_notice_s, 45u);
  c.scheduler.state_file = "/abs/state.json";
  EXPECT_EQ(c.SchedulerStatePath(), "/abs/state.json");
}

// Each bad document is rejected with a message naming the place and key.
TEST(ServiceConfigTest, ErrorsAreClear) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"state_dir = ", "test.toml:1"},
      {"stat_dir = \"/x\"", "stat_dir: unknown key"},
      {"worker_threads = \"two\"", "worker_threads: expected an integer"},
      {"worker_threads = 0", "worker_threads: expected an integer in 1..256"},
      {"connection_poll_us = -5", "connection_poll_us: expected an integer in 0..100000"},
      {"region_thread_nice = 20", "region_thread_nice: expected an integer in 0..19 or \"idle\""},
      {"[collectives]\nworker_nice = \"lowest\"", "collectives.worker_nice: expected an integer"},
      {"[collectives]\nstream_min_bytes = -1", "collectives.stream_min_bytes: expected an integer"},
      {"[collectives]\nsingle_thread_max_bytes = \"8M\"",
       "collectives.single_thread_max_bytes: expected an integer"},
      {"[collectives]\nworker_poll_us = 100001",
       "collectives.worker_poll_us: expected an integer in 0..100000"},
      {"[checkpoint]\nthread_nice = 1.5", "checkpoint.thread_nice: expected an integer"},
      {"bulk_idle_class = \"yes\"", "bulk_idle_class: expected true or false"},
      {"bulk_idle_window_ms = 5", "bulk_idle_window_ms: expected an integer in 10..1000"},
      {"[device]\nnum_request_queues = 65", "device.num_request_queues"},
      {"[device]\nmax_regions = -1", "device.max_regions"},
      {"[metrics]\nport = 70000", "metrics.port"},
      {"[metrics]\nenabled = 1", "metrics.enabled: expected true or false"},
      {"log_level = \"loud\"", "log_level: expected one of"},
      {"control = 5", "control: expected a table"},
      {"[control]\nsockt = \"/x\"", "control.sockt: unknown key"},
      {"[scheduler]\nsysfs = \"/x\"", "scheduler.sysfs: unknown key"},
      {"[scheduler]\nhealth_poll_ms = -5", "scheduler.health_poll_ms"},
      {"[negotiation]\nwindow_s = 5", "negotiation.window_s"},
      {"[negotiation]\noffer_ttl_s = 1", "negotiation.offer_ttl_s"},
      {"[negotiation]\ndecide_interval_ms = 5000", "negotiation.decide_interval_ms"},
      {"[negotiation]\ndecide_budget = 10", "negotiation.decide_budget"},
      {"[negotiation]\nmax_open_per_tenant = 0", "negotiation.max_open_per_tenant"},
      {"[negotiation]\npreemption_notice_s = 10", "negotiation.preemption_notice_s"},
  };
  for (const Case& c : cases) {
    ServiceConfig config;
    std::string error;
    EXPECT_FALSE(ParseConfig(c.text, "test.toml", &config, &error)) << c.text;
    EXPECT_NE(error.find(c.expect), std::string::npos) << c.text << " -> " << error;
  }
}

// The operator's bounds on what a guest's checkpoint policy may cost.
TEST(ServiceConfigTest, CheckpointBoundsAreReadAndChecked) {
  ServiceConfig c;
  std::string error;
  EXPECT_EQ(c.ckpt_max_stall_budget_ms, 60000u);
  EXPECT_EQ(c.ckpt_jit_max_attempts, 64u);
  ASSERT_TRUE(ParseConfig("[checkpoint]\nmax_stall_budget_ms = 500\njit_max_attempts = 3",
                          "test.toml", &c, &error))
      << error;
  EXPECT_EQ(c.ckpt_max_stall_budget_ms, 500u);
  EXPECT_EQ(c.ckpt_jit_max_attempts, 3u);
  for (const char* bad :
       {"[checkpoint]\nmax_stall_budget_ms = 3600001", "[checkpoint]\njit_max_attempts = 0",
        "[checkpoint]\nstall_budget_cap = 5"}) {
    ServiceConfig config;
    EXPECT_FALSE(ParseConfig(bad, "test.toml", &config, &error)) << bad;
    EXPECT_NE(error.find("checkpoint."), std::string::npos) << bad << " -> " << error;
  }
}

// Who may connect to the sockets, and how many metrics clients there may be.
TEST(ServiceConfigTest, SocketAccessAndMetricsCapAreReadAndChecked) {
  ServiceConfig c;
  std::string error;
  EXPECT_EQ(c.vm_socket_mode, 0660u);
  EXPECT_EQ(c.metrics_max_connections, 64u);
  ASSERT_TRUE(
      ParseConfig("[control]\nsocket_group = \"root\"\n[vm]\nsocket_mode = \"0600\"\n"
                  "socket_group = \"root\"\n[metrics]\nmax_connections = 2",
                  "test.toml", &c, &error))
      << error;
  EXPECT_EQ(c.control_socket_group, "root");
  EXPECT_EQ(c.vm_socket_mode, 0600u);
  EXPECT_EQ(c.vm_socket_group, "root");
  EXPECT_EQ(c.metrics_max_connections, 2u);
  EXPECT_TRUE(ValidateConfig(c, &error)) << error;
  for (const char* bad : {"[vm]\nsocket_mode = \"0460\"", "[vm]\nsocket_mode = \"01660\"",
                          "[vm]\nsocket_mode = \"660x\"", "[vm]\nsocket_mode = \"\"",
                          "[vm]\nsocket_mode = 432", "[metrics]\nmax_connections = 0"}) {
    ServiceConfig config;
    EXPECT_FALSE(ParseConfig(bad, "test.toml", &config, &error)) << bad;
    EXPECT_NE(error.find("expected"), std::string::npos) << bad << " -> " << error;
  }
  c.vm_socket_group = "no-such-group-hz";
  EXPECT_FALSE(ValidateConfig(c, &error));
  EXPECT_EQ(error, "vm.socket_group: no group named no-such-group-hz");
}

// Bulk threads may run in the kernel's idle class instead of at a nice
// value: the operator who puts other tenants' requests first says "idle".
TEST(ServiceConfigTest, BulkThreadsTakeTheIdleClass) {
  ServiceConfig c;
  std::string error;
  ASSERT_TRUE(
      ParseConfig("region_thread_nice = \"idle\"\n[checkpoint]\nthread_nice = \"idle\"\n"
                  "[collectives]\nworker_nice = \"idle\"",
                  "test.toml", &c, &error))
      << error;
  EXPECT_EQ(c.region_thread_nice, static_cast<uint32_t>(kIdleClassNice));
  EXPECT_EQ(c.ckpt_thread_nice, static_cast<uint32_t>(kIdleClassNice));
  EXPECT_EQ(c.coll_worker_nice, static_cast<uint32_t>(kIdleClassNice));
  EXPECT_TRUE(ValidateConfig(c, &error)) << error;
}

// By default bulk threads wait in the idle class until they starve; the
// operator may keep them at their nice values, and says how starving is
// measured.
TEST(ServiceConfigTest, BulkThreadsWaitInTheIdleClassUnlessTurnedOff) {
  ServiceConfig c;
  EXPECT_TRUE(c.bulk_idle_class);
  EXPECT_EQ(c.bulk_idle_window_ms, 50u);
  std::string error;
  ASSERT_TRUE(
      ParseConfig("bulk_idle_class = false\nbulk_idle_window_ms = 200", "test.toml", &c, &error))
      << error;
  EXPECT_FALSE(c.bulk_idle_class);
  EXPECT_EQ(c.bulk_idle_window_ms, 200u);
}

TEST(ServiceConfigTest, CheckpointSharesAreReadAndChecked) {
  ServiceConfig c;
  std::string error;
  EXPECT_EQ(c.ckpt_tenant_staging_bytes, 0u);  // the tenant's weighted share
  EXPECT_EQ(c.ckpt_tenant_request_threads, 2u);
  ASSERT_TRUE(
      ParseConfig("[checkpoint]\ntenant_staging_bytes = 16777216\nquiesce_bytes = 33554432\n"
                  "tenant_disk_bytes = 1048576\ndisk_bytes = 8388608\nrequest_threads = 6\n"
                  "tenant_request_threads = 2\nthread_nice = 4",
                  "test.toml", &c, &error))
      << error;
  EXPECT_EQ(c.ckpt_tenant_staging_bytes, 16u << 20);
  EXPECT_EQ(c.ckpt_quiesce_bytes, 32u << 20);
  EXPECT_EQ(c.ckpt_tenant_disk_bytes, 1u << 20);
  EXPECT_EQ(c.ckpt_disk_bytes, 8u << 20);
  EXPECT_EQ(c.ckpt_request_threads, 6u);
  EXPECT_EQ(c.ckpt_tenant_request_threads, 2u);
  EXPECT_EQ(c.ckpt_thread_nice, 4u);
  EXPECT_TRUE(ValidateConfig(c, &error)) << error;
  for (const char* bad :
       {"[checkpoint]\nrequest_threads = 0", "[checkpoint]\ntenant_disk_bytes = 0",
        "[checkpoint]\ntenant_request_threads = 65"}) {
    ServiceConfig config;
    EXPECT_FALSE(ParseConfig(bad, "test.toml", &config, &error)) << bad;
  }
  ServiceConfig more_than_all;
  more_than_all.ckpt_request_threads = 2;
  more_than_all.ckpt_tenant_request_threads = 3;
  EXPECT_FALSE(ValidateConfig(more_than_all, &error));
  EXPECT_NE(error.find("tenant_request_threads"), std::string::npos) << error;
  ServiceConfig quiesce_over_pool;
  quiesce_over_pool.ckpt_quiesce_bytes = quiesce_over_pool.ckpt_staging_bytes + 1;
  EXPECT_FALSE(ValidateConfig(quiesce_over_pool, &error));
}

TEST(ServiceConfigTest, FailedParseLeavesConfigUntouched) {
  ServiceConfig c;
  std::string error;
  EXPECT_FALSE(ParseConfig("state_dir = \"/a\"\nbogus = 1", "t", &c, &error));
  EXPECT_EQ(c.state_dir, "/var/lib/harmonaize");
}

TEST(ServiceConfigTest, MissingFile) {
  ServiceConfig c;
  std::string error;
  EXPECT_FALSE(LoadConfigFile("/nonexistent/harmonaized.toml", &c, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

TEST(ServiceConfigTest, ValidateCatchesInconsistentLimits) {
  ServiceConfig c;
  c.device.max_extents = 1 << 20;
  c.device.max_args_bytes = 4096;
  std::string error;
  EXPECT_FALSE(ValidateConfig(c, &error));
  EXPECT_NE(error.find("max_args_bytes"), std::string::npos);
  c = ServiceConfig();
  c.control_socket = std::string(200, 'x');
  EXPECT_FALSE(ValidateConfig(c, &error));
  c = ServiceConfig();
  c.negotiation.window_s = 25;
  EXPECT_FALSE(ValidateConfig(c, &error));
  EXPECT_NE(error.find("multiple of 10"), std::string::npos) << error;
  c = ServiceConfig();
  c.scheduler.sysfs_root.clear();
  EXPECT_FALSE(ValidateConfig(c, &error));
  c = ServiceConfig();
  c.device.max_device_extents = c.device.max_extents - 1;
  EXPECT_FALSE(ValidateConfig(c, &error));
  EXPECT_NE(error.find("max_device_extents"), std::string::npos) << error;
  // libvirt binds managed hostdevs: only with libvirt, and never both binding.
  c = ServiceConfig();
  c.scheduler.hostdev_managed = true;
  c.scheduler.bind_vfio = false;
  EXPECT_FALSE(ValidateConfig(c, &error));
  EXPECT_NE(error.find("hostdev_managed"), std::string::npos) << error;
  c.scheduler.libvirt_uri = "qemu:///system";
  c.scheduler.bind_vfio = true;
  EXPECT_FALSE(ValidateConfig(c, &error));
  c.scheduler.bind_vfio = false;
  EXPECT_TRUE(ValidateConfig(c, &error)) << error;
}

TEST(ServiceTenantsTest, CreateListRemove) {
  TenantRegistry reg;
  TenantSpec s;
  s.name = "alpha";
  EXPECT_TRUE(reg.Create(s).ok());
  EXPECT_FALSE(reg.Create(s).ok());  // exists
  s.name = "bad name";
  EXPECT_FALSE(reg.Create(s).ok());
  s.name = "-x";
  EXPECT_FALSE(reg.Create(s).ok());
  s.name = "beta";
  s.weight = 0;
  EXPECT_FALSE(reg.Create(s).ok());
  s.weight = 5;
  s.priority = HZ_PRIO_MAX;
  EXPECT_FALSE(reg.Create(s).ok());
  s.priority = HZ_PRIO_HIGH;
  EXPECT_TRUE(reg.Create(s).ok());
  auto list = reg.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name(), "alpha");
  EXPECT_EQ(list[1]->spec().weight, 5u);
  EXPECT_TRUE(reg.Remove("alpha").ok());
  EXPECT_FALSE(reg.Remove("alpha").ok());
  EXPECT_EQ(reg.Find("alpha"), nullptr);
  EXPECT_NE(reg.Find("beta"), nullptr);
}

TEST(ServiceTenantsTest, QuotasAreOverflowSafe) {
  TenantSpec s;
  s.name = "q";
  s.limits.max_regions = 2;
  s.limits.max_region_bytes = 100;
  Tenant t(s);
  EXPECT_EQ(t.ReserveRegion(60, 1), HZ_S_OK);
  EXPECT_EQ(t.ReserveRegion(~0ull, 1), HZ_S_ELIMIT);
  EXPECT_EQ(t.ReserveRegion(41, 1), HZ_S_ELIMIT);
  EXPECT_EQ(t.ReserveRegion(40, 1), HZ_S_OK);
  EXPECT_EQ(t.ReserveRegion(0, 1), HZ_S_ELIMIT);  // count
  t.ReleaseRegion(60, 1);
  EXPECT_EQ(t.usage().regions, 1u);
  EXPECT_EQ(t.usage().region_bytes, 40u);
}

}  // namespace
}  // namespace hz::service

namespace hz::service {
namespace {

// The shipped example must parse and must spell out the defaults.
TEST(ServiceConfigTest, ExampleFileParsesToTheDefaults) {
  ServiceConfig parsed;
  std::string error;
  ASSERT_TRUE(LoadConfigFile(HZ_SERVICE_EXAMPLE_CONFIG, &parsed, &error)) << error;
  ServiceConfig d;
  EXPECT_EQ(parsed.state_dir, d.state_dir);
  EXPECT_EQ(parsed.metrics_port, d.metrics_port);
  EXPECT_EQ(parsed.metrics_max_connections, d.metrics_max_connections);
  EXPECT_EQ(parsed.vm_socket_mode, d.vm_socket_mode);
  EXPECT_EQ(parsed.worker_threads, d.worker_threads);
  EXPECT_EQ(parsed.connection_poll_us, d.connection_poll_us);
  EXPECT_EQ(parsed.region_thread_nice, d.region_thread_nice);
  EXPECT_EQ(parsed.device.max_region_bytes, d.device.max_region_bytes);
  EXPECT_EQ(parsed.device.max_args_bytes, d.device.max_args_bytes);
  EXPECT_EQ(parsed.tenant_defaults.max_region_bytes, d.tenant_defaults.max_region_bytes);
  EXPECT_EQ(parsed.tenant_defaults.max_extents, d.tenant_defaults.max_extents);
  EXPECT_EQ(parsed.coll_unused_uid_lifetime_s, d.coll_unused_uid_lifetime_s);
  EXPECT_EQ(parsed.coll_worker_threads, d.coll_worker_threads);
  EXPECT_EQ(parsed.coll_worker_nice, d.coll_worker_nice);
  EXPECT_EQ(parsed.coll_worker_poll_us, d.coll_worker_poll_us);
  EXPECT_EQ(parsed.ckpt_thread_nice, d.ckpt_thread_nice);
  EXPECT_EQ(parsed.device.min_connect_interval_ms, d.device.min_connect_interval_ms);
  EXPECT_EQ(parsed.device.chains_per_turn, d.device.chains_per_turn);
  EXPECT_EQ(parsed.device.turn_time_us, d.device.turn_time_us);
  EXPECT_EQ(parsed.device.max_device_extents, d.device.max_device_extents);
  EXPECT_EQ(parsed.shutdown_timeout_ms, d.shutdown_timeout_ms);
  EXPECT_EQ(parsed.scheduler.enabled, d.scheduler.enabled);
  EXPECT_EQ(parsed.scheduler.sysfs_root, d.scheduler.sysfs_root);
  EXPECT_EQ(parsed.scheduler.libvirt_uri, d.scheduler.libvirt_uri);
  EXPECT_EQ(parsed.scheduler.state_file, d.scheduler.state_file);
  EXPECT_EQ(parsed.scheduler.health_poll_ms, d.scheduler.health_poll_ms);
  EXPECT_EQ(parsed.negotiation.window_s, d.negotiation.window_s);
  EXPECT_EQ(parsed.negotiation.offer_ttl_s, d.negotiation.offer_ttl_s);
  EXPECT_EQ(parsed.negotiation.max_lookahead_s, d.negotiation.max_lookahead_s);
  EXPECT_EQ(parsed.negotiation.decide_interval_ms, d.negotiation.decide_interval_ms);
  EXPECT_EQ(parsed.ckpt_max_stall_budget_ms, d.ckpt_max_stall_budget_ms);
  EXPECT_EQ(parsed.ckpt_jit_max_attempts, d.ckpt_jit_max_attempts);
  EXPECT_EQ(parsed.negotiation.max_open_per_tenant, d.negotiation.max_open_per_tenant);
  EXPECT_EQ(parsed.negotiation.decide_budget, d.negotiation.decide_budget);
  EXPECT_EQ(parsed.negotiation.preemption_notice_s, d.negotiation.preemption_notice_s);
  EXPECT_TRUE(ValidateConfig(parsed, &error)) << error;
}

}  // namespace
}  // namespace hz::service

namespace hz::service {
namespace {

ServiceConfig Parsed(const std::string& toml, std::string* error) {
  ServiceConfig c;
  if (!ParseConfig(toml, "t.toml", &c, error)) return c;
  ValidateConfig(c, error);
  return c;
}

TEST(ServiceConfigTest, WithoutAClusterSectionTheHostRunsAlone) {
  std::string error;
  ServiceConfig c = Parsed("", &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_FALSE(c.cluster.enabled);
}

TEST(ServiceConfigTest, TheClusterSectionIsReadAndChecked) {
  std::string error;
  ServiceConfig c = Parsed(
      "[cluster]\nstore = \"10.77.0.1:6379\"\nhost_name = \"rack1-h07\"\n"
      "data_address = \"10.77.0.8\"\nlease_ms = 1500\nkey_prefix = \"prod/\"\n",
      &error);
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_TRUE(c.cluster.enabled);
  EXPECT_EQ(c.cluster.store, "10.77.0.1:6379");
  EXPECT_EQ(c.cluster.host_name, "rack1-h07");
  EXPECT_EQ(c.cluster.data_address, "10.77.0.8");
  EXPECT_EQ(c.cluster.lease_ms, 1500u);
  EXPECT_EQ(c.cluster.key_prefix, "prod/");

  const std::pair<const char*, const char*> bad[] = {
      {"store = \"redis\"\ndata_address = \"10.0.0.1\"", "cluster.store"},
      {"store = \"h:0\"\ndata_address = \"10.0.0.1\"", "cluster.store"},
      {"store = \"h:6379\"", "cluster.data_address"},
      {"store = \"h:6379\"\ndata_address = \"host.example\"", "cluster.data_address"},
      {"store = \"h:6379\"\ndata_address = \"10.0.0.1\"\nhost_name = \"a b\"", "cluster.host_name"},
      {"store = \"h:6379\"\ndata_address = \"10.0.0.1\"\nlease_ms = 100", "cluster.lease_ms"},
      {"store = \"h:6379\"\ndata_address = \"10.0.0.1\"\nleases = 3", "cluster.leases"},
  };
  for (const auto& [body, names] : bad) {
    error.clear();
    Parsed(std::string("[cluster]\n") + body + "\n", &error);
    EXPECT_NE(error.find(names), std::string::npos) << body << " -> " << error;
  }
  error.clear();
  Parsed("[cluster]\nstore = \"unix:/run/redis/redis.sock\"\ndata_address = \"fd00::8\"\n", &error);
  EXPECT_TRUE(error.empty()) << error;
}

}  // namespace
}  // namespace hz::service
