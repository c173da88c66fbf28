#include "backend_harness.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>

#include <boost/asio/post.hpp>

#include "echo_factory.h"

#ifndef VDEV_ECHO_BACKEND_PATH
#error "VDEV_ECHO_BACKEND_PATH must name the vdev-echo-backend program"
#endif

namespace vdev::testing {

std::string TempSocketPath(const std::string& tag) {
  static std::atomic<int> counter{0};
  std::string path = "/tmp/vdev-" + tag + "-" + std::to_string(getpid()) + "-" +
                     std::to_string(counter++) + ".sock";
  unlink(path.c_str());
  return path;
}

DeviceFactory EchoFactory() {
  return MakeEchoFactory();
}

InProcessBackend::InProcessBackend(std::vector<std::string> paths, ServerOptions options)
    : work_(io_.get_executor()), paths_(std::move(paths)) {
  for (const std::string& p : paths_) {
    servers_.push_back(std::make_unique<Server>(io_, p, EchoFactory(), options));
    if (!servers_.back()->Start(&error_)) {
      ok_ = false;
      return;
    }
  }
  thread_ = std::thread([this] { io_.run(); });
}

InProcessBackend::~InProcessBackend() {
  if (thread_.joinable()) {
    std::promise<void> stopped;
    boost::asio::post(io_, [this, &stopped] {
      for (auto& s : servers_) s->Stop();
      stopped.set_value();
    });
    stopped.get_future().wait();
    work_.reset();
    // Let the closes run, then stop whatever is left (busy-poll loops).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    io_.stop();
    thread_.join();
  }
  servers_.clear();
  for (const std::string& p : paths_) unlink(p.c_str());
}

namespace {

// Starts vdev-echo-backend on path and waits (bounded) for its socket;
// returns its pid, or -1 when it exited first.
pid_t SpawnEchoBackend(const std::string& path, const std::vector<std::string>& extra_args,
                       const std::function<void()>& in_child = {}) {
  std::vector<std::string> args = {VDEV_ECHO_BACKEND_PATH,
                                   "--socket",
                                   path,
                                   "--queues",
                                   std::to_string(kEchoQueues),
                                   "--config-size",
                                   std::to_string(kEchoConfigSize),
                                   "--log-level",
                                   "warn"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (in_child) in_child();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (int i = 0; i < 2000; ++i) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return pid;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return -1;
    usleep(5000);
  }
  return pid;
}

}  // namespace

ChildBackend::ChildBackend(const std::string& path, std::vector<std::string> extra_args)
    : path_(path), pid_(SpawnEchoBackend(path, extra_args)) {}

void ChildBackend::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int ChildBackend::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    usleep(5000);
  }
  Kill();
  return -1;
}

ChildBackend::~ChildBackend() {
  Stop();
  unlink(path_.c_str());
}

RestartingBackend::RestartingBackend(const std::string& path, const std::string& notify_path,
                                     std::vector<std::string> extra_args)
    : manager_(notify_path), path_(path), extra_args_(std::move(extra_args)) {
  extra_args_.push_back("--fd-store");
  Restart();
}

void RestartingBackend::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool RestartingBackend::Restart() {
  // Everything the last process sent before it died, as systemd reads it;
  // the store does not change while the child is forked.
  manager_.Pause();
  manager_.Drain();
  pid_ = SpawnEchoBackend(path_, extra_args_, [this] { manager_.PrepareChild(); });
  manager_.Serve();
  return pid_ > 0;
}

int RestartingBackend::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

RestartingBackend::~RestartingBackend() {
  Stop();
  unlink(path_.c_str());
}

std::vector<pid_t> Children() {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces; read after the ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid() &&
        state != 'Z') {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

UpgradableBackend::UpgradableBackend(const std::string& path, std::vector<std::string> extra_args) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_ = SpawnEchoBackend(path, extra_args);
}

UpgradableBackend::~UpgradableBackend() {
  for (pid_t p : Children()) kill(p, SIGTERM);
  for (int i = 0; i < 400 && !Children().empty(); ++i) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    usleep(5000);
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

std::string UpgradableBackend::Upgrade() {
  kill(pid_, SIGUSR2);
  int status = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waitpid(pid_, &status, WNOHANG) != pid_) {
    if (std::chrono::steady_clock::now() > give_up) return "the old process did not exit";
    usleep(1000);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the old process failed";
  std::vector<pid_t> children = Children();
  if (children.size() != 1) return std::to_string(children.size()) + " successors";
  pid_ = children[0];
  return {};
}

}  // namespace vdev::testing
