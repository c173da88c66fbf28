// harmonaized's listening sockets: who may connect to them, and that they
// keep serving after the process ran out of descriptors.
#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "service_harness.h"

namespace hz::testing {
namespace {

// timeout(1) turns a daemon that never answers into a failure (exit 124).
const std::string kHzctl = std::string("timeout 20 ") + HZ_HZCTL_PATH;

uint16_t MetricsPort(ServiceProcess& svc) {
  return svc.Control({{"cmd", "status"}})["result"].value("metrics_port", uint16_t{0});
}

int ConnectTcp(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// True when the peer closed the connection (within a hang guard).
bool ClosedByPeer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 20000) != 1) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

int OpenFds(pid_t pid) {
  int n = 0;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int HighestFd(pid_t pid) {
  int highest = -1;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') highest = std::max(highest, std::atoi(e->d_name));
  }
  closedir(d);
  return highest;
}

// The value of one sample in a /metrics text; -1 when it is absent.
double Sample(const std::string& text, const std::string& name) {
  size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(ServiceSocketsTest, ListenersServeAgainAfterTheDescriptorsRanOut) {
#ifdef HZ_SANITIZED
  // UBSan's vptr check reads the object through a pipe to learn whether the
  // memory is mapped; in a daemon with no descriptor left that fails, and a
  // sound object is reported as having an invalid vptr. The default build
  // runs this test, and the soak exhausts descriptors under the sanitizers.
  GTEST_SKIP() << "the sanitizers' own checks need descriptors";
#endif
  ServiceProcess svc;
  // No cap on metrics connections short of the descriptors.
  ASSERT_TRUE(svc.Start({"--config", svc.WriteConfig("[metrics]\nmax_connections = 65536\n"),
                         "--metrics-port", "0"}));
  uint16_t port = MetricsPort(svc);
  ASSERT_NE(port, 0);
  // A few spare descriptors for the daemon, then idle metrics clients that
  // take them all.
  rlimit low{};
  ASSERT_EQ(prlimit(svc.pid(), RLIMIT_NOFILE, nullptr, &low), 0);
  low.rlim_cur = static_cast<rlim_t>(HighestFd(svc.pid())) + 8;
  ASSERT_EQ(prlimit(svc.pid(), RLIMIT_NOFILE, &low, nullptr), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> idle;
  const int spare = static_cast<int>(low.rlim_cur) - OpenFds(svc.pid());
  for (int i = 0; i < spare + 8; ++i) idle.push_back(ConnectTcp(port));
  for (int i = 0; i < 2000 && OpenFds(svc.pid()) < static_cast<int>(low.rlim_cur); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(OpenFds(svc.pid()), static_cast<int>(low.rlim_cur));
  // An operator connecting now waits in the backlog; the accept fails.
  int operator_fd = ConnectUnix(svc.dir() + "/ctl.sock");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  close(operator_fd);
  for (int fd : idle) close(fd);

  std::string out;
  EXPECT_EQ(svc.Hzctl(kHzctl, "status", &out), 0) << out;
  std::string m = HttpGet(port, "/metrics");
  ASSERT_NE(m.find("200 OK"), std::string::npos) << m;
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Failed accepts are retried with a growing delay of at least 10 ms, never
  // in a loop: a spinning acceptor would count millions here.
  for (const char* listener : {"control", "metrics"}) {
    double failures =
        Sample(m, std::string("hz_accept_failures_total{listener=\"") + listener + "\"}");
    EXPECT_GE(failures, 1) << listener << "\n" << m;
    EXPECT_LE(failures, 1 + elapsed_ms / 10) << listener;
  }
}

TEST(ServiceSocketsTest, MetricsConnectionsAreCapped) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start(
      {"--config", svc.WriteConfig("[metrics]\nmax_connections = 4\n"), "--metrics-port", "0"}));
  uint16_t port = MetricsPort(svc);
  ASSERT_NE(port, 0);
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(ConnectTcp(port));
  // Accepted in order: the first four wait for their request, the rest are
  // closed at once.
  for (int i = 4; i < 10; ++i) EXPECT_TRUE(ClosedByPeer(idle[i])) << i;
  for (int i = 0; i < 4; ++i) {
    pollfd p{idle[i], POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0) << i;
  }
  for (int fd : idle) close(fd);
  std::string m;
  for (int i = 0; i < 200 && m.find("200 OK") == std::string::npos; ++i) {
    m = HttpGet(port, "/metrics");  // refused while the closed ones still count
    if (m.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(m.find("200 OK"), std::string::npos) << m;
  EXPECT_GE(Sample(m, "hz_metrics_connections_refused_total"), 6) << m;
  std::string out;
  EXPECT_EQ(svc.Hzctl(kHzctl, "status", &out), 0) << out;
}

// A group the tests can hand sockets to that differs from the process's own
// when there is one (the tests run as root, who may use any group).
std::pair<std::string, gid_t> OtherGroup() {
  for (const char* name : {"daemon", "nogroup", "users", "bin"}) {
    if (const group* g = getgrnam(name); g != nullptr && g->gr_gid != getgid()) {
      return {name, g->gr_gid};
    }
  }
  const group* own = getgrgid(getgid());
  return {own != nullptr ? own->gr_name : "root", getgid()};
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(ServiceSocketsTest, SocketsAreOwnerAndGroupOnlyByDefault) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  auto vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  EXPECT_EQ(Lstat(svc.dir() + "/ctl.sock").st_mode & 07777, 0600u);
  EXPECT_EQ(Lstat(vms[0]).st_mode & 07777, 0660u);
}

TEST(ServiceSocketsTest, SocketsHaveTheConfiguredModeAndGroup) {
  auto [name, gid] = OtherGroup();
  ServiceProcess svc;
  std::string cfg =
      svc.WriteConfig("[control]\nsocket_group = \"" + name +
                      "\"\n[vm]\nsocket_mode = \"0640\"\nsocket_group = \"" + name + "\"\n");
  ASSERT_TRUE(svc.Start({"--config", cfg}));
  auto vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  struct stat ctl = Lstat(svc.dir() + "/ctl.sock");
  EXPECT_EQ(ctl.st_mode & 07777, 0660u);
  EXPECT_EQ(ctl.st_gid, gid);
  struct stat vm = Lstat(vms[0]);
  EXPECT_EQ(vm.st_mode & 07777, 0640u);
  EXPECT_EQ(vm.st_gid, gid);
}

// The user QEMU runs as (libvirt-qemu under libvirt) can be made the owner
// of the VM sockets, and an operator's user of the control socket.
TEST(ServiceSocketsTest, SocketsHaveTheConfiguredOwner) {
  struct passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr) << "no user nobody";
  const uid_t uid = nobody->pw_uid;
  ServiceProcess svc;
  std::string cfg =
      svc.WriteConfig("[control]\nsocket_owner = \"nobody\"\n[vm]\nsocket_owner = \"nobody\"\n");
  ASSERT_TRUE(svc.Start({"--config", cfg}));
  auto vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  EXPECT_EQ(Lstat(svc.dir() + "/ctl.sock").st_uid, uid);
  struct stat vm = Lstat(vms[0]);
  EXPECT_EQ(vm.st_uid, uid);
  EXPECT_EQ(vm.st_mode & 07777, 0660u);
}

TEST(ServiceSocketsTest, UnknownGroupsAndBadModesAreConfigErrors) {
  ServiceProcess svc;
  std::string out;
  const std::pair<const char*, const char*> cases[] = {
      {"[vm]\nsocket_group = \"no-such-group-hz\"\n", "no group named no-such-group-hz"},
      {"[control]\nsocket_group = \"no-such-group-hz\"\n", "no group named no-such-group-hz"},
      {"[vm]\nsocket_owner = \"no-such-user-hz\"\n", "no user named no-such-user-hz"},
      {"[control]\nsocket_owner = \"no-such-user-hz\"\n", "no user named no-such-user-hz"},
      {"[vm]\nsocket_mode = \"0400\"\n", "vm.socket_mode: expected"},
      {"[vm]\nsocket_mode = \"4660\"\n", "vm.socket_mode: expected"},
      {"[vm]\nsocket_mode = \"rw\"\n", "vm.socket_mode: expected"},
  };
  for (const auto& [toml, error] : cases) {
    EXPECT_EQ(svc.RunToExit({"--config", svc.WriteConfig(toml)}, &out), 2) << toml << out;
    EXPECT_NE(out.find(error), std::string::npos) << out;
  }
}

// Every socket shows up in its directory listening and with its final mode:
// none is ever created there (where the umask decides its mode) or has its
// mode changed there afterwards. The daemon runs with umask 0, under which a
// socket bound in place would be open to everyone.
TEST(ServiceSocketsTest, SocketsAppearWithTheirFinalMode) {
  ServiceProcess svc;
  int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(in, 0);
  ASSERT_GE(
      inotify_add_watch(in, svc.dir().c_str(), IN_CREATE | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO),
      0);
  mode_t saved = umask(0);
  bool started = svc.Start();
  umask(saved);
  ASSERT_TRUE(started);
  auto vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  // What happened to each name before it got its final one (renames followed).
  std::map<std::string, std::string> history;
  std::map<uint32_t, std::string> moved_from;
  alignas(inotify_event) char buf[64 * 1024];
  for (ssize_t n; (n = read(in, buf, sizeof(buf))) > 0;) {
    for (char* p = buf; p < buf + n;) {
      auto* e = reinterpret_cast<inotify_event*>(p);
      p += sizeof(inotify_event) + e->len;
      if (e->len == 0 || (e->mask & IN_ISDIR)) continue;
      std::string name = e->name;
      if (e->mask & IN_CREATE) history[name] += "created;";
      if (e->mask & IN_ATTRIB) history[name] += "mode or owner changed;";
      if (e->mask & IN_MOVED_FROM) moved_from[e->cookie] = history[name];
      if (e->mask & IN_MOVED_TO) history[name] = moved_from[e->cookie] + "moved in;";
    }
  }
  close(in);
  EXPECT_EQ(history["ctl.sock"], "moved in;");
  EXPECT_EQ(history[vms[0].substr(svc.dir().size() + 1)], "moved in;");
  EXPECT_EQ(Lstat(svc.dir() + "/ctl.sock").st_mode & 07777, 0600u);
  EXPECT_EQ(Lstat(vms[0]).st_mode & 07777, 0660u);
}

}  // namespace
}  // namespace hz::testing
