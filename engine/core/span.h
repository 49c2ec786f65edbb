// A non-owning view of contiguous elements (C++20 std::span is not available freestanding
// with every toolchain, so the engine carries its own).
#pragma once

#include <cstddef>

namespace keel {

template <typename T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(T* data, size_t size) : data_(data), size_(size) {}
  template <size_t N>
  constexpr Span(T (&a)[N]) : data_(a), size_(N) {}  // NOLINT

  constexpr T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T& operator[](size_t i) const { return data_[i]; }
  constexpr T* begin() const { return data_; }
  constexpr T* end() const { return data_ + size_; }
  constexpr Span subspan(size_t offset, size_t count) const { return Span(data_ + offset, count); }
  constexpr operator Span<const T>() const { return Span<const T>(data_, size_); }  // NOLINT

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace keel
