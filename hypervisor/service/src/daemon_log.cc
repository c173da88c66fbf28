#include "daemon_log.h"

#include <sys/stat.h>

#include <charconv>
#include <cstring>

#include <nlohmann/json.hpp>

#include "spdlog/pattern_formatter.h"

namespace hz::service {

namespace {

// %* : the message as a JSON string. nlohmann escapes quotes, backslashes
// and control characters, and replaces bytes that are not UTF-8.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string text(msg.payload.data(), msg.payload.size());
    const std::string quoted =
        nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(quoted.data(), quoted.data() + quoted.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// %~ : "<N>", the syslog priority of the message's level.
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    char prefix[4] = {'<', static_cast<char>('0' + Priority(msg.level)), '>', '\0'};
    dest.append(prefix, prefix + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }

 private:
  // syslog(3): 2 critical, 3 error, 4 warning, 6 informational, 7 debug.
  static int Priority(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::critical:
        return 2;
      case spdlog::level::err:
        return 3;
      case spdlog::level::warn:
        return 4;
      case spdlog::level::info:
        return 6;
      default:
        return 7;
    }
  }
};

bool ParseUnsigned(const char* begin, const char* end, unsigned long long* out) {
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && ptr == end && begin != end;
}

}  // namespace

std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format, LogDestination destination) {
  const bool journal = destination == LogDestination::kJournal;
  std::string pattern = journal ? "%~" : "";
  if (format == LogFormat::kJson) {
    pattern += R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,"msg":%*})";
  } else if (journal) {
    pattern += "level=%l %v";
  } else {
    pattern += "time=%Y-%m-%dT%H:%M:%S.%e%z level=%l %v";
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonMessageFlag>('*');
  formatter->add_flag<SyslogPriorityFlag>('~');
  formatter->set_pattern(pattern);
  return formatter;
}

bool IsJournalStream(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) return false;
  const char* end = journal_stream + std::strlen(journal_stream);
  const char* colon = std::strchr(journal_stream, ':');
  unsigned long long device = 0, inode = 0;
  if (colon == nullptr || !ParseUnsigned(journal_stream, colon, &device) ||
      !ParseUnsigned(colon + 1, end, &inode)) {
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == device &&
         static_cast<unsigned long long>(st.st_ino) == inode;
}

}  // namespace hz::service
