// A value or the Status saying why there is none (Abseil's StatusOr, minus
// what the host service does not use). Both converting constructors are
// implicit, so a function returning StatusOr<T> can `return value;` and
// `return Status::NotFound(...);` alike.
#ifndef HZ_COMMON_STATUS_OR_H_
#define HZ_COMMON_STATUS_OR_H_

#include <cassert>
#include <optional>
#include <utility>

#include "hz/common/status.h"

namespace hz {

template <typename T>
class StatusOr {
 public:
  // A failure. An ok status carries no value: it becomes kInvalidArgument,
  // which no caller can mistake for success.
  StatusOr(Status status)  // NOLINT(google-explicit-constructor)
      : status_(std::move(status)) {
    assert(!status_.ok());
    if (status_.ok()) status_ = Status::InvalidArgument("StatusOr built from an ok Status");
  }
  StatusOr(T value)  // NOLINT(google-explicit-constructor)
      : value_(std::move(value)) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  // Only when ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace hz

#endif  // HZ_COMMON_STATUS_OR_H_
