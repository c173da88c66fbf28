// Runs harmonaized as a child process with a private state directory, talks
// to its control socket, and forks rank processes.
#ifndef HZ_TESTS_INTEGRATION_SERVICE_SERVICE_HARNESS_H_
#define HZ_TESTS_INTEGRATION_SERVICE_SERVICE_HARNESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz_test/service_manager.h"

namespace hz::testing {

// How long a test waits for what the service owes it: only detects hangs.
constexpr int kWaitMs = 10000;
// How long a request on the control socket waits for its answer (as long as
// hzctl's default): longer than any command takes, so that only a daemon that
// stopped answering fails it.
constexpr int kControlAnswerMs = 30000;

class ServiceProcess {
 public:
  ServiceProcess();
  ~ServiceProcess();
  // Starts the daemon; extra arguments are appended to its command line.
  bool Start(const std::vector<std::string>& extra = {});
  // The daemon's command line on this state directory.
  std::vector<std::string> Args(const std::vector<std::string>& extra) const;
  // Sends SIGTERM and waits (up to the deadline) for the exit status; -1 on a hang.
  int Terminate(int timeout_ms = 20000);
  // Waits for the daemon to exit by itself; its exit status, -1 on a hang.
  int Wait(int timeout_ms = 20000);
  // Runs another daemon on this state directory (with this one's command line
  // plus `extra`) until it exits by itself; its exit status (-1 if it is still
  // running at the deadline, then killed) and what it wrote to stderr.
  int RunToExit(const std::vector<std::string>& extra, std::string* output,
                int timeout_ms = 20000) const;
  nlohmann::json Control(const nlohmann::json& req, int answer_ms = kControlAnswerMs);
  // A live upgrade through the control socket (`binary` empty: the same
  // program), or started by SIGUSR2 (by_signal). Waits until the new process
  // answers on the control socket, then follows it: pid() names it and
  // Terminate() stops it (the test process adopts it as a subreaper). Returns
  // the new pid, or -1 with *error (the old process still serves then).
  pid_t Upgrade(std::string* error, const std::string& binary = "", bool by_signal = false,
                int timeout_ms = 60000);
  // Follows an upgrade started some other way (hzctl): waits until a new
  // process answers and the old one has exited, as Upgrade does.
  pid_t FollowUpgrade(std::string* error, int timeout_ms = 60000);
  // Runs the hzctl at hzctl_path with args against this service; returns its
  // exit code, with its stdout and stderr in *out.
  int Hzctl(const std::string& hzctl_path, const std::string& args, std::string* out) const;
  // Creates a tenant and binds `n` VM sockets to it; returns their paths.
  std::vector<std::string> TenantWithVms(const std::string& tenant, int n);
  const std::string& dir() const { return dir_; }
  // Writes `toml` to harmonaized.toml in dir() (replacing what an earlier call
  // wrote) and returns its path, for Start({"--config", path}).
  std::string WriteConfig(const std::string& toml) const;
  pid_t pid() const { return pid_; }
  // The daemon binary the next Start runs (default: harmonaized).
  void set_binary(const std::string& path) { binary_ = path; }
  // From the next Start on, the daemon's stderr goes to a file that Log() reads.
  void CaptureLog() { capture_log_ = true; }
  // From the next Start on, the daemon runs under manager, as systemd runs
  // it: NOTIFY_SOCKET, and the manager's fd store handed to it (LISTEN_FDS).
  void set_service_manager(FakeServiceManager* manager) { manager_ = manager; }
  // SIGKILL and reap: the daemon crashed. Start() again restarts it.
  void Kill();
  std::string Log() const;

