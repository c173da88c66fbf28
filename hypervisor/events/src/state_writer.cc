#include "state_writer.h"

#include "hz/common/thread_priority.h"

namespace hz::events {

StateWriter::StateWriter() : thread_(NamedThread("hz-event-state", [this] { Loop(); })) {}

StateWriter::~StateWriter() {
  Stop();
}

bool StateWriter::Schedule(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void StateWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void StateWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    // Stopping still writes what is queued: nothing acknowledged is dropped.
    if (jobs_.empty()) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const bool more = job();
    lock.lock();
    if (more) jobs_.push_back(std::move(job));
  }
}

}  // namespace hz::events
