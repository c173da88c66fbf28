// harmonaized under systemd: the readiness protocol (sd_notify) and the
// JSON log, as the manager and a log collector see them.
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "hz_test/service_manager.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

bool UnixConnects(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// The daemon with NOTIFY_SOCKET set to the test's socket.
bool StartNotifying(ServiceProcess& svc, const std::string& notify_path,
                    const std::vector<std::string>& extra) {
  setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
  bool started = svc.Start(extra);
  unsetenv("NOTIFY_SOCKET");
  return started;
}

TEST(SystemdTest, ReadyComesOnceEveryListenerServesAndStoppingOnSigterm) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> vms = svc.TenantWithVms("acme", 2);
  ASSERT_EQ(vms.size(), 2u);
  ASSERT_EQ(svc.Terminate(), 0);

  // Restarted: the two VM sockets come back from the state directory.
  FakeServiceManager manager(svc.dir() + "/notify.sock");
  ASSERT_TRUE(manager.bound());
  ASSERT_TRUE(StartNotifying(svc, svc.dir() + "/notify.sock", {"--metrics-port", "0"}));
  ASSERT_TRUE(manager.WaitForLine("READY=1"));
  // At READY=1, and without waiting: the control socket answers, the
  // metrics endpoint serves and every restored VM socket accepts.
  nlohmann::json status = svc.Control({{"cmd", "status"}});
  ASSERT_TRUE(status.value("ok", false)) << status.dump();
  EXPECT_EQ(status["result"].value("vms_bound", 0), 2);
  const uint16_t port = status["result"].value("metrics_port", uint16_t{0});
  ASSERT_NE(port, 0);
  EXPECT_NE(HttpGet(port, "/metrics").find("200 OK"), std::string::npos);
  for (const std::string& vm : vms) EXPECT_TRUE(UnixConnects(vm)) << vm;
  // The manager was told what the service is doing before it was ready.
  bool status_line = false;
  for (const std::string& m : manager.received()) {
    status_line = status_line || m.find("STATUS=") != std::string::npos;
  }
  EXPECT_TRUE(status_line);
  EXPECT_EQ(manager.received().back().find("STOPPING=1"), std::string::npos);

  ASSERT_EQ(svc.Terminate(), 0);
  EXPECT_TRUE(manager.WaitForLine("STOPPING=1", 5000));
}

TEST(SystemdTest, NoReadyWhenTheServiceCannotStart) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  // A second daemon on the same state directory finds it locked: exit 1,
  // and the manager hears a reason but never READY=1.
  FakeServiceManager manager(svc.dir() + "/notify.sock");
  ASSERT_TRUE(manager.bound());
  setenv("NOTIFY_SOCKET", (svc.dir() + "/notify.sock").c_str(), 1);
  std::string output;
  int rc = svc.RunToExit({}, &output);
  unsetenv("NOTIFY_SOCKET");
  EXPECT_EQ(rc, 1) << output;
  EXPECT_TRUE(manager.WaitForLine(
      "STATUS=Start failed: state directory " + svc.dir() + " is in use by another harmonaized",
      5000, /*prefix=*/true));
  for (const std::string& m : manager.received()) {
    EXPECT_FALSE(FakeServiceManager::HasLine(m, "READY=1")) << m;
  }
}

// Every line of --log-format json is one JSON object, whatever the logged
// values hold: here a VM socket path (logged by vm.bind) with a quote, a
// backslash, a newline, a tab, a control character and non-ASCII text.
TEST(SystemdTest, JsonLogIsOneObjectPerLineWhateverTheMessageHolds) {
  ServiceProcess svc;
  svc.CaptureLog();
  ASSERT_TRUE(svc.Start({"--log-format", "json", "--log-level", "info"}));
  ASSERT_TRUE(svc.Control({{"cmd", "tenant.create"}, {"name", "acme"}}).value("ok", false));
  const std::string odd = svc.dir() + "/q\"b\\s/n\nt\tc\x01\xc3\xa9.sock";
  nlohmann::json bound = svc.Control({{"cmd", "vm.bind"}, {"tenant", "acme"}, {"socket", odd}});
  ASSERT_TRUE(bound.value("ok", false)) << bound.dump();
  ASSERT_EQ(svc.Terminate(), 0);

  const std::regex rfc3339(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d)");
  std::istringstream log(svc.Log());
  int lines = 0;
  bool bind_logged = false;
  for (std::string line; std::getline(log, line);) {
    ++lines;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not a JSON object: " << line;
    ASSERT_TRUE(j["time"].is_string() && j["level"].is_string() && j["msg"].is_string()) << line;
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), rfc3339)) << line;
    const std::string msg = j["msg"].get<std::string>();
    if (msg.rfind("event=vm_bound ", 0) == 0) {
      EXPECT_NE(msg.find("socket=" + odd + " "), std::string::npos) << msg;
      bind_logged = true;
    }
  }
  EXPECT_GT(lines, 3);
  EXPECT_TRUE(bind_logged);
}

// With stderr on the journal (JOURNAL_STREAM names it) every line carries
// its syslog priority and no timestamp of its own.
TEST(SystemdTest, JournalLinesCarryTheirPriority) {
  ServiceProcess svc;
  svc.CaptureLog();
  const std::string log = svc.dir() + "/daemon.log";
  std::ofstream(log).close();  // the daemon's stderr, opened for appending
  struct stat st;
  ASSERT_EQ(stat(log.c_str(), &st), 0);
  const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  setenv("JOURNAL_STREAM", stream.c_str(), 1);
  bool started = svc.Start({"--log-level", "info"});
  unsetenv("JOURNAL_STREAM");
  ASSERT_TRUE(started);
  ASSERT_EQ(svc.Terminate(), 0);
  std::istringstream in(svc.Log());
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    EXPECT_TRUE(std::regex_match(line, std::regex(R"(<[0-7]>level=\w+ .*)"))) << line;
    EXPECT_EQ(line.find("time="), std::string::npos) << line;
  }
  EXPECT_GT(lines, 2);
  EXPECT_NE(svc.Log().find("<6>level=info event=ready"), std::string::npos) << svc.Log();
}

// The version is the project's (CMake's project() VERSION), with status 0.
TEST(SystemdTest, VersionAndHelpExitZero) {
  for (const char* flag : {"--version", "--help"}) {
    std::string cmd = std::string(HZ_HARMONAIZED_PATH) + " " + flag + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
    int status = pclose(f);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << flag;
    if (std::string(flag) == "--version") {
      EXPECT_EQ(out, std::string("harmonaized ") + HZ_EXPECTED_VERSION + "\n");
    } else {
      EXPECT_NE(out.find("Exit codes:"), std::string::npos) << out;
      EXPECT_NE(out.find("  2  command-line or configuration error"), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace hz::testing
