// scripts/demo.sh's maintenance flow: hz_demo_tenant ranks subscribe to
// maintenance notices, the operator publishes one with hzctl, and each rank
// checkpoints in reaction and approves the early start. Checked from the
// tenant side (exit codes, what the ranks report) and from the operator side
// (hzctl checkpoint list, the durable cursor and approval in the event log).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

using json = nlohmann::json;

// Runs hzctl against the service; returns its exit code and output.
int Hzctl(const ServiceProcess& svc, const std::string& args, std::string* out) {
  return svc.Hzctl(HZ_HZCTL_PATH, args, out);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// One hz_demo_tenant process with stdout and stderr in `log`.
pid_t StartRank(const std::string& socket, const std::vector<std::string>& args,
                const std::string& log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) _exit(126);
  dup2(fd, 1);
  dup2(fd, 2);
  setenv("HZ_DEVICE", ("vhost-user:" + socket).c_str(), 1);
  std::vector<std::string> all = {HZ_DEMO_TENANT_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

// Exit code, 128 + signal, or -1 when it did not end in time (then killed).
int WaitRank(pid_t pid, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST(ExamplesMaintenanceTest, RanksCheckpointAndApproveOnNotice) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("acme", 3);
  ASSERT_EQ(vms.size(), 3u);
  const std::string uid = svc.dir() + "/uid";
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    const std::string r = std::to_string(i);
    pids.push_back(StartRank(
        vms[i],
        {r, "3", uid, "--maintenance", svc.dir() + "/ready" + r, "--notice-timeout-s", "120"},
        svc.dir() + "/rank" + r + ".log"));
  }
  // The notice goes out once every rank has subscribed (bounded wait).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto all_ready = [&] {
    for (int i = 0; i < 3; ++i) {
      if (!Exists(svc.dir() + "/ready" + std::to_string(i))) return false;
    }
    return true;
  };
  while (!all_ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(all_ready());
  std::string out;
  ASSERT_EQ(Hzctl(svc,
                  "--json event inject --tenant acme --topic maintenance --kind scheduled "
                  "--deadline-s 600 --data '{\"duration_s\": 300, \"approvable\": true}'",
                  &out),
            0)
      << out;
  json inj = json::parse(out, nullptr, false);
  ASSERT_TRUE(inj.is_object()) << out;
  const uint64_t seq = inj["result"].value("seq", uint64_t{0});
  ASSERT_NE(seq, 0u);

  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitRank(pids[i], std::chrono::seconds(180)), 0)
        << ReadFile(svc.dir() + "/rank" + std::to_string(i) + ".log");
    const std::string log_after = ReadFile(svc.dir() + "/rank" + std::to_string(i) + ".log");
    const std::string r = "rank " + std::to_string(i) + ": ";
    EXPECT_NE(log_after.find(r + "subscribed to maintenance notices"), std::string::npos)
        << log_after;
    EXPECT_NE(log_after.find(r + "maintenance notice seq " + std::to_string(seq)),
              std::string::npos)
        << log_after;
    EXPECT_NE(log_after.find(r + "checkpoint step 100 saved in reaction to the notice"),
              std::string::npos)
        << log_after;
    EXPECT_NE(log_after.find(r + "acknowledged notice seq " + std::to_string(seq) +
                             " and approved an early start"),
              std::string::npos)
        << log_after;
    EXPECT_NE(log_after.find(r + "checkpoint step 100 restored and verified"), std::string::npos)
        << log_after;
  }

  // The operator sees each rank's checkpoint.
  ASSERT_EQ(Hzctl(svc, "--json checkpoint list --tenant acme", &out), 0) << out;
  json list = json::parse(out, nullptr, false);
  ASSERT_TRUE(list.is_object()) << out;
  std::vector<uint64_t> streams;
  for (const json& s : list["result"]["streams"]) {
    bool has_step = false;
    for (const json& c : s["checkpoints"]) has_step |= c.value("step", uint64_t{0}) == 100;
    if (has_step) streams.push_back(s.value("stream", uint64_t{0}));
  }
  EXPECT_EQ(streams, (std::vector<uint64_t>{1, 2, 3})) << out;

  // The approval is in the tenant's durable event state.
  json state = json::parse(ReadFile(svc.dir() + "/events/acme/state.json"), nullptr, false);
  ASSERT_TRUE(state.is_object());
  ASSERT_TRUE(state.contains("approved"));
  EXPECT_NE(std::find(state["approved"].begin(), state["approved"].end(), json(seq)),
            state["approved"].end())
      << state.dump();
  // The operator sees the same through hzctl: every VM's cursor at the
  // notice, and the approval.
  ASSERT_EQ(Hzctl(svc, "--json event status --tenant acme", &out), 0) << out;
  json status = json::parse(out, nullptr, false);
  ASSERT_TRUE(status.is_object()) << out;
  const json& es = status["result"];
  EXPECT_EQ(es["approved"], json::array({seq})) << out;
  ASSERT_EQ(es["bindings"].size(), 3u) << out;
  for (const json& b : es["bindings"]) EXPECT_EQ(b.value("cursor", uint64_t{0}), seq) << out;
  EXPECT_NE(Hzctl(svc, "--json event status", &out), 0) << "--tenant is required";

  // Each VM's acknowledgement is durable: a new session of VM 0 resumes
  // after the notice.
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0], 4 << 20));
  ASSERT_EQ(c.Hello(1ull << HZ_F_EVENTS), HZ_S_OK);
  hz_event_subscribe_args a{};
  a.topics = HZ_TOPIC_MASK(HZ_TOPIC_MAINTENANCE);
  a.from_seq = HZ_SEQ_CURSOR;
  Reply r = c.Call(HZ_VQ_CONTROL, HZ_OP_EVENT_SUBSCRIBE, a);
  ASSERT_EQ(r.status, HZ_S_OK);
  hz_event_subscribe_result res{};
  ASSERT_GE(r.result.size(), sizeof(res));
  std::memcpy(&res, r.result.data(), sizeof(res));
  EXPECT_EQ(res.cursor, seq);
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(ExamplesMaintenanceTest, RankGivesUpWhenNoNoticeComes) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("acme", 1);
  ASSERT_EQ(vms.size(), 1u);
  const std::string log = svc.dir() + "/rank0.log";
  pid_t pid = StartRank(vms[0],
                        {"0", "1", svc.dir() + "/uid", "--maintenance", svc.dir() + "/ready0",
                         "--notice-timeout-s", "1"},
                        log);
  EXPECT_EQ(WaitRank(pid, std::chrono::seconds(120)), 1) << ReadFile(log);
  EXPECT_TRUE(Exists(svc.dir() + "/ready0"));
  EXPECT_NE(ReadFile(log).find("rank 0: maintenance notice: "), std::string::npos) << ReadFile(log);
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(ExamplesMaintenanceTest, BadArgumentsAreUsageErrors) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"0", "1", "/nonexistent/uid", "--maintenance"},
           {"0", "1", "/nonexistent/uid", "--bogus"},
           {"0", "1", "/nonexistent/uid", "--maintenance", "/tmp/x", "--notice-timeout-s", "0"},
       }) {
    pid_t pid = StartRank("/nonexistent.sock", args, "/dev/null");
    EXPECT_EQ(WaitRank(pid, std::chrono::seconds(30)), 2);
  }
}

}  // namespace
}  // namespace hz::testing
