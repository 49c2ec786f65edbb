// printf-style formatting into a caller's buffer without the C library: error messages must
// not pull vsnprintf (and with it stdio, locales and malloc) into a bare-metal image.
//
// Supported: flags - + space # 0, width and precision (numbers or *), length modifiers
// hh h l ll z j t (L for floats), conversions d i u x X c s e f g %. Those cover every message
// in the engine (%u %d %zu %llu %s %.4s %.*s %02x %g, and PRIu32 / PRId32, which are %lu / %ld
// where newlib makes int32_t `long`). Floats are rounded to at most 17 significant digits (a
// double's worth); %f of a value with more integer digits pads with zeros where the C library
// would print the binary value's exact expansion. An unknown conversion is
// copied to the output as written, so a wrong format shows up in the message instead of
// reading a stray argument.
#pragma once

#include <cstdarg>
#include <cstddef>

namespace keel {

// Writes at most cap - 1 characters plus a terminating NUL (nothing when cap is 0). Returns the
// length the whole output has, like snprintf, so a caller can tell that it was cut.
size_t format(char* buf, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
size_t vformat(char* buf, size_t cap, const char* fmt, va_list ap);

}  // namespace keel
