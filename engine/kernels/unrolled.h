// Compile-time loops of the SIMD kernels (x86 and arm64). Internal linkage on purpose: each
// tier's translation unit is compiled with its own target flags, and an inline function of
// external linkage could be merged by the linker into a copy built for a richer instruction set,
// which a poorer tier would then call.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace keel {
namespace {  // NOLINT(google-build-namespaces): see above

// f(integral_constant<0>) ... f(integral_constant<N - 1>), the constants of N's type. Kernels index
// their arrays of vectors only through these constants: GCC 12 at -O2 keeps an array indexed by a
// loop variable in memory (accumulators stored back on every row or block), unrolled or not.
template <auto N, class F>
inline __attribute__((always_inline)) void unrolled(F&& f) {
  using Index = decltype(N);
  [&]<Index... I>(std::integer_sequence<Index, I...>) __attribute__((always_inline)) {
    (f(std::integral_constant<Index, I>{}), ...);
  }
  (std::make_integer_sequence<Index, N>{});
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

// f(integral_constant<int, n>) for a runtime n in [1, kMax]: one instantiation of a tile kernel
// per tile size, chosen per call.
template <int kMax, class F>
inline __attribute__((always_inline)) void with_tile_size(uint32_t n, F&& f) {
  if constexpr (kMax > 1) {
    if (n < uint32_t(kMax)) return with_tile_size<kMax - 1>(n, f);
  }
  f(std::integral_constant<int, kMax>{});
}

}  // namespace
}  // namespace keel
