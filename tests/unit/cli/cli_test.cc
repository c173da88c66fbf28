// hzctl and hz as operators and tenants type them: global options anywhere
// on the line, --version, exit codes that match what is printed, hzctl's
// timeout against a control socket that accepts and never answers, human
// tables without --json, and the generated man pages.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz_test/run_command.h"

namespace {

using json = nlohmann::json;

using Result = hz::testing::CommandResult;

// Runs `command`, bounded so that a hang fails the test instead of stalling it.
Result Shell(const std::string& command, bool with_stderr = false) {
  return hz::testing::RunCommand(command, with_stderr, /*timeout_s=*/60);
}

// A listening control socket in a private directory. Answer() serves each
// connection one canned response line and records the requests; without it
// connections complete (the kernel's backlog) and are never answered.
class FakeControl {
 public:
  FakeControl() {
    char tmpl[] = "/tmp/hz-cli-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/control.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    listening_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                 listen(fd_, 16) == 0;
  }
  ~FakeControl() {
    shutdown(fd_, SHUT_RDWR);  // wakes the accept() below
    if (server_.joinable()) server_.join();
    close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }

  void Answer(const json& response) {
    server_ = std::thread([this, line = response.dump() + "\n"] {
      for (;;) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        std::string in;
        char ch;
        while (read(c, &ch, 1) == 1 && ch != '\n') in += ch;
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(json::parse(in, nullptr, false));
        }
        (void)!write(c, line.data(), line.size());
        close(c);
      }
    });
  }
  std::vector<json> Requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  bool listening() const { return listening_; }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
  int fd_ = -1;
  bool listening_ = false;
  std::thread server_;
  std::mutex mu_;
  std::vector<json> requests_;
};

std::string Hzctl(const std::string& args) {
  return std::string("env -u HZ_CONTROL_SOCKET ") + HZ_HZCTL_PATH + " " + args;
}
std::string Hz(const std::string& args) {
  return std::string("env -u HZ_DEVICE ") + HZ_CLI_PATH + " " + args;
}

TEST(HzctlTest, JsonAndSocketGoAnywhereOnTheLine) {
  FakeControl svc;
  ASSERT_TRUE(svc.listening());
  const json tenants = {{{"name", "acme"}, {"weight", 3}}};
  svc.Answer({{"ok", true}, {"result", tenants}});
  const std::string s = "--socket " + svc.path();
  for (const std::string& line : {"--json " + s + " tenant list", "tenant --json list " + s,
                                  "tenant list --json " + s, "tenant list " + s + " --json"}) {
    Result r = Shell(Hzctl(line));
    ASSERT_EQ(r.code, 0) << line;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line << ": " << r.out;
    EXPECT_EQ(j["ok"], true) << line;
    EXPECT_EQ(j["result"], tenants) << line;
  }
  const std::vector<json> requests = svc.Requests();
  ASSERT_EQ(requests.size(), 4u);
  for (const json& req : requests) EXPECT_EQ(req["cmd"], "tenant.list") << req.dump();
}

