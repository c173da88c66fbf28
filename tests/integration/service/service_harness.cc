#include "service_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace hz::testing {

ServiceProcess::ServiceProcess() {
  // A live upgrade's new process is the old one's child: once the old one
  // leaves, it becomes this process's, to be waited for like the first.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  char tmpl[] = "/tmp/hz-svc-XXXXXX";
  const char* d = mkdtemp(tmpl);
  dir_ = d != nullptr ? d : "/tmp/hz-svc-fallback";
}

ServiceProcess::~ServiceProcess() {
  // A live upgrade the test did not follow leaves the daemon in a process
  // of its own: whichever process answers on the control socket goes too,
  // or it would outlive the test (and hold its output open).
  nlohmann::json status = Control({{"cmd", "status"}});
  if (status.value("timed_out", false)) {
    std::fprintf(stderr, "harness: the daemon (pid %d) stopped answering: %s\n", pid_,
                 status.value("error", std::string()).c_str());
  }
  const pid_t serving = status.value("ok", false) ? status["result"].value("pid", -1) : -1;
  for (pid_t pid : {pid_, serving}) {
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::vector<std::string> ServiceProcess::Args(const std::vector<std::string>& extra) const {
  std::vector<std::string> args = {
      binary_,        "--state-dir", dir_,  "--control-socket", dir_ + "/ctl.sock",
      "--no-metrics", "--log-level", "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  // Metrics only when the caller asks for a port.
  if (std::find(extra.begin(), extra.end(), "--metrics-port") != extra.end()) {
    args.erase(std::find(args.begin(), args.end(), "--no-metrics"));
  }
  // The caller's log level instead of the default one.
  if (std::find(extra.begin(), extra.end(), "--log-level") != extra.end()) {
    auto level = std::find(args.begin(), args.end(), "--log-level");  // the default's
    args.erase(level, level + 2);
  }
  return args;
}

void ServiceProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool ServiceProcess::Start(const std::vector<std::string>& extra) {
  std::vector<std::string> args = Args(extra);
  const std::string log = dir_ + "/daemon.log";
  // The manager reads everything the last process sent, and holds its store
  // still while the child is forked.
  if (manager_ != nullptr) {
    manager_->Pause();
    manager_->Drain();
  }
  pid_ = fork();
  if (pid_ > 0 && manager_ != nullptr) manager_->Serve();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    if (manager_ != nullptr) manager_->PrepareChild();
    if (capture_log_) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Started once the control socket answers: the daemon serves it only after
  // every listener (metrics too) is up. A socket file alone may be a previous
  // run's, or the control listener ahead of the others.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (std::chrono::steady_clock::now() < deadline) {
    struct stat st;
    if (stat((dir_ + "/ctl.sock").c_str(), &st) == 0 &&
        Control({{"cmd", "ping"}}, kWaitMs).value("ok", false)) {
      return true;
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int ServiceProcess::RunToExit(const std::vector<std::string>& extra, std::string* output,
                              int timeout_ms) const {
  std::vector<std::string> args = Args(extra);
  const std::string log = dir_ + "/run-to-exit.log";
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int rc = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  output->clear();
  if (FILE* f = fopen(log.c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), f)) output->append(buf, n);
    fclose(f);
  }
  return rc;
}

std::string ServiceProcess::WriteConfig(const std::string& toml) const {
  const std::string path = dir_ + "/harmonaized.toml";
  std::ofstream(path) << toml;
  return path;
}

std::string ServiceProcess::Log() const {
  std::string out;
  if (FILE* f = fopen((dir_ + "/daemon.log").c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
    fclose(f);
  }
  return out;
}

int ServiceProcess::Terminate(int timeout_ms) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return Wait(timeout_ms);
}

int ServiceProcess::Wait(int timeout_ms) {
  if (pid_ <= 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

pid_t ServiceProcess::Upgrade(std::string* error, const std::string& binary, bool by_signal,
                              int timeout_ms) {
  const pid_t old = pid_;
  if (by_signal) {
    kill(old, SIGUSR2);
  } else {
    nlohmann::json req = {{"cmd", "upgrade"}};
    if (!binary.empty()) req["binary"] = binary;
    nlohmann::json started = Control(req);
    if (!started.value("ok", false)) {
      *error = started.value("error", std::string("no answer"));
      return -1;
    }
  }
  return FollowUpgrade(error, timeout_ms);
}

pid_t ServiceProcess::FollowUpgrade(std::string* error, int timeout_ms) {
  const pid_t old = pid_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    nlohmann::json status = Control({{"cmd", "status"}});
    if (!status.value("ok", false)) continue;  // between the two processes
    const nlohmann::json& s = status["result"];
    const pid_t now = s.value("pid", -1);
    if (now > 0 && now != old) {
      // The new process becomes the test's child (as a subreaper) only once
      // the old one, its parent, has exited.
      int st = 0;
      waitpid(old, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        *error = "the old process did not exit cleanly after the hand-over";
      }
      pid_ = now;
      return now;
    }
    const nlohmann::json upgrade = s.value("upgrade", nlohmann::json::object());
    if (upgrade.value("state", std::string()) == "failed") {
      *error = upgrade.value("error", std::string("failed"));
      return -1;
    }
  }
  *error = "the upgrade did not finish in time";
  return -1;
}

int ServiceProcess::Hzctl(const std::string& hzctl_path, const std::string& args,
                          std::string* out) const {
  std::string cmd = hzctl_path + " --socket " + dir_ + "/ctl.sock " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[4096];
  out->clear();
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out->append(buf, n);
  int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

nlohmann::json ControlAt(const std::string& path, const nlohmann::json& req, int answer_ms) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // A daemon that accepts and never answers fails the test, not hangs it.
  const timeval patience{answer_ms / 1000, (answer_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &patience, sizeof(patience));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return {{"ok", false}, {"error", "connect failed"}};
  }
  std::string line = req.dump() + "\n";
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    close(fd);
    return {{"ok", false}, {"error", "write failed"}};
  }
  std::string in;
  char buf[4096];
  ssize_t n = 0;
  while (in.find('\n') == std::string::npos) {
    n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  const bool timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  close(fd);
  if (timed_out) {
    return {{"ok", false},
            {"timed_out", true},
            {"error", "no answer within " + std::to_string(answer_ms) + " ms"}};
  }
  nlohmann::json answer = nlohmann::json::parse(in.substr(0, in.find('\n')), nullptr, false);
  // A daemon that closes the connection unanswered (one leaving after a
  // live upgrade, or a dying one) gave no answer.
  if (answer.is_discarded()) return {{"ok", false}, {"error", "no answer"}};
  return answer;
}

std::vector<std::string> TenantWithVmsAt(const std::string& control, const std::string& dir,
                                         const std::string& tenant, int n) {
  ControlAt(control, {{"cmd", "tenant.create"}, {"name", tenant}});
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string path = dir + "/" + tenant + "-vm" + std::to_string(i) + ".sock";
    auto r = ControlAt(control, {{"cmd", "vm.bind"}, {"tenant", tenant}, {"socket", path}});
    if (r.value("ok", false)) out.push_back(path);
  }
  return out;
}

nlohmann::json ServiceProcess::Control(const nlohmann::json& req, int answer_ms) {
  return ControlAt(dir_ + "/ctl.sock", req, answer_ms);
}

std::vector<std::string> ServiceProcess::TenantWithVms(const std::string& tenant, int n) {
  return TenantWithVmsAt(dir_ + "/ctl.sock", dir_, tenant, n);
}

std::string HttpGet(uint16_t port, const std::string& target, int timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return {};
  }
  std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return {};
  }
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  return n < 0 ? std::string() : resp;
}

std::vector<pid_t> StartRanks(int n, const std::function<int(int rank)>& fn) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid < 0) std::perror("fork");  // the rank reads kRankNotStarted
    if (pid == 0) {
      int rc = 1;
      try {
        rc = fn(r);
      } catch (...) {
        rc = 99;
      }
      _exit(rc);
    }
    pids.push_back(pid);
  }
  return pids;
}

