// The reading of one TOML table of the service's configuration (config.cc).
#ifndef HZ_SERVICE_TOML_TABLE_READER_H_
#define HZ_SERVICE_TOML_TABLE_READER_H_

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "hz/common/thread_priority.h"
#include "spdlog/fmt/fmt.h"

namespace hz::service {

// Walks one TOML table, applying known keys and rejecting the rest, so a typo
// in a key is an error instead of a silently ignored setting.
class TableReader {
 public:
  TableReader(const toml::table& table, std::string prefix, std::string_view origin,
              std::string* error)
      : table_(table), prefix_(std::move(prefix)), origin_(origin), error_(error) {}

  bool ok() const { return error_->empty(); }

  template <typename T>
  void Int(const char* key, T* out, uint64_t min, uint64_t max) {
    const toml::node* node = Take(key);
    if (node == nullptr || !ok()) return;
    auto v = node->value<int64_t>();
    if (!node->is_integer() || !v || *v < 0 || static_cast<uint64_t>(*v) < min ||
        static_cast<uint64_t>(*v) > max) {
      Fail(*node, key, fmt::format("expected an integer in {}..{}", min, max));
      return;
    }
    *out = static_cast<T>(*v);
  }

  // The same, for a key that may be left out: *out is then left unset.
  template <typename T>
  void Int(const char* key, std::optional<T>* out, uint64_t min, uint64_t max) {
    const bool given = table_.get(key) != nullptr;
    T v{};
    Int(key, &v, min, max);
    if (given && ok()) *out = v;
  }

  // A bulk thread's nice value: an integer in 0..19, or "idle" for the
  // kernel's idle scheduling class (kIdleClassNice, thread_priority.h).
  void Nice(const char* key, uint32_t* out) {
    const toml::node* node = Take(key);
    if (node == nullptr || !ok()) return;
    if (node->is_string() && *node->value<std::string>() == "idle") {
      *out = kIdleClassNice;
      return;
    }
    auto v = node->value<int64_t>();
    if (!node->is_integer() || !v || *v < 0 || *v > 19) {
      return Fail(*node, key, "expected an integer in 0..19 or \"idle\"");
    }
    *out = static_cast<uint32_t>(*v);
  }

  void Bool(const char* key, bool* out) {
    const toml::node* node = Take(key);
    if (node == nullptr || !ok()) return;
    if (!node->is_boolean()) return Fail(*node, key, "expected true or false");
    *out = *node->value<bool>();
  }

  void String(const char* key, std::string* out, std::initializer_list<const char*> allowed = {}) {
    const toml::node* node = Take(key);
    if (node == nullptr || !ok()) return;
    if (!node->is_string()) return Fail(*node, key, "expected a string");
    std::string v = *node->value<std::string>();
    if (allowed.size() > 0) {
      bool found = false;
      std::string list;
      for (const char* a : allowed) {
        if (v == a) found = true;
        list += list.empty() ? a : fmt::format(", {}", a);
      }
      if (!found) return Fail(*node, key, fmt::format("expected one of: {}", list));
    }
    if (v.find('\0') != std::string::npos) return Fail(*node, key, "contains a NUL byte");
    *out = std::move(v);
  }

  // A Unix file mode written as an octal string ("0660"): permission bits
  // only, and at least read and write for the owner.
  void Mode(const char* key, uint32_t* out) {
    std::string text;
    const toml::node* node = table_.get(key);
    String(key, &text);
    if (node == nullptr || !ok()) return;
    char* end = nullptr;
    unsigned long v = std::strtoul(text.c_str(), &end, 8);
    if (text.empty() || *end != '\0' || v > 0777 || (v & 0600) != 0600) {
      return Fail(*node, key, "expected an octal mode such as \"0660\": at most 0777, owner rw");
    }
    *out = static_cast<uint32_t>(v);
  }

  // A sub-table; nullptr when absent.
  const toml::table* Table(const char* key) {
    const toml::node* node = Take(key);
    if (node == nullptr || !ok()) return nullptr;
    if (!node->is_table()) {
      Fail(*node, key, "expected a table");
      return nullptr;
    }
    return node->as_table();
  }

  // Reports the first key nobody asked for.
  void RejectUnknown() {
    if (!ok()) return;
    for (const auto& [k, v] : table_) {
      if (seen_.count(std::string(k.str())) == 0) {
        Fail(v, std::string(k.str()).c_str(), "unknown key");
        return;
      }
    }
  }

 private:
  const toml::node* Take(const char* key) {
    seen_.insert(key);
    return table_.get(key);
  }

  void Fail(const toml::node& node, const char* key, const std::string& why) {
    const auto& src = node.source();
    *error_ = fmt::format("{}:{}:{}: {}{}: {}", origin_, src.begin.line, src.begin.column, prefix_,
                          key, why);
  }

  const toml::table& table_;
  std::string prefix_;
  std::string_view origin_;
  std::string* error_;
  std::set<std::string> seen_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_TOML_TABLE_READER_H_
