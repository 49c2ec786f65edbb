// Two or four bytes at any address as one integer (memcpy: the pointer need not be aligned, and
// the compiler emits a single load). Internal linkage on purpose: every kernel translation unit is
// compiled with its own -m/-march flags, and an inline function of external linkage shared by
// two of them could be merged by the linker into the copy built for the wider ISA, which a CPU
// of the narrower one could not run.
#pragma once

#include <cstdint>
#include <cstring>

namespace keel {
namespace {

inline int32_t load_i32(const void* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

inline uint16_t load_u16(const void* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

}  // namespace
}  // namespace keel
