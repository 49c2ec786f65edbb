// keel::format replaces vsnprintf in the engine: for every conversion the engine's messages use
// it must print what the C library prints, and it must never write past the buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "core/format.h"
#include "core/status.h"

namespace keel {
namespace {

// Formats with both keel::format and the C library; checks text and returned length match.
#define EXPECT_SAME(...)                                         \
  do {                                                           \
    char ours[512], libc[512];                                   \
    std::memset(ours, 'Z', sizeof ours);                         \
    const size_t n = format(ours, sizeof ours, __VA_ARGS__);     \
    const int m = std::snprintf(libc, sizeof libc, __VA_ARGS__); \
    EXPECT_STREQ(ours, libc) << "format " << #__VA_ARGS__;       \
    EXPECT_EQ(n, size_t(m)) << "format " << #__VA_ARGS__;        \
  } while (0)

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vformat(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// Without the printf attribute, for formats the compiler would rightly warn about.
std::string fmt_unchecked(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vformat(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

TEST(Format, IntegersMatchTheCLibrary) {
  EXPECT_SAME("%u", 0u);
  EXPECT_SAME("%u", 4294967295u);
  EXPECT_SAME("%d", 0);
  EXPECT_SAME("%d", -1);
  EXPECT_SAME("%d", std::numeric_limits<int>::min());
  EXPECT_SAME("%d", std::numeric_limits<int>::max());
  EXPECT_SAME("%i", -42);
  EXPECT_SAME("%zu", size_t(0));
  EXPECT_SAME("%zu", std::numeric_limits<size_t>::max());
  EXPECT_SAME("%llu", 0ull);
  EXPECT_SAME("%llu", 18446744073709551615ull);
  EXPECT_SAME("%lld", std::numeric_limits<long long>::min());
  EXPECT_SAME("%lld", -1234567890123ll);
  EXPECT_SAME("%ld %lu", -7l, 7ul);
  EXPECT_SAME("%hd %hu %hhd %hhu", -3, 65535, -1, 255);
  EXPECT_SAME("%jd %td", intmax_t(-9), ptrdiff_t(-10));
  EXPECT_SAME("%x %X %#x %#X %#x", 0xbeefu, 0xbeefu, 255u, 255u, 0u);
  EXPECT_SAME("0x%02x 0x%02x 0x%02x", 0u, 0x7u, 0xffu);
  EXPECT_SAME("%04x|%-6x|%6x", 0xau, 0xabu, 0xabcu);
  EXPECT_SAME("%llx", 0xfedcba9876543210ull);
}

TEST(Format, IntegerWidthPrecisionAndFlags) {
  EXPECT_SAME("[%5d][%-5d][%05d][%+d][% d][%+5d][%-+5d]", 42, 42, -42, 42, 42, 42, 42);
  EXPECT_SAME("[%.3d][%8.3d][%-8.3d][%08.3d]", 7, -7, 7, 7);  // precision disables the 0 flag
  EXPECT_SAME("[%.0d][%.0u][%5.0x]", 0, 0u, 0u);              // precision 0 prints no digit for 0
  EXPECT_SAME("[%*d][%-*d][%*d]", 6, 1, 6, 2, -6, 3);         // negative * width means '-'
  EXPECT_SAME("[%.*d][%.*d]", 4, 5, -1, 5);                   // negative * precision means none
  EXPECT_SAME("[%14llu]", 123456789ull);
}

TEST(Format, StringsAndCharacters) {
  EXPECT_SAME("%s", "");
  EXPECT_SAME("%s: %s", "arena too small", "needs 1024 bytes");
  EXPECT_SAME("[%10s][%-10s][%.2s][%5.1s]", "abc", "abc", "abc", "xyz");
  EXPECT_SAME("[%c][%3c][%-3c]", 'a', 'b', 'c');
  EXPECT_SAME("100%% of %u", 3u);
  const char not_terminated[4] = {'K', 'E', 'E', 'X'};
  EXPECT_EQ(fmt("'%.4s'", not_terminated), "'KEEX'");  // reads exactly 4 bytes
  const char merge[] = "abc def";
  EXPECT_SAME("\"%.*s\"", 3, merge);
}

TEST(Format, FloatsMatchTheCLibrary) {
  const double values[] = {0.0,
                           -0.0,
                           1.0,
                           -1.0,
                           0.5,
                           0.125,
                           2.5,
                           10000.0,
                           1e-5,
                           1e-6,
                           1e-4,
                           1.5e-4,
                           123456.0,
                           1234567.0,
                           999999.5,
                           0.1,
                           0.2,
                           1.0 / 3.0,
                           2.0 / 3.0,
                           3.14159,
                           1e21,
                           1e22,
                           1e100,
                           1e-100,
                           5e-324,
                           2.2250738585072014e-308,
                           1.7976931348623157e308,
                           500000.0,
                           1e6,
                           9.9999e5,
                           0.00012345,
                           1234.5678,
                           100.0,
                           1e-4,
                           0.0001,
                           9.5,
                           0.95};
  for (double v : values) {
    EXPECT_SAME("%g", v);
    EXPECT_SAME("%g", -v);
    EXPECT_SAME("%.3g", v);
    EXPECT_SAME("%.1g", v);
    EXPECT_SAME("%.0g", v);
    EXPECT_SAME("%.9g", v);
    if (v != 999999.5) EXPECT_SAME("%#g", v);  // glibc drops the zeros after a carry: "1.e+06"
    EXPECT_SAME("%e", v);
    EXPECT_SAME("%.2e", v);
    EXPECT_SAME("%.0e", v);
    if (std::fabs(v) < 1e15) {  // beyond 17 digits %f differs by design (see format.h)
      EXPECT_SAME("%f", v);
      EXPECT_SAME("%.0f", v);
      EXPECT_SAME("%.2f", v);
      EXPECT_SAME("%.3f", v);
    }
  }
  // What the engine prints: hyper-parameters and sampler settings.
  EXPECT_SAME("rope_theta = %g; expected a positive finite value", 10000.0);
  EXPECT_SAME("norm_eps = %g; expected in (0, 1)", double(1e-5f));
  EXPECT_SAME("temperature must be >= 0, found %g", double(-0.7f));
  EXPECT_SAME("[%10.3f][%-10.3f][%010.3f][%+.2f][% .2f][%+g]", 3.14159, 3.14159, -3.14159, 2.0, 2.0, 1.5);
  EXPECT_SAME("[%#.0f][%#.0e][%10g][%-10g|][%010g]", 3.0, 3.0, 0.5, 0.5, -0.5);
  EXPECT_SAME("%.2f %.2f %.1f %.0f %.0f %.0f", 0.004, 0.006, 0.05, 0.5, 1.5, 0.6);
  EXPECT_SAME("%.17g %.17g", 0.1, 1.0 / 3.0);
  EXPECT_SAME("%Lg", 2.5L);
  EXPECT_EQ(fmt("%#g", 999999.5), "1.00000e+06");  // C17 7.21.6.1: '#' keeps the trailing zeros
}

TEST(Format, NonFiniteFloats) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_SAME("%g %g %f %e", inf, -inf, inf, -inf);
  EXPECT_SAME("[%8g][%-8g][%08g][%+g]", inf, inf, inf, inf);
  EXPECT_EQ(fmt("%g", std::nan("")), "nan");
  EXPECT_EQ(fmt("%g", -std::nan("")), "-nan");
}

TEST(Format, RandomDoublesMatchToNineDigits) {
  // A fixed pseudo-random walk over magnitudes and mantissas; %.9g is more than a float needs.
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double mantissa = double(state >> 11) / 9007199254740992.0;  // [0, 1)
    const int exponent = int((state >> 3) % 80) - 40;
    const double v = mantissa * std::pow(10.0, exponent);
    EXPECT_SAME("%g", v);
    EXPECT_SAME("%.9g", v);
    EXPECT_SAME("%.3e", v);
    if (exponent < 6) EXPECT_SAME("%.4f", v);
    if (HasFailure()) break;  // one failure says enough
  }
}

TEST(Format, TruncatesAndTerminates) {
  char buf[8];
  std::memset(buf, 'Z', sizeof buf);
  EXPECT_EQ(format(buf, 5, "%s-%u", "abcdef", 12u), 9u);  // the full length, like snprintf
  EXPECT_STREQ(buf, "abcd");
  EXPECT_EQ(buf[5], 'Z');  // nothing written past cap
  EXPECT_EQ(format(buf, 1, "%d", 123), 3u);
  EXPECT_STREQ(buf, "");
  buf[0] = 'Z';
  EXPECT_EQ(format(buf, 0, "%d", 123), 3u);  // cap 0: nothing written, not even the NUL
  EXPECT_EQ(buf[0], 'Z');
  EXPECT_EQ(format(nullptr, 0, "%g", 1e-5), 5u);  // sizing pass
  EXPECT_EQ(format(buf, sizeof buf, "%08.3f", -1.5), 8u);
  EXPECT_STREQ(buf, "-001.50");
}

TEST(Format, UnsupportedConversionIsShownAsWritten) {
  // Not a conversion the formatter knows: copied verbatim, no argument consumed.
  EXPECT_EQ(fmt_unchecked("a %q b %u", 5u), "a %q b 5");
  EXPECT_EQ(fmt_unchecked("a %p b %u", 5u), "a %p b 5");
  EXPECT_EQ(fmt_unchecked("end %"), "end %");
  EXPECT_EQ(fmt_unchecked("end %-08"), "end %-08");
}

TEST(Format, ErrorMessagesAreBoundedByTheirCapacity) {
  const std::string long_text(1000, 'x');
  const Error e(Status::InvalidArgument, "expected %u, found %s", 3u, long_text.c_str());
  EXPECT_EQ(std::strlen(e.message()), Error::kMessageCapacity - 1);
  EXPECT_EQ(std::string(e.message()).substr(0, 20), "expected 3, found xx");
  const Error f(Status::ModelBadHyper, "norm_eps = %g; expected in (0, 1)", 1.5);
  EXPECT_STREQ(f.message(), "norm_eps = 1.5; expected in (0, 1)");
}

}  // namespace
}  // namespace keel