TEST(HzctlTest, WithoutJsonAnAnswerIsATable) {
  FakeControl svc;
  ASSERT_TRUE(svc.listening());
  const json inventory = {{"gpus", {{{"bdf", "0000:17:00.0"}, {"state", "free"}}}},
                          {"nics", json::array()},
                          {"host", "h1"}};
  svc.Answer({{"ok", true}, {"result", inventory}});
  Result r = Shell(Hzctl("inventory --socket " + svc.path()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(json::parse(r.out, nullptr, false).is_discarded()) << "not JSON: " << r.out;
  EXPECT_NE(r.out.find("host:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("BDF"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("STATE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0000:17:00.0"), std::string::npos) << r.out;
  ASSERT_EQ(svc.Requests().size(), 1u);
  EXPECT_EQ(svc.Requests()[0]["cmd"], "inventory");
}

TEST(HzctlTest, EventInjectTakesItsPayloadFromData) {
  FakeControl svc;
  ASSERT_TRUE(svc.listening());
  svc.Answer({{"ok", true}, {"result", {{"seq", 7}}}});
  Result r =
      Shell(Hzctl("event inject --tenant acme --topic maintenance --data "
                  "'{\"duration_s\": 300}' --json --socket " +
                  svc.path()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["result"]["seq"], 7) << "--json is the output flag";
  ASSERT_EQ(svc.Requests().size(), 1u);
  const json req = svc.Requests()[0];
  EXPECT_EQ(req["cmd"], "event.inject");
  EXPECT_EQ(req["event"]["duration_s"], 300);
  EXPECT_EQ(req["event"]["topic"], "maintenance");

  Result bad = Shell(
      Hzctl("event inject --tenant a --topic maintenance --data '[1]' --socket " + svc.path()),
      true);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("--data must be a JSON object"), std::string::npos) << bad.out;
}

TEST(HzctlTest, TheControlSocketComesFromTheEnvironment) {
  FakeControl svc;
  ASSERT_TRUE(svc.listening());
  svc.Answer({{"ok", true}, {"result", {{"uptime_s", 5}}}});
  Result r = Shell("env HZ_CONTROL_SOCKET=" + svc.path() + " " + HZ_HZCTL_PATH + " status");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("uptime_s:"), std::string::npos) << r.out;
  EXPECT_EQ(svc.Requests().size(), 1u);
}

TEST(HzctlTest, ADaemonThatNeverAnswersTimesOut) {
  FakeControl silent;  // accepts (the backlog), never reads or answers
  ASSERT_TRUE(silent.listening());
  Result r = Shell(Hzctl("--timeout 0.2 status --socket " + silent.path()), true);
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("no answer from " + silent.path()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--timeout"), std::string::npos) << r.out;

  Result bad = Shell(Hzctl("--timeout 0 status --socket " + silent.path()), true);
  EXPECT_EQ(bad.code, 2) << bad.out;
}

TEST(HzctlTest, AMissingDaemonIsUnreachable) {
  Result r = Shell(Hzctl("status --socket /nonexistent/hz-control.sock"), true);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("cannot connect to /nonexistent/hz-control.sock"), std::string::npos)
      << r.out;
}

TEST(HzctlTest, VersionAndHelp) {
  Result v = Shell(Hzctl("--version"));
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out, std::string("hzctl ") + HZ_PROJECT_VERSION + "\n");
  Result help = Shell(Hzctl("--help"));
  EXPECT_EQ(help.code, 0);
  for (const char* want :
       {"Exit codes", "4 the service", "HZ_CONTROL_SOCKET", "/run/harmonaize/control.sock",
        "/var/lib/harmonaize/control.sock", "--timeout", "--version"}) {
    EXPECT_NE(help.out.find(want), std::string::npos) << want << " in\n" << help.out;
  }
  EXPECT_EQ(Shell(Hzctl("frobnicate")).code, 2);
}

TEST(HzTest, VersionAndHelp) {
  Result v = Shell(Hz("--version"));
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out, std::string("hz ") + HZ_PROJECT_VERSION + "\n");
  Result help = Shell(Hz("--help"));
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Exit codes"), std::string::npos) << help.out;
}

// The JSON error object's "exit" is the status the process ends with, and
// --json and --device are accepted after the subcommand too.
TEST(HzTest, JsonErrorExitIsTheExitStatus) {
  const std::string dev = "--device vhost-user:/nonexistent/hz-dev.sock";
  for (const std::string& line :
       {"--json " + dev + " status", "status --json " + dev, "status " + dev + " --json",
        "checkpoint list --stream 1 " + dev + " --json"}) {
    Result r = Shell(Hz(line));
    EXPECT_EQ(r.code, 3) << line;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line << ": " << r.out;
    EXPECT_EQ(j["exit"], r.code) << line << ": " << r.out;
    EXPECT_NE(j["error"].get<std::string>().find("hz-dev.sock"), std::string::npos) << r.out;
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(ManPageTest, GeneratedFromEachProgramsHelp) {
  const std::string hzctl = Slurp(std::string(HZ_MAN_DIR) + "/hzctl.1");
  EXPECT_NE(hzctl.find(".TH HZCTL \"1\""), std::string::npos) << hzctl.substr(0, 400);
  EXPECT_NE(hzctl.find(HZ_PROJECT_VERSION), std::string::npos);
  for (const char* want : {"inventory", "negotiation", "Exit codes", "HZ_CONTROL_SOCKET"}) {
    EXPECT_NE(hzctl.find(want), std::string::npos) << want;
  }
  const std::string hz = Slurp(std::string(HZ_MAN_DIR) + "/hz.1");
  EXPECT_NE(hz.find(".TH HZ \"1\""), std::string::npos) << hz.substr(0, 400);
  for (const char* want : {"selftest", "checkpoint", "Exit codes", HZ_PROJECT_VERSION}) {
    EXPECT_NE(hz.find(want), std::string::npos) << want;
  }
  // A daemon's page is in section 8.
  const std::string daemon = Slurp(std::string(HZ_MAN_DIR) + "/harmonaized.8");
  EXPECT_NE(daemon.find(".TH HARMONAIZED \"8\""), std::string::npos) << daemon.substr(0, 400);
  for (const char* want : {"state directory", "text,json", HZ_PROJECT_VERSION}) {
    EXPECT_NE(daemon.find(want), std::string::npos) << want;
  }
}

}  // namespace
