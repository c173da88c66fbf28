// CPU time for the benchmarks' "CPU-seconds per operation" and idle figures,
// at nanosecond resolution: the scheduler's own run-time accounting, not the
// clock-tick counts of /proc/PID/stat (10 ms), which a few hundred small
// operations would not even reach.
#ifndef HZ_BENCH_SERVICE_CPU_TIME_H_
#define HZ_BENCH_SERVICE_CPU_TIME_H_

#include <dirent.h>
#include <sys/types.h>
#include <time.h>

#include <fstream>
#include <string>

namespace hz::bench {

// CPU time of the calling process, every thread of it.
inline double SelfCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU time of another process's live threads: the sum of each thread's
// /proc/PID/task/TID/schedstat run time. -1 when the process is gone.
inline double ProcessCpuSeconds(pid_t pid) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(tasks.c_str());
  if (d == nullptr) return -1;
  unsigned long long ns = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(tasks + "/" + e->d_name + "/schedstat");
    unsigned long long run = 0;
    if (in >> run) ns += run;
  }
  closedir(d);
  return static_cast<double>(ns) * 1e-9;
}

}  // namespace hz::bench

#endif  // HZ_BENCH_SERVICE_CPU_TIME_H_
