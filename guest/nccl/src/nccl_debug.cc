// NCCL_DEBUG and NCCL_DEBUG_FILE, with NCCL's meaning: NCCL_DEBUG is VERSION,
// WARN, INFO or TRACE (each includes the ones before it); NCCL_DEBUG_FILE
// names the file, with %h replaced by the host name and %p by the process id
// so that every rank of a job can write its own file.
#include <sys/syscall.h>
#include <unistd.h>

#include <strings.h>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "nccl_internal.h"

namespace hz::nccl {
namespace {

struct DebugState {
  bool loaded = false;
  Level level = Level::kNone;
  FILE* out = nullptr;  // stderr unless NCCL_DEBUG_FILE opened
  std::string host;
};

std::mutex debug_mu;
DebugState debug;
// debug.level once loaded, -1 before: every operation asks, so the answer
// must not take the lock.
std::atomic<int> loaded_level{-1};

Level ParseLevel(const char* v) {
  if (v == nullptr) return Level::kNone;
  if (strcasecmp(v, "VERSION") == 0) return Level::kVersion;
  if (strcasecmp(v, "WARN") == 0) return Level::kWarn;
  if (strcasecmp(v, "INFO") == 0) return Level::kInfo;
  if (strcasecmp(v, "TRACE") == 0) return Level::kTrace;
  return Level::kNone;  // NCCL also ignores values it does not know
}

// NCCL_DEBUG_FILE's %h and %p; "%%" is a literal '%'.
std::string ExpandPath(const std::string& pattern, const std::string& host) {
  std::string path;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      path += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == 'h') {
      path += host;
    } else if (c == 'p') {
      path += std::to_string(getpid());
    } else {
      if (c != '%') path += '%';
      path += c;
    }
  }
  return path;
}

// Called with debug_mu held.
void Load() {
  if (debug.loaded) return;
  debug.loaded = true;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  // NCCL shortens the host name at its first dot.
  if (char* dot = std::strchr(host, '.')) *dot = '\0';
  debug.host = host;
  debug.level = ParseLevel(std::getenv("NCCL_DEBUG"));
  debug.out = stderr;
  const char* file = std::getenv("NCCL_DEBUG_FILE");
  if (debug.level == Level::kNone || file == nullptr || *file == '\0') return;
  std::string path = ExpandPath(file, debug.host);
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    setvbuf(f, nullptr, _IOLBF, 0);  // a crash must not lose what was logged
    debug.out = f;
  } else {
    std::fprintf(stderr, "%s:%d NCCL WARN cannot open NCCL_DEBUG_FILE %s: %s\n", host, getpid(),
                 path.c_str(), std::strerror(errno));
  }
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kWarn:
      return "WARN";
    case Level::kTrace:
      return "TRACE";
    default:
      return "INFO";
  }
}

}  // namespace

bool Logging(Level level) {
  int enabled = loaded_level.load(std::memory_order_acquire);
  if (enabled < 0) {
    std::lock_guard<std::mutex> lock(debug_mu);
    Load();
    enabled = static_cast<int>(debug.level);
    loaded_level.store(enabled, std::memory_order_release);
  }
  return level != Level::kNone && enabled >= static_cast<int>(level);
}

void Log(Level level, const char* fmt, ...) {
  if (!Logging(level)) return;
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(message, sizeof(message), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(debug_mu);
  long tid = syscall(SYS_gettid);
  if (level == Level::kVersion) {
    std::fprintf(debug.out, "%s\n", message);
  } else {
    std::fprintf(debug.out, "%s:%d:%ld NCCL %s %s\n", debug.host.c_str(), getpid(), tid,
                 LevelName(level), message);
  }
  std::fflush(debug.out);
}

void LogVersionOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    Log(Level::kVersion, "NCCL version %d.%d.%d%s", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
        NCCL_SUFFIX);
  });
}

}  // namespace hz::nccl

extern "C" {

// Deprecated in NCCL, kept for programs that still call it.
void ncclResetDebugInit(void) {
  std::lock_guard<std::mutex> lock(hz::nccl::debug_mu);
  if (hz::nccl::debug.out != nullptr && hz::nccl::debug.out != stderr)
    std::fclose(hz::nccl::debug.out);
  hz::nccl::debug = hz::nccl::DebugState{};
  hz::nccl::loaded_level.store(-1, std::memory_order_release);
}

}  // extern "C"

// Defining the deprecated function's twin names it; that is not a use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
HZ_NCCL_ALIAS(ncclResetDebugInit)
#pragma GCC diagnostic pop
