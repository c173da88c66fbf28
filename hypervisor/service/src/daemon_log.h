// How harmonaized writes its log to stderr: key=value text or one JSON
// object per line, with the syslog priority prefix journald understands
// when stderr is connected to the journal.
#ifndef HZ_SERVICE_DAEMON_LOG_H_
#define HZ_SERVICE_DAEMON_LOG_H_

#include <memory>
#include <string>

#include "spdlog/formatter.h"

namespace hz::service {

enum class LogFormat { kText, kJson };

// Where the lines go. To the journal, every line starts with "<N>", the
// syslog priority of its level (sd-daemon(3)); text lines then leave out
// the timestamp, which journald records itself. JSON lines keep every field.
enum class LogDestination { kPlain, kJournal };

// The formatter for harmonaized's lines. Text: `time=... level=... <message>`.
// JSON: {"time":RFC 3339,"level":...,"thread":N,"msg":...}, the message
// escaped whatever bytes it holds (invalid UTF-8 becomes U+FFFD), so every
// line parses.
std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format, LogDestination destination);

// True when journal_stream (the JOURNAL_STREAM variable, "DEVICE:INODE")
// names the file open on fd: systemd connected that descriptor to the
// journal. Anything else (unset, malformed, another file) is false.
bool IsJournalStream(const char* journal_stream, int fd);

}  // namespace hz::service

#endif  // HZ_SERVICE_DAEMON_LOG_H_
