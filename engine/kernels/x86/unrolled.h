// Compile-time loops for the x86 attention kernels. Internal linkage on purpose, as in
// query_q8.h: each ISA's translation unit compiles its own copy with its own target flags.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace keel::x86 {
namespace {  // NOLINT(google-build-namespaces): see above

// f(integral_constant<0>) ... f(integral_constant<N - 1>). Kernels index their arrays of
// accumulators only through these constants: GCC 12 keeps an array indexed by a loop variable
// in memory, storing every accumulator back on each row, even where it unrolls the loop.
template <uint32_t N, class F>
inline __attribute__((always_inline)) void unrolled(F&& f) {
  [&]<uint32_t... I>(std::integer_sequence<uint32_t, I...>) { (f(std::integral_constant<uint32_t, I>{}), ...); }
  (std::make_integer_sequence<uint32_t, N>{});
}

// The g queries of a grouped-query call in blocks of at most Block, each block handed to a kernel
// templated on its size: f(first query, integral_constant<size>).
template <uint32_t Block, class F>
inline void for_query_blocks(uint32_t g, F&& f) {
  for (uint32_t i = 0; i < g; i += Block) {
    const uint32_t size = g - i < Block ? g - i : Block;
    unrolled<Block>([&](auto s) {
      if (size == s + 1) f(i, std::integral_constant<uint32_t, s + 1>{});
    });
  }
}

}  // namespace
}  // namespace keel::x86
