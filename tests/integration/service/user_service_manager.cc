#include "user_service_manager.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace hz::testing {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A user manager refuses to start unless /run/systemd/system says the system
// was booted with systemd. PID 1 also leaves there the inaccessible nodes
// that ProtectHome=, ProtectKernelModules= and the like mount over what they
// hide. The child makes both on a tmpfs of its own mount namespace, then
// becomes the manager. Only system calls between fork and exec.
// First it joins the cgroups made for it (join: their cgroup.procs files;
// writing 0 moves the writer).
[[noreturn]] void BecomeManager(char* const argv[], char* const envp[], int log_fd,
                                const char* const join[]) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  for (const char* const* procs = join; *procs != nullptr; ++procs) {
    const int fd = open(*procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) _exit(89);
    close(fd);
  }
  // PID 1 may raise any limit a unit asks for, a user manager only up to
  // its own hard limits: room for the unit's LimitNICE=, where this process
  // may raise them (CAP_SYS_RESOURCE).
  const rlimit nice{0, 40};
  setrlimit(RLIMIT_NICE, &nice);
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    _exit(90);
  mkdir("/run/systemd", 0755);
  if (mount("tmpfs", "/run/systemd", "tmpfs", 0, "mode=0755") != 0) _exit(91);
  if (mkdir("/run/systemd/system", 0755) != 0 || mkdir("/run/systemd/inaccessible", 0755) != 0 ||
      mkdir("/run/systemd/inaccessible/dir", 0) != 0 ||
      mknod("/run/systemd/inaccessible/reg", S_IFREG, 0) != 0 ||
      mknod("/run/systemd/inaccessible/chr", S_IFCHR, makedev(0, 0)) != 0 ||
      mknod("/run/systemd/inaccessible/blk", S_IFBLK, makedev(0, 0)) != 0 ||
      mknod("/run/systemd/inaccessible/fifo", S_IFIFO, 0) != 0) {
    _exit(92);
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const char kSock[] = "/run/systemd/inaccessible/sock";
  std::memcpy(addr.sun_path, kSock, sizeof(kSock));
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(93);
  close(s);
  chmod(kSock, 0);
  execve(argv[0], argv, envp);
  _exit(94);
}

std::string Quote(const std::string& s) {
  return "'" + s + "'";
}

bool IsFileSystem(const char* path, decltype(statfs::f_type) magic) {
  struct statfs fs;
  return statfs(path, &fs) == 0 && fs.f_type == magic;
}

