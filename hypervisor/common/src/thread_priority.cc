#include "hz/common/thread_priority.h"

#include <sys/resource.h>
#include <unistd.h>

namespace hz {

void SetThisThreadNice(int nice) {
  if (nice != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
}

}  // namespace hz
