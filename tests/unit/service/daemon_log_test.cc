// harmonaized's log lines (src/daemon_log.h): JSON that parses whatever the
// message holds, and the journal's priority prefixes.
#include "daemon_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "spdlog/details/log_msg.h"

namespace hz::service {
namespace {

std::string Format(LogFormat format, LogDestination destination, spdlog::level::level_enum level,
                   std::string_view message) {
  spdlog::details::log_msg msg(spdlog::source_loc{}, "harmonaized", level, message);
  spdlog::memory_buf_t out;
  MakeLogFormatter(format, destination)->format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(DaemonLogTest, JsonLineParsesWhateverTheMessageHolds) {
  using namespace std::string_literals;
  const std::string valid[] = {R"(tenant="a\"b" path=C:\dir\)",
                               "two\nlines\r\n",
                               "tab\tbell\a nul\0 esc\x1b del\x7f"s,
                               "caf\xc3\xa9 \xe2\x9c\x93",
                               "{\"msg\":\"forged\"}\n{",
                               ""};
  for (const std::string& m : valid) {
    std::string line = Format(LogFormat::kJson, LogDestination::kPlain, spdlog::level::info, m);
    ASSERT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_EQ(j["msg"], m);
    EXPECT_EQ(j["level"], "info");
    EXPECT_TRUE(j["thread"].is_number_unsigned());
    EXPECT_EQ(j.size(), 4u) << line;
  }
}

TEST(DaemonLogTest, JsonReplacesBytesThatAreNotUtf8) {
  const std::string invalid = "bad \xff\xfe and cut \xc3";
  std::string line = Format(LogFormat::kJson, LogDestination::kPlain, spdlog::level::warn, invalid);
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_TRUE(j.is_object()) << line;
  EXPECT_EQ(j["msg"], "bad \xef\xbf\xbd\xef\xbf\xbd and cut \xef\xbf\xbd");
  EXPECT_EQ(j["level"], "warning");
}

TEST(DaemonLogTest, JsonTimeIsRfc3339WithAColonInTheOffset) {
  std::string line = Format(LogFormat::kJson, LogDestination::kPlain, spdlog::level::info, "x");
  const std::string time = nlohmann::json::parse(line)["time"];
  EXPECT_TRUE(
      std::regex_match(time, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d)")))
      << time;
}

TEST(DaemonLogTest, JournalLinesStartWithTheLevelsSyslogPriority) {
  const std::pair<spdlog::level::level_enum, std::string> levels[] = {
      {spdlog::level::critical, "<2>"}, {spdlog::level::err, "<3>"},
      {spdlog::level::warn, "<4>"},     {spdlog::level::info, "<6>"},
      {spdlog::level::debug, "<7>"},    {spdlog::level::trace, "<7>"}};
  for (const auto& [level, prefix] : levels) {
    std::string text = Format(LogFormat::kText, LogDestination::kJournal, level, "event=x");
    EXPECT_EQ(text.rfind(prefix + "level=", 0), 0u) << text;
    // journald stamps each entry itself.
    EXPECT_EQ(text.find("time="), std::string::npos) << text;
    std::string json = Format(LogFormat::kJson, LogDestination::kJournal, level, "event=x");
    ASSERT_EQ(json.rfind(prefix + "{", 0), 0u) << json;
    EXPECT_TRUE(nlohmann::json::parse(json.substr(3), nullptr, false).is_object()) << json;
  }
}

TEST(DaemonLogTest, PlainTextKeepsItsTimestamp) {
  std::string text = Format(LogFormat::kText, LogDestination::kPlain, spdlog::level::err, "e");
  EXPECT_EQ(text.rfind("time=", 0), 0u) << text;
  EXPECT_NE(text.find(" level=error e\n"), std::string::npos) << text;
}

TEST(DaemonLogTest, JournalStreamMustNameTheDescriptorsFile) {
  char path[] = "/tmp/hz-journal-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  const std::string dev = std::to_string(st.st_dev), ino = std::to_string(st.st_ino);
  EXPECT_TRUE(IsJournalStream((dev + ":" + ino).c_str(), fd));
  EXPECT_FALSE(IsJournalStream((dev + ":" + std::to_string(st.st_ino + 1)).c_str(), fd));
  for (const char* bad :
       {"", ":", "1", "1:", ":1", "a:b", "1:2x", " 1:2", "-1:2", "99999999999999999999999:1"}) {
    EXPECT_FALSE(IsJournalStream(bad, fd)) << bad;
  }
  EXPECT_FALSE(IsJournalStream(nullptr, fd));
  EXPECT_FALSE(IsJournalStream((dev + ":" + ino).c_str(), -1));
  close(fd);
  unlink(path);
}

}  // namespace
}  // namespace hz::service
