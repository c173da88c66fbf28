// Small helpers for reading sysfs-like trees. Every failure message names the
// path, so an operator can find the broken file.
#ifndef HZ_SCHEDULER_SYSFS_UTIL_H_
#define HZ_SCHEDULER_SYSFS_UTIL_H_

#include <cstdint>
#include <string>

#include "hz/scheduler/inventory.h"

namespace hz::scheduler::sysfs {

// Whether something (file, directory or link, even a dangling one) exists.
bool Exists(const std::string& path);

// Reads a small attribute file, trailing whitespace removed.
Status ReadAttr(const std::string& path, std::string* out);

// Parses "0x..." (or plain hex) into at most `max` (inclusive).
Status ParseHex(const std::string& text, const std::string& path, uint64_t max, uint64_t* out);

// Parses a decimal integer in [min, max].
Status ParseInt(const std::string& text, const std::string& path, int64_t min, int64_t max,
                int64_t* out);

// Resolves a symlink that must exist and point at something that exists.
// *target receives the canonical absolute path.
Status ResolveLink(const std::string& link, std::string* target);

// The final path component.
std::string BaseName(const std::string& path);

// Appends "value\n" to an existing file (sysfs attributes ignore the offset;
// fixture files keep every write in order). Fails when the file is missing.
Status WriteAttr(const std::string& path, const std::string& value);

}  // namespace hz::scheduler::sysfs

#endif  // HZ_SCHEDULER_SYSFS_UTIL_H_
