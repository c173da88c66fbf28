#include "blocking_call_guard.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace vdev {

// One per thread that has made a guarded call.
struct BlockingCallGuard::Slot {
  // Odd while the thread is inside a guarded call; it moves on with every
  // call, so the watchdog can tell one long call from two short ones.
  std::atomic<uint32_t> seq{0};
  pthread_t thread{};
  uint32_t last_seen = 0;   // the watchdog's previous look
  uint32_t generation = 0;  // the process (fork) the slot was registered in
};

namespace {

using Slot = BlockingCallGuard::Slot;

struct Registry {
  std::mutex mu;
  std::vector<Slot*> slots;
  bool watchdog_running = false;
  // Set while the watchdog sleeps for good, a tick after the last guarded
  // call: a process whose threads make no such calls then has no thread
  // waking every tick. The next guarded call wakes it (WakeWatchdog). A
  // futex word (atomic wait), which a fork leaves in no state of its own.
  std::atomic<uint32_t> asleep{0};
};

// Never destroyed: the watchdog thread may look at it until the process ends.
Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

// Moves on in every child process: a fork copies the calling thread and its
// slot, but not the watchdog thread nor any other thread.
std::atomic<uint32_t> g_generation{0};

// Registers the thread on first use and unregisters it when the thread
// exits, so the watchdog never signals a thread that is gone.
struct ThreadRegistration {
  Slot* slot = nullptr;
  ~ThreadRegistration() {
    if (slot == nullptr) return;
    Registry& r = TheRegistry();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      auto it = std::find(r.slots.begin(), r.slots.end(), slot);
      if (it != r.slots.end()) r.slots.erase(it);
    }
    delete slot;
  }
};
thread_local ThreadRegistration t_registration;

std::atomic<GuardWarningSink> g_warning_sink{nullptr};

void Warn(const std::string& message) {
  if (GuardWarningSink sink = g_warning_sink.load(std::memory_order_acquire); sink != nullptr) {
    sink(message);
  } else {
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

void OnInterrupt(int) {}

// The registry's lock is held across fork(), so the child never inherits
// it locked by a thread that does not exist there.
void PrepareFork() {
  TheRegistry().mu.lock();
}
void ParentAfterFork() {
  TheRegistry().mu.unlock();
}
void ChildAfterFork() {
  Registry& r = TheRegistry();
  r.slots.clear();
  if (t_registration.slot != nullptr) r.slots.push_back(t_registration.slot);
  r.watchdog_running = false;  // the next guarded call starts one
  r.asleep.store(0, std::memory_order_relaxed);
  g_generation.fetch_add(1, std::memory_order_relaxed);
  r.mu.unlock();
}

bool InstallHandler() {
  struct sigaction old {};
  if (sigaction(InterruptSignal(), nullptr, &old) != 0) return false;
  const bool plain = !(old.sa_flags & SA_SIGINFO);
  if (plain && old.sa_handler == OnInterrupt) return true;
  if (!plain || old.sa_handler != SIG_DFL) {
    Warn("vdev: signal " + std::to_string(InterruptSignal()) +
         " has a handler already; a front-end that makes its call eventfd block "
         "between the back-end's check and its write can stall a connection thread");
    return false;
  }
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the interrupted call must fail with EINTR
  if (sigaction(InterruptSignal(), &sa, nullptr) != 0) return false;
  pthread_atfork(PrepareFork, ParentAfterFork, ChildAfterFork);
  return true;
}

bool HandlerInstalled() {
  static const bool installed = InstallHandler();
  return installed;
}

// One look at every guarded thread: interrupts the ones found in the same
// call as on the last look. True when no thread made a guarded call since.
bool LookLocked(Registry& r) {
  bool quiet = true;
  for (Slot* s : r.slots) {
    const uint32_t seq = s->seq.load(std::memory_order_seq_cst);
    if ((seq & 1) != 0 && seq == s->last_seen) pthread_kill(s->thread, InterruptSignal());
    quiet = quiet && seq == s->last_seen && (seq & 1) == 0;
    s->last_seen = seq;
  }
  return quiet;
}

// Whether any guarded thread is inside a call now.
bool AnyInCallLocked(const Registry& r) {
  for (const Slot* s : r.slots) {
    if ((s->seq.load(std::memory_order_seq_cst) & 1) != 0) return true;
  }
  return false;
}

void WatchdogLoop() {
  pthread_setname_np(pthread_self(), "vdev-watchdog");  // as top -H and perf show it
  Registry& r = TheRegistry();
  for (;;) {
    std::this_thread::sleep_for(kWatchdogTick);
    std::unique_lock<std::mutex> lock(r.mu);
    if (!LookLocked(r)) continue;
    // A whole tick without a guarded call: sleep until the next one. The
    // flag is set before the threads are looked at again and a call's entry
    // stores its counter before it reads the flag (both sequentially
    // consistent), so either the call sees the flag and wakes this thread,
    // or this thread sees the call and stays awake.
    r.asleep.store(1, std::memory_order_seq_cst);
    if (AnyInCallLocked(r)) {
      r.asleep.store(0, std::memory_order_relaxed);
      continue;
    }
    lock.unlock();
    r.asleep.wait(1, std::memory_order_acquire);
  }
}

// The first guarded call after a quiet spell: the watchdog looks from now on
// (its first look records the call, the second interrupts it if it is stuck,
// so the bound is still two ticks).
void WakeWatchdog() {
  Registry& r = TheRegistry();
  if (r.asleep.exchange(0, std::memory_order_acq_rel) != 0) r.asleep.notify_one();
}

// First guarded call of a thread, or its first in a forked child: makes sure
// this process has a watchdog and the thread a slot it watches.
Slot* RegisterThread() {
  if (!HandlerInstalled()) return nullptr;
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.watchdog_running) {
    try {
      std::thread(WatchdogLoop).detach();
    } catch (const std::system_error& e) {
      Warn(std::string("vdev: no watchdog thread (") + e.what() +
           "); blocking calls are not bounded");
      return nullptr;
    }
    r.watchdog_running = true;
  }
  Slot* slot = t_registration.slot;
  if (slot == nullptr) {
    slot = new Slot;
    slot->thread = pthread_self();
    r.slots.push_back(slot);
    t_registration.slot = slot;
  }
  slot->generation = g_generation.load(std::memory_order_relaxed);
  return slot;
}

Slot* ThisThreadSlot() {
  Slot* slot = t_registration.slot;
  if (slot != nullptr && slot->generation == g_generation.load(std::memory_order_relaxed)) {
    return slot;
  }
  return RegisterThread();
}

}  // namespace

void SetGuardWarningSink(GuardWarningSink sink) {
  g_warning_sink.store(sink, std::memory_order_release);
}

int InterruptSignal() {
  return SIGRTMIN + 5;
}

bool BlockingCallGuard::Bounded() {
  return HandlerInstalled();
}

// Only this thread writes its counter: a plain store, no locked instruction.
BlockingCallGuard::BlockingCallGuard() : slot_(ThisThreadSlot()) {
  if (slot_ == nullptr) return;
  slot_->seq.store(slot_->seq.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  // A load the other threads rarely write, so its line stays in this
  // core's cache; it is true only for the first call after a quiet spell.
  if (TheRegistry().asleep.load(std::memory_order_seq_cst) != 0) [[unlikely]] {
    WakeWatchdog();
  }
}

BlockingCallGuard::~BlockingCallGuard() {
  if (slot_ != nullptr) {
    slot_->seq.store(slot_->seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
}

}  // namespace vdev