// The mount points of the hierarchies systemd keeps its cgroups in: the
// unified one, and in hybrid mode also its own named v1 hierarchy.
std::vector<std::string> SystemdHierarchies() {
  if (IsFileSystem("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)) return {"/sys/fs/cgroup"};
  std::vector<std::string> out;
  if (IsFileSystem("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC)) {
    out.push_back("/sys/fs/cgroup/unified");
  }
  if (IsFileSystem("/sys/fs/cgroup/systemd", CGROUP_SUPER_MAGIC)) {
    out.push_back("/sys/fs/cgroup/systemd");
  }
  return out;
}

std::vector<pid_t> ReadPids(const std::string& procs) {
  std::vector<pid_t> pids;
  std::ifstream in(procs);
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

}  // namespace

UserServiceManager::UserServiceManager() {
  if (access(kSystemd, X_OK) != 0) {
    why_ = std::string(kSystemd) + " is not installed";
    return;
  }
  char tmpl[] = "/var/lib/hz-systemd-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    why_ = std::string("mkdtemp under /var/lib: ") + std::strerror(errno);
    return;
  }
  dir_ = tmpl;
  const std::vector<std::string> join = MakeCgroups();
  if (why_.empty()) Start(join);
}

std::vector<std::string> UserServiceManager::MakeCgroups() {
  const std::vector<std::string> mounts = SystemdHierarchies();
  if (mounts.empty()) {
    why_ = "no cgroup hierarchy of systemd's under /sys/fs/cgroup";
    return {};
  }
  // Named after the test's directory: unique, and found again by a person.
  cgroup_ = "/" + fs::path(dir_).filename().string();
  std::vector<std::string> join;
  for (const std::string& mount : mounts) {
    if (mkdir((mount + cgroup_).c_str(), 0755) != 0) {
      // Half a delegation would confuse the manager: all or nothing.
      why_ = "cannot make cgroup " + mount + cgroup_ + ": " + std::strerror(errno);
      RemoveCgroups();
      return {};
    }
    hierarchies_.push_back(mount);
    join.push_back(mount + cgroup_ + "/cgroup.procs");
  }
  return join;
}

void UserServiceManager::RemoveCgroups() {
  for (const std::string& mount : hierarchies_) {
    // Deepest first: a cgroup goes once its children and processes have.
    std::vector<std::string> groups;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(mount + cgroup_, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_directory(ec)) groups.push_back(it->path().string());
    }
    groups.push_back(mount + cgroup_);
    std::sort(groups.begin(), groups.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const std::string& g : groups) {
      for (pid_t pid : ReadPids(g + "/cgroup.procs")) kill(pid, SIGKILL);
    }
    for (const std::string& g : groups) {
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (rmdir(g.c_str()) != 0 && errno == EBUSY && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  hierarchies_.clear();
  cgroup_.clear();
}

std::vector<pid_t> UserServiceManager::Processes(const std::string& control_group) const {
  if (hierarchies_.empty() || control_group.empty()) return {};
  return ReadPids(hierarchies_.front() + control_group + "/cgroup.procs");
}

void UserServiceManager::Start(const std::vector<std::string>& join) {
  for (const char* sub : {"/xdg", "/config/systemd/user", "/state-home", "/cache", "/data"}) {
    std::error_code ec;
    fs::create_directories(dir_ + sub, ec);
  }
  chmod((dir_ + "/xdg").c_str(), 0700);
  // Built before fork: the child makes no allocation.
  std::vector<std::string> env = {
      "XDG_RUNTIME_DIR=" + dir_ + "/xdg", "XDG_CONFIG_HOME=" + dir_ + "/config",
      "XDG_STATE_HOME=" + dir_ + "/state-home", "XDG_CACHE_HOME=" + dir_ + "/cache",
      "XDG_DATA_HOME=" + dir_ + "/data", "HOME=" + dir_, "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
      // The test's units and systemd's own targets, none the host enabled
      // for its users.
      "SYSTEMD_UNIT_PATH=" + dir_ + "/config/systemd/user:/usr/lib/systemd/user"};
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string prog = kSystemd, user = "--user";
  char* argv[] = {prog.data(), user.data(), nullptr};
  std::vector<const char*> join_paths;
  for (const std::string& procs : join) join_paths.push_back(procs.c_str());
  join_paths.push_back(nullptr);
  const int log_fd =
      open((dir_ + "/manager.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  pid_ = fork();
  if (pid_ == 0) BecomeManager(argv, envp.data(), log_fd, join_paths.data());
  close(log_fd);
  if (pid_ < 0) {
    why_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      why_ = "the manager exited (status " + std::to_string(status) + "); see " + dir_ +
             "/manager.log";
      return;
    }
    if (access((dir_ + "/xdg/systemd/private").c_str(), F_OK) == 0 &&
        Systemctl("show -p Version --value").code == 0) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  why_ = "the manager did not answer within 30 s";
}

UserServiceManager::~UserServiceManager() {
  if (pid_ > 0) {
    // Stops every unit first, as at a logout.
    Systemctl("exit");
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    int status;
    while (waitpid(pid_, &status, WNOHANG) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (kill(pid_, SIGKILL) == 0) waitpid(pid_, &status, 0);
  }
  RemoveCgroups();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

bool UserServiceManager::Install(const std::string& name, const std::string& unit,
                                 const std::string& dropin) {
  const std::string units = dir_ + "/config/systemd/user/";
  std::error_code ec;
  fs::create_directories(units + name + ".d", ec);
  std::ofstream(units + name) << unit;
  std::ofstream(units + name + ".d/test.conf") << dropin;
  return Systemctl("daemon-reload").code == 0;
}

CommandResult UserServiceManager::Systemctl(const std::string& args) const {
  return RunCommand("env XDG_RUNTIME_DIR=" + Quote(dir_ + "/xdg") + " systemctl --user " + args,
                    /*with_stderr=*/true, /*timeout_s=*/60);
}

std::string UserServiceManager::Property(const std::string& unit,
                                         const std::string& property) const {
  CommandResult r = RunCommand("env XDG_RUNTIME_DIR=" + Quote(dir_ + "/xdg") +
                                   " systemctl --user show -p " + property + " --value " + unit,
                               /*with_stderr=*/false, /*timeout_s=*/60);
  if (r.code != 0) return "";
  while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == ' ')) r.out.pop_back();
  return r.out;
}

}  // namespace hz::testing
