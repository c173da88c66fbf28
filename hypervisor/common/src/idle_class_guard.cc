#include "hz/common/idle_class_guard.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>

#include "hz/common/thread_priority.h"

namespace hz {
namespace {

using Clock = std::chrono::steady_clock;

struct SchedStat {
  uint64_t ran_ns = 0;     // time on a CPU
  uint64_t waited_ns = 0;  // time runnable, waiting for one
};

// /proc/<pid>/task/<tid>/schedstat: "ran waited timeslices".
bool ReadSchedStat(int fd, SchedStat* out) {
  char buf[96];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return false;
  const char* end = buf + n;
  auto [p, ec] = std::from_chars(buf, end, out->ran_ns);
  if (ec != std::errc() || p == end) return false;
  return std::from_chars(p + 1, end, out->waited_ns).ec == std::errc();
}

// Both calls are checked by the kernel against CAP_SYS_NICE and
// RLIMIT_NICE: the nice value first, since leaving the idle class is
// allowed only at a nice value the process may take.
bool LeaveIdleClass(pid_t tid, int nice) {
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) != 0) return false;
  const sched_param none{};
  return sched_setscheduler(tid, SCHED_OTHER, &none) == 0;
}

void EnterIdleClass(pid_t tid) {
  const sched_param none{};
  sched_setscheduler(tid, SCHED_IDLE, &none);
  setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
}

}  // namespace

struct IdleClassGuard::Registry {
  struct Member {
    int nice = 0;
    int schedstat_fd = -1;
    SchedStat last;
    bool lifted = false;
    Clock::time_point lifted_until;
    const TaskWaiter* task_waiter = nullptr;  // while the thread declares one
  };

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::map<pid_t, Member> members;  // by thread id
  uint64_t lifts = 0;

  void Leave(pid_t tid) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = members.find(tid);
    if (it == members.end()) return;
    close(it->second.schedstat_fd);
    members.erase(it);
  }

  void SetTaskWaiter(pid_t tid, const TaskWaiter* waiter) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = members.find(tid);
    if (it != members.end()) it->second.task_waiter = waiter;
  }
};

// Held by an enrolled thread until it exits (thread_local), so that the
// guard forgets it whichever way the thread was started.
class IdleClassGuard::Enrolment {
 public:
  ~Enrolment() {
    if (registry_) registry_->Leave(tid_);
  }
  void Join(std::shared_ptr<Registry> registry, pid_t tid) {
    if (registry_) registry_->Leave(tid_);
    registry_ = std::move(registry);
    tid_ = tid;
  }
  void SetTaskWaiter(const TaskWaiter* waiter) {
    if (registry_) registry_->SetTaskWaiter(tid_, waiter);
  }

 private:
  std::shared_ptr<Registry> registry_;
  pid_t tid_ = 0;
};

IdleClassGuard::Enrolment& IdleClassGuard::ThisThreadEnrolment() {
  thread_local Enrolment enrolment;
  return enrolment;
}

IdleClassGuard::TaskWaiter::TaskWaiter(const std::atomic<size_t>* waiting) : waiting_(waiting) {
  ThisThreadEnrolment().SetTaskWaiter(this);
}

IdleClassGuard::TaskWaiter::~TaskWaiter() {
  ThisThreadEnrolment().SetTaskWaiter(nullptr);
}

bool IdleClassGuard::MayLeaveIdleClass(int nice) {
  static std::mutex mu;
  static std::map<int, bool> answers;
  std::lock_guard<std::mutex> lock(mu);
  auto it = answers.find(nice);
  if (it != answers.end()) return it->second;
  bool may = false;
  std::thread([&may, nice] {
    SetThisThreadNice(kIdleClassNice);
    may = ThisThreadInIdleClass() && LeaveIdleClass(gettid(), nice);
  }).join();
  return answers[nice] = may;
}

bool IdleClassGuard::Starved(uint64_t ran_ns, uint64_t waited_ns, uint64_t elapsed_ns,
                             uint64_t window_ns) {
  return elapsed_ns * 2 >= window_ns && waited_ns * 2 >= elapsed_ns && ran_ns * 32 < waited_ns;
}

IdleClassGuard::IdleClassGuard(Options options)
    : options_(options), registry_(std::make_shared<Registry>()) {
  watcher_ = NamedThread("hz-idle-guard", [this] { Watch(); });
}

IdleClassGuard::~IdleClassGuard() {
  {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->stop = true;
  }
  registry_->cv.notify_all();
  watcher_.join();
  std::lock_guard<std::mutex> lock(registry_->mu);
  for (const auto& [tid, m] : registry_->members) {
    if (!m.lifted) LeaveIdleClass(tid, m.nice);
  }
}

void IdleClassGuard::EnrolThisThread(int nice) {
  const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  SchedStat now;
  if (fd < 0 || !ReadSchedStat(fd, &now) || !MayLeaveIdleClass(nice)) {
    if (fd >= 0) close(fd);
    SetThisThreadNice(nice);
    return;
  }
  // In the class before the guard may see it, so that a lift is never
  // undone by the thread's own move into the class.
  SetThisThreadNice(kIdleClassNice);
  ReadSchedStat(fd, &now);
  const pid_t tid = gettid();
  {
    std::lock_guard<std::mutex> lock(registry_->mu);
    Registry::Member& m = registry_->members[tid];
    m.nice = nice;
    m.schedstat_fd = fd;
    m.last = now;
  }
  ThisThreadEnrolment().Join(registry_, tid);
  registry_->cv.notify_all();  // an awake thread: look every window again
}

uint64_t IdleClassGuard::lifts() const {
  std::lock_guard<std::mutex> lock(registry_->mu);
  return registry_->lifts;
}

void IdleClassGuard::Watch() {
  Registry& r = *registry_;
  std::unique_lock<std::mutex> lock(r.mu);
  const auto window_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.window).count());
  Clock::time_point last_look = Clock::now();
  bool any_awake = true;
  while (!r.stop) {
    const auto wait = any_awake ? options_.window : options_.window * kSleepingLooks;
    r.cv.wait_for(lock, wait);
    if (r.stop) break;
    const Clock::time_point now = Clock::now();
    const auto elapsed = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_look).count());
    last_look = now;
    any_awake = false;
    for (auto& [tid, m] : r.members) {
      SchedStat seen;
      if (!ReadSchedStat(m.schedstat_fd, &seen)) continue;
      const uint64_t ran = seen.ran_ns - m.last.ran_ns;
      const uint64_t waited = seen.waited_ns - m.last.waited_ns;
      m.last = seen;
      any_awake = any_awake || m.lifted || ran > 0 || waited > 0;
      if (m.lifted) {
        if (now < m.lifted_until) continue;
        EnterIdleClass(tid);
        m.lifted = false;
      } else if (Starved(ran, waited, elapsed, window_ns) &&
                 !(m.task_waiter && m.task_waiter->HasNothingToRun()) &&
                 LeaveIdleClass(tid, m.nice)) {
        m.lifted = true;
        m.lifted_until = now + options_.window * options_.lifted_windows;
        ++r.lifts;
      }
    }
  }
}

}  // namespace hz