std::vector<int> WaitRanks(const std::vector<pid_t>& pids, std::chrono::milliseconds patience) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> codes;
  for (pid_t pid : pids) {
    // Never waitpid or kill a pid that is not a rank's: -1 would wait for
    // any child and signal every process there is.
    if (pid <= 0) {
      codes.push_back(kRankNotStarted);
      continue;
    }
    int status = 0;
    // Without a limit the wait blocks: benchmarks fork their ranks through
    // RunRanks, and a parent waking every few milliseconds would be noise.
    if (patience == std::chrono::milliseconds::max()) {
      waitpid(pid, &status, 0);
    } else {
      while (waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() - start >= patience) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

std::vector<int> RunRanks(int n, const std::function<int(int rank)>& fn) {
  return WaitRanks(StartRanks(n, fn), std::chrono::milliseconds::max());
}

Pipe::Pipe() {
  if (pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
}
Pipe::~Pipe() {
  CloseAll();
}
void Pipe::CloseAll() {
  for (int& fd : fds_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}
bool Pipe::Send(const void* p, size_t n) {
  return write(fds_[1], p, n) == static_cast<ssize_t>(n);
}
bool Pipe::Receive(void* p, size_t n, int timeout_ms) {
  auto* out = static_cast<uint8_t*>(p);
  size_t got = 0;
  while (got < n) {
    pollfd pfd{fds_[0], POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0) return false;
    ssize_t k = read(fds_[0], out + got, n - got);
    if (k <= 0) return false;
    got += static_cast<size_t>(k);
  }
  return true;
}

namespace {

// A thread's stat file (proc(5)): its name, and its fields from the third
// on (fields[0] is field 3). The name is in parentheses and may hold spaces
// and parentheses.
bool ReadThreadStat(const std::filesystem::path& task, std::string* name,
                    std::vector<std::string>* fields) {
  std::ifstream f(task / "stat");
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  *name = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 2));
  fields->clear();
  for (std::string value; rest >> value;) fields->push_back(value);
  return true;
}

// Calls fn(task directory, name, stat fields from the third on) for each of
// process pid's threads whose stat file reads.
void ForEachThread(pid_t pid,
                   const std::function<void(const std::filesystem::path&, const std::string&,
                                            const std::vector<std::string>&)>& fn) {
  std::error_code ec;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string name;
    std::vector<std::string> fields;
    if (ReadThreadStat(t.path(), &name, &fields)) fn(t.path(), name, fields);
  }
}

std::string FirstLine(const std::filesystem::path& file) {
  std::ifstream f(file);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

std::multimap<std::string, int> DaemonThreads(pid_t pid, int field) {
  std::multimap<std::string, int> out;
  const size_t at = static_cast<size_t>(field - 3);
  ForEachThread(pid, [&](const std::filesystem::path&, const std::string& name,
                         const std::vector<std::string>& fields) {
    if (at < fields.size()) out.emplace(name, std::stoi(fields[at]));
  });
  return out;
}

std::string DescribeThreads(pid_t pid) {
  std::ostringstream out;
  ForEachThread(pid, [&](const std::filesystem::path& task, const std::string& name,
                         const std::vector<std::string>& f) {
    if (f.size() <= kStatPolicy - 3) return;
    // schedstat: nanoseconds on a CPU, nanoseconds runnable waiting for one.
    std::istringstream sched(FirstLine(task / "schedstat"));
    uint64_t ran_ns = 0, waited_ns = 0;
    sched >> ran_ns >> waited_ns;
    out << name << " (" << task.filename().string() << "): state " << f[0] << ", policy "
        << f[kStatPolicy - 3] << ", nice " << f[kStatNice - 3] << ", ran " << ran_ns / 1000000
        << " ms, waited " << waited_ns / 1000000 << " ms, in " << FirstLine(task / "wchan") << "\n";
  });
  return out.str();
}

std::vector<int> PoolValues(const std::multimap<std::string, int>& threads,
                            const std::string& prefix) {
  std::vector<int> out;
  for (const auto& [name, value] : threads) {
    const bool numbered = name.size() > prefix.size() && name.rfind(prefix, 0) == 0 &&
                          std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()),
                                      name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numbered) out.push_back(value);
  }
  return out;
}

std::multimap<std::string, int> WaitForThreads(
    pid_t pid, int field,
    const std::function<bool(const std::multimap<std::string, int>&)>& ready) {
  std::multimap<std::string, int> threads;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
       std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    threads = DaemonThreads(pid, field);
    if (ready(threads)) break;
  }
  return threads;
}

}  // namespace hz::testing
