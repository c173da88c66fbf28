// Helpers shared by the events tests.
#ifndef HZ_TESTS_UNIT_EVENTS_TEST_UTIL_H_
#define HZ_TESTS_UNIT_EVENTS_TEST_UTIL_H_

#include <mutex>
#include <string>
#include <vector>

#include "hz/events/event_spec.h"

namespace hz::events::testing {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// An EventSink that records what is published.
class RecordingSink : public EventSink {
 public:
  struct Entry {
    TenantId tenant;
    EventSpec spec;
  };
  Status Publish(const TenantId& tenant, const EventSpec& spec, uint64_t* seq) override;
  std::vector<Entry> entries() const;
  std::vector<Entry> Matching(uint16_t topic, uint16_t kind) const;
  void Clear();

 private:
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

template <typename T>
T PayloadAs(const uint8_t* payload) {
  T value;
  std::memcpy(&value, payload, sizeof(T));
  return value;
}

}  // namespace hz::events::testing

#endif  // HZ_TESTS_UNIT_EVENTS_TEST_UTIL_H_
