// Running a command line from a test (the project's CLIs as a user types
// them): its exit status and what it printed.
#ifndef HZ_TEST_RUN_COMMAND_H_
#define HZ_TEST_RUN_COMMAND_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace hz::testing {

struct CommandResult {
  int code = -1;  // the exit status; -1 when it could not run or was killed
  std::string out;
};

// Runs `command` through the shell; stdout in out, stderr too when asked.
// `timeout_s` > 0 bounds it (coreutils timeout), so a hang fails the test
// instead of stalling it.
inline CommandResult RunCommand(const std::string& command, bool with_stderr = false,
                                int timeout_s = 0) {
  std::string cmd = (timeout_s > 0 ? "timeout " + std::to_string(timeout_s) + " " : "") + command +
                    (with_stderr ? " 2>&1" : " 2>/dev/null");
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace hz::testing

#endif  // HZ_TEST_RUN_COMMAND_H_
