// Small-file I/O shared by every engine that keeps state on disk (the
// scheduler's state, the event bus's cursors, checkpoint policies, the
// service's state and the checkpoint engine's tenant numbers). One copy, so
// that every such file is exactly as durable as the others.
#ifndef HZ_COMMON_FILE_H_
#define HZ_COMMON_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz {

// Crash-safe replacement of a small file: writes `<path>.tmp` in the same
// directory, fsyncs it, renames it over `path` and fsyncs the directory.
// After a crash or a power loss the file holds the old or the new contents,
// never a mix, and a new contents reported written stays written. `sync`
// false skips both fsyncs (tests, simulations): still atomic against a
// process crash, not against a power loss. The temporary file is removed on
// failure.
Status WriteFileAtomic(const std::string& path, std::string_view contents, bool sync = true,
                       mode_t mode = 0600);

// The whole file; kNotFound when it does not exist, kLimit when it is larger
// than max_bytes.
inline constexpr size_t kMaxSmallFileBytes = size_t{64} << 20;
StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = kMaxSmallFileBytes);

// fsyncs a directory, so that the entries created, renamed or removed in it
// are durable.
Status SyncDir(const std::string& dir);

// kIoError "<what> <path>: <strerror(errno)>", for a system call that failed.
Status Errno(std::string_view what, std::string_view path);

// Takes an exclusive lock (flock) on `path`, creating it (0600) if absent,
// and writes this process's id into it. Returns the descriptor, which holds
// the lock until it is closed or the process exits (a crash leaves no stale
// lock). kBusy, naming the file and the holder's pid, when another process
// holds it.
StatusOr<int> LockFile(const std::string& path);

// The directory part of a path: "a/b" -> "a", "b" -> ".", "/b" -> "/".
std::string DirName(const std::string& path);

}  // namespace hz

#endif  // HZ_COMMON_FILE_H_
