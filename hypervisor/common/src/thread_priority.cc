#include "hz/common/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hz/common/idle_class_guard.h"

namespace hz {

void SetThisThreadNice(int nice) {
  if (nice == kIdleClassNice) {
    const sched_param none{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
    nice = 19;
  }
  if (nice != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
}

bool ThisThreadInIdleClass() {
  return sched_getscheduler(0) == SCHED_IDLE;
}

void SetThisThreadPriority(const BulkPriority& priority) {
  if (priority.guard != nullptr && priority.nice >= 0 && priority.nice < kIdleClassNice) {
    priority.guard->EnrolThisThread(priority.nice);
  } else {
    SetThisThreadNice(priority.nice);
  }
}

void NameThisThread(const std::string& name) {
  // pthread_setname_np refuses names over 15 bytes instead of cutting them.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace hz
