// Crash-safe replacement of a small file: write a temporary file in the same
// directory, fsync it, rename it over the target, fsync the directory. After
// a crash the file holds either the old or the new content, never a mix.
#ifndef HZ_SCHEDULER_STATE_FILE_H_
#define HZ_SCHEDULER_STATE_FILE_H_

#include <string>

#include "hz/scheduler/inventory.h"

namespace hz::scheduler {

// `sync` false skips both fsyncs (tests, simulations): still atomic against
// process crashes, not against power loss.
Status WriteFileAtomically(const std::string& path, const std::string& data, bool sync = true);

// Reads a whole file (at most 64 MiB); *exists is false when it is absent.
Status ReadWholeFile(const std::string& path, std::string* out, bool* exists);

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_STATE_FILE_H_