 private:
  std::string dir_;
  std::string binary_ = HZ_HARMONAIZED_PATH;
  bool capture_log_ = false;
  FakeServiceManager* manager_ = nullptr;
  pid_t pid_ = -1;
};

// harmonaized with --fd-store under a service manager of its own (the test
// one, which speaks systemd's notify and fd-store protocol), as the systemd
// unit runs it: a crash and restart keep every VM's device.
class StoredService {
 public:
  StoredService() : manager_(svc_.dir() + "/notify.sock") { svc_.set_service_manager(&manager_); }
  // Starts the daemon with --fd-store and `extra`; false also when the
  // manager could not bind its socket.
  bool Start(const std::vector<std::string>& extra = {}) {
    args_ = {"--fd-store"};
    args_.insert(args_.end(), extra.begin(), extra.end());
    return manager_.bound() && svc_.Start(args_);
  }
  // SIGKILL, then the manager starts it again, with the same arguments and
  // what it stored.
  bool Crash() {
    svc_.Kill();
    return svc_.Start(args_);
  }
  ServiceProcess& svc() { return svc_; }
  FakeServiceManager& manager() { return manager_; }

 private:
  ServiceProcess svc_;
  FakeServiceManager manager_;
  std::vector<std::string> args_;
};

// One request on the control socket at `path`; the answer, or {"ok": false}
// with why there was none ("timed_out": true when no answer came within
// answer_ms).
nlohmann::json ControlAt(const std::string& path, const nlohmann::json& req,
                         int answer_ms = kControlAnswerMs);
// Creates a tenant and binds `n` VM sockets in dir to it through the control
// socket at `control`; returns their paths.
std::vector<std::string> TenantWithVmsAt(const std::string& control, const std::string& dir,
                                         const std::string& tenant, int n);

// Fields of a thread's stat file (proc(5)): its nice value, and its
// scheduling policy (0 SCHED_OTHER, 5 SCHED_IDLE).
constexpr int kStatNice = 19;
constexpr int kStatPolicy = 41;

// Each of process pid's threads: its name and one field of its stat (its
// nice value unless asked otherwise), ordered by name.
std::multimap<std::string, int> DaemonThreads(pid_t pid, int field = kStatNice);

// The values of the threads named `prefix` and a number (one of a pool).
std::vector<int> PoolValues(const std::multimap<std::string, int>& threads,
                            const std::string& prefix);

// The daemon's threads (as DaemonThreads) once ready(threads) holds. A
// thread names itself when it first runs, which may be just after the daemon
// answers; the deadline (kWaitMs) only detects a thread that never does.
std::multimap<std::string, int> WaitForThreads(
    pid_t pid, int field, const std::function<bool(const std::multimap<std::string, int>&)>& ready);

// Sends GET `target` to 127.0.0.1:port; the whole response, empty when the
// connection fails or no answer comes within timeout_ms.
std::string HttpGet(uint16_t port, const std::string& target, int timeout_ms = 20000);

// Forks one process per rank; fn(rank) returns the process's exit code.
// Returns the exit codes (128 + signal for a killed process).
std::vector<int> RunRanks(int n, const std::function<int(int rank)>& fn);
// RunRanks in two steps: forks the ranks; then waits for them, killing
// those still running after `patience` (a hang: their code reads 137). A
// rank that could not be forked reads kRankNotStarted.
inline constexpr int kRankNotStarted = 125;
std::vector<pid_t> StartRanks(int n, const std::function<int(int rank)>& fn);
std::vector<int> WaitRanks(const std::vector<pid_t>& pids, std::chrono::milliseconds patience);

// What each of process pid's threads was doing when asked, one line each
// (name, state, policy, nice, CPU time, time spent waiting for a CPU, and
// the kernel function it sleeps in), for the message of a test that found
// the daemon stalled.
std::string DescribeThreads(pid_t pid);

// A pipe for sending a fixed-size message from one rank process to others.
class Pipe {
 public:
  Pipe();
  ~Pipe();
  bool Send(const void* p, size_t n);
  bool Receive(void* p, size_t n, int timeout_ms = 20000);
  void CloseAll();

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace hz::testing

#endif  // HZ_TESTS_INTEGRATION_SERVICE_SERVICE_HARNESS_H_
