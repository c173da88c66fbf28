// vdev::TurnScheduler: shares one connection thread between the sessions it
// serves by weighted time instead of by turns.
//
// A kick runs a turn: a bounded run of one ring's requests (QueueLimits).
// Without a scheduler, turns take the thread in the order they are posted,
// so a session whose every turn is long (costly requests) gets as many turns
// as one whose turns are short, and so most of the time. With one, each
// session belongs to an account named by an opaque share key (sessions with
// the same key are charged as one) with a weight. Every turn's measured
// duration is charged to its account as virtual time, duration / weight,
// and of the sessions with a turn waiting (a kick, or the rest of a turn
// whose budget ran out) the one whose account has the least virtual time
// goes next: start-time fair queueing. Under contention accounts get the
// thread's time in proportion to their weights; alone, a session runs as
// without a scheduler.
//
// An account that becomes active (none of its sessions had a turn waiting)
// starts at the thread's virtual time, the start of the latest turn run:
// time spent idle earns no credit, so a session that wakes up gets its
// share from then on, never a burst to catch up.
//
// A kick runs its turn at once, as without a scheduler, when its session's
// account has the least virtual time of those waiting, as one that was idle
// has (ties go to the one that waited longer); otherwise the session waits,
// and is resumed by a post onto its executor, as a turn whose budget ran
// out was before.
// Cost: two clock reads per turn (vDSO, no system call), two uncontended
// atomic adds for the charges (Charges()), and no thread of its own.
//
// Not thread-safe: every session given one scheduler must run on the same
// thread (give each connection thread, that is each io_context run by one
// thread, a scheduler of its own). Only Charges() may be called from any
// thread.
#ifndef VDEV_TURN_SCHEDULER_H_
#define VDEV_TURN_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vdev {

class TurnScheduler {
 public:
  // Monotonic time in nanoseconds; tests pass a fake one.
  using Clock = std::function<int64_t()>;
  class Member;

  // An empty clock reads std::chrono::steady_clock.
  explicit TurnScheduler(Clock clock = {});
  ~TurnScheduler();
  TurnScheduler(const TurnScheduler&) = delete;
  TurnScheduler& operator=(const TurnScheduler&) = delete;

  // A session's place. share_key names the account it is charged to (empty:
  // an account of its own); weight (0 counts as 1) is the account's share,
  // as the latest member to join says. resume is called when the member
  // waits and its turn may be due: it must post Member::Resumed onto the
  // member's executor, never call it in place (it is called from inside
  // other members' calls).
  std::unique_ptr<Member> Join(const std::string& share_key, uint32_t weight,
                               std::function<void()> resume);

  // What the sessions of one share key were charged: the turns they ran and
  // the turns' measured time (real nanoseconds, before the weight divides it).
  struct Charge {
    uint64_t nanoseconds = 0;
    uint64_t turns = 0;
  };
  // Each share key's charge since its first session joined, kept after its
  // sessions leave so that it only grows (one entry per key ever joined);
  // sessions with an empty key are not in it. Any thread may call it.
  std::map<std::string, Charge> Charges() const;

 private:
  struct Account;
  // A share key's charge, in atomics: End adds to them on the owning thread
  // and Charges() reads them on any. Posting the read onto the owning thread
  // instead would make every reader wait for that thread, which may be busy
  // for a while (that is when its charges matter).
  struct ChargeTotals {
    std::atomic<uint64_t> nanoseconds{0};
    std::atomic<uint64_t> turns{0};
  };

  // Virtual time is nanoseconds * kScale / weight: keeps the fractions of
  // high weights.
  static constexpr uint64_t kScale = 1024;

  bool Request(Member* m);
  bool Resumed(Member* m);
  void Begin(Member* m);
  void End(Member* m, bool more);
  void Leave(Member* m);
  void Activate(Account* a);
  void Enqueue(Member* m);
  // Starts m's turn when the thread is free and m, waiting, has the least
  // virtual time of all that wait; else makes sure that one is resumed.
  bool TryRun(Member* m);
  // When members wait and no resume is on its way, resumes the one with the
  // least virtual time: someone always comes to take the thread.
  void Wake();
  Member* Least() const;
  int64_t Now() const;
  // share_key's totals, made at its first Join.
  ChargeTotals* TotalsOf(const std::string& share_key);

  const Clock clock_;
  std::map<std::string, std::unique_ptr<Account>> shared_;  // by share key
  std::vector<Member*> waiting_;
  Member* running_ = nullptr;  // between Begin and End
  int resumes_posted_ = 0;     // members whose resume has not come back yet
  // The thread's virtual time: the start of the latest turn run.
  uint64_t now_virtual_ = 0;
  uint64_t next_seq_ = 0;
  // Taken by Join of a new account and by Charges(), never per turn. The
  // map's entries are never erased: their addresses stay valid.
  mutable std::mutex totals_mu_;
  std::map<std::string, ChargeTotals> totals_;  // by share key
};

class TurnScheduler::Member {
 public:
  // Leaves, passing the thread on if the member held or was to take it.
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // The member has a turn waiting. True: run it now, between Begin and End.
  // False: it waits; resume will be called when it may be due.
  bool Request() { return scheduler_->Request(this); }
  // The handler resume posted: true when the member's turn is due now (run
  // it between Begin and End); false when another one goes first.
  bool Resumed() { return scheduler_->Resumed(this); }
  // Begin starts the turn's clock; End charges the turn, says whether the
  // member has another turn waiting, and hands the thread on.
  void Begin() { scheduler_->Begin(this); }
  void End(bool more) { scheduler_->End(this, more); }

 private:
  friend class TurnScheduler;
  enum class State { kIdle, kWaiting, kRunning };

  Member(TurnScheduler* scheduler, std::unique_ptr<Account> own_account, Account* account,
         std::function<void()> resume);

  TurnScheduler* const scheduler_;
  std::unique_ptr<Account> own_account_;  // empty share key
  Account* const account_;
  const std::function<void()> resume_;
  State state_ = State::kIdle;
  bool resume_posted_ = false;
  uint64_t seq_ = 0;          // order of arrival among the waiting
  int64_t turn_started_ = 0;  // Begin's clock reading
};

}  // namespace vdev

#endif  // VDEV_TURN_SCHEDULER_H_
