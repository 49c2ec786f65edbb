// Result<T>: a value or an Error. T must be trivially destructible or cheap; no allocation.
#pragma once

#include <new>
#include <type_traits>
#include <utility>

#include "core/status.h"

namespace keel {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& v) : ok_(true) { new (&value_) T(v); }        // NOLINT: implicit by design
  Result(T&& v) : ok_(true) { new (&value_) T(std::move(v)); }  // NOLINT
  Result(const Error& e) : ok_(false), error_(e) {}             // NOLINT
  Result(const Result& o) : ok_(o.ok_), error_(o.error_) {
    if (ok_) new (&value_) T(o.value());
  }
  Result& operator=(const Result&) = delete;
  ~Result() {
    if (ok_) value().~T();
  }

  bool ok() const { return ok_; }
  const Error& error() const { return error_; }
  Status status() const { return ok_ ? Status::Ok : error_.status(); }
  T& value() { return *std::launder(reinterpret_cast<T*>(&value_)); }
  const T& value() const { return *std::launder(reinterpret_cast<const T*>(&value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  bool ok_;
  Error error_;
  alignas(T) unsigned char value_[sizeof(T)];
};

}  // namespace keel
