#include "vdev/turn_scheduler.h"

#include <algorithm>
#include <chrono>

namespace vdev {

namespace {

// Virtual times only grow and may wrap: compare them by their difference.
bool Earlier(uint64_t a, uint64_t b) {
  return static_cast<int64_t>(a - b) < 0;
}

}  // namespace

struct TurnScheduler::Account {
  std::string key;  // empty: one member's own
  uint64_t weight = 1;
  uint64_t virtual_time = 0;
  int members = 0;
  int active = 0;                  // members waiting or running
  ChargeTotals* totals = nullptr;  // empty key: not counted
};

TurnScheduler::TurnScheduler(Clock clock) : clock_(std::move(clock)) {}

TurnScheduler::~TurnScheduler() = default;

std::unique_ptr<TurnScheduler::Member> TurnScheduler::Join(const std::string& share_key,
                                                           uint32_t weight,
                                                           std::function<void()> resume) {
  std::unique_ptr<Account> own;
  Account* account;
  if (share_key.empty()) {
    own = std::make_unique<Account>();
    account = own.get();
  } else {
    std::unique_ptr<Account>& slot = shared_[share_key];
    if (!slot) {
      slot = std::make_unique<Account>();
      slot->key = share_key;
      slot->totals = TotalsOf(share_key);
    }
    account = slot.get();
  }
  account->weight = std::max<uint32_t>(weight, 1);
  account->members++;
  return std::unique_ptr<Member>(new Member(this, std::move(own), account, std::move(resume)));
}

TurnScheduler::Member::Member(TurnScheduler* scheduler, std::unique_ptr<Account> own_account,
                              Account* account, std::function<void()> resume)
    : scheduler_(scheduler),
      own_account_(std::move(own_account)),
      account_(account),
      resume_(std::move(resume)) {}

TurnScheduler::Member::~Member() {
  scheduler_->Leave(this);
}

bool TurnScheduler::Request(Member* m) {
  if (m->state_ == Member::State::kRunning) return false;  // its End asks again
  if (m->state_ == Member::State::kIdle) {
    Activate(m->account_);
    Enqueue(m);
  }
  return TryRun(m);
}

bool TurnScheduler::Resumed(Member* m) {
  if (m->resume_posted_) {
    m->resume_posted_ = false;
    resumes_posted_--;
  }
  if (m->state_ != Member::State::kWaiting) {
    Wake();  // it ran meanwhile; another may wait on this resume
    return false;
  }
  return TryRun(m);
}

void TurnScheduler::Begin(Member* m) {
  m->turn_started_ = Now();
}

void TurnScheduler::End(Member* m, bool more) {
  if (m->state_ != Member::State::kRunning) return;
  const int64_t elapsed = std::max<int64_t>(Now() - m->turn_started_, 0);
  Account* a = m->account_;
  a->virtual_time += static_cast<uint64_t>(elapsed) * kScale / a->weight;
  if (a->totals != nullptr) {
    a->totals->nanoseconds.fetch_add(static_cast<uint64_t>(elapsed), std::memory_order_relaxed);
    a->totals->turns.fetch_add(1, std::memory_order_relaxed);
  }
  running_ = nullptr;
  if (more) {
    Enqueue(m);
  } else {
    m->state_ = Member::State::kIdle;
    a->active--;
  }
  Wake();
}

void TurnScheduler::Leave(Member* m) {
  if (m->state_ == Member::State::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), m));
  }
  if (m->state_ == Member::State::kRunning) running_ = nullptr;
  if (m->state_ != Member::State::kIdle) m->account_->active--;
  m->state_ = Member::State::kIdle;
  // Its resume will never come back (its connection is gone).
  if (m->resume_posted_) {
    m->resume_posted_ = false;
    resumes_posted_--;
  }
  Account* a = m->account_;
  if (--a->members == 0 && !a->key.empty()) shared_.erase(a->key);
  Wake();
}

void TurnScheduler::Activate(Account* a) {
  if (a->active++ > 0) return;
  // Idle time earns no credit: catch up with the thread.
  if (Earlier(a->virtual_time, now_virtual_)) a->virtual_time = now_virtual_;
}

void TurnScheduler::Enqueue(Member* m) {
  m->state_ = Member::State::kWaiting;
  m->seq_ = next_seq_++;
  waiting_.push_back(m);
}

bool TurnScheduler::TryRun(Member* m) {
  if (running_ != nullptr || Least() != m) {
    Wake();
    return false;
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), m));
  m->state_ = Member::State::kRunning;
  running_ = m;
  if (Earlier(now_virtual_, m->account_->virtual_time)) now_virtual_ = m->account_->virtual_time;
  return true;
}

void TurnScheduler::Wake() {
  if (running_ != nullptr || resumes_posted_ > 0 || waiting_.empty()) return;
  Member* next = Least();
  next->resume_posted_ = true;
  resumes_posted_++;
  // A copy: posting may destroy the member (a connection torn down with
  // its executor drops what is posted to it), and its resume_ with it.
  std::function<void()> resume = next->resume_;
  resume();
}

TurnScheduler::Member* TurnScheduler::Least() const {
  // Few sessions wait at once on one thread: a scan is cheaper than keeping
  // an order that every charge to a shared account would upset.
  Member* best = nullptr;
  for (Member* m : waiting_) {
    if (best == nullptr) {
      best = m;
      continue;
    }
    const uint64_t v = m->account_->virtual_time;
    const uint64_t best_v = best->account_->virtual_time;
    if (Earlier(v, best_v) || (v == best_v && m->seq_ < best->seq_)) best = m;
  }
  return best;
}

std::map<std::string, TurnScheduler::Charge> TurnScheduler::Charges() const {
  std::map<std::string, Charge> out;
  std::lock_guard<std::mutex> lock(totals_mu_);
  for (const auto& [key, t] : totals_) {
    out[key] = {t.nanoseconds.load(std::memory_order_relaxed),
                t.turns.load(std::memory_order_relaxed)};
  }
  return out;
}

TurnScheduler::ChargeTotals* TurnScheduler::TotalsOf(const std::string& share_key) {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return &totals_.try_emplace(share_key).first->second;
}

int64_t TurnScheduler::Now() const {
  if (clock_) return clock_();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace vdev
