#include "core/format.h"

#include <bit>
#include <cstdint>

namespace keel {
namespace {

// Counts every character; stores those that fit and keeps room for the NUL.
struct Out {
  char* buf;
  size_t cap;
  size_t n = 0;
  void put(char c) {
    if (n + 1 < cap) buf[n] = c;
    ++n;
  }
  void put(const char* s, size_t len) {
    for (size_t i = 0; i < len; ++i) put(s[i]);
  }
  void fill(char c, size_t count) {
    for (size_t i = 0; i < count; ++i) put(c);
  }
};

struct Spec {
  bool left = false;   // '-'
  bool plus = false;   // '+'
  bool space = false;  // ' '
  bool alt = false;    // '#'
  bool zero = false;   // '0'
  size_t width = 0;
  int precision = -1;  // -1: not given
  char length = 0;     // 'H' = hh, 'h', 'l', 'q' = ll, 'z', 'j', 't', 'L'
};

// Emits prefix (sign, 0x) and a body of `body_len` characters produced by `body`, padded to the
// field width: spaces before, zeros between prefix and body, or spaces after.
template <typename Body>
void field(Out& out, const Spec& spec, bool zero_pad, const char* prefix, size_t prefix_len, size_t body_len,
           Body body) {
  const size_t len = prefix_len + body_len;
  const size_t pad = spec.width > len ? spec.width - len : 0;
  if (!spec.left && !zero_pad) out.fill(' ', pad);
  out.put(prefix, prefix_len);
  if (!spec.left && zero_pad) out.fill('0', pad);
  body(out);
  if (spec.left) out.fill(' ', pad);
}

void format_integer(Out& out, const Spec& spec, uint64_t magnitude, bool negative, bool is_signed, unsigned base,
                    bool upper) {
  char digits[24];  // 2^64 - 1 has 20 decimal digits, 16 hexadecimal
  size_t n = 0;
  const char* alphabet = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  for (uint64_t v = magnitude; v != 0; v /= base) digits[n++] = alphabet[v % base];
  // An explicit precision is the minimum digit count; precision 0 prints nothing for zero.
  const size_t min_digits = spec.precision >= 0 ? size_t(spec.precision) : 1;
  const size_t zeros = min_digits > n ? min_digits - n : 0;
  char prefix[2] = {};
  size_t prefix_len = 0;
  if (is_signed) {
    if (negative) {
      prefix[prefix_len++] = '-';
    } else if (spec.plus) {
      prefix[prefix_len++] = '+';
    } else if (spec.space) {
      prefix[prefix_len++] = ' ';
    }
  }
  if (spec.alt && base == 16 && magnitude != 0) {
    prefix[prefix_len++] = '0';
    prefix[prefix_len++] = upper ? 'X' : 'x';
  }
  field(out, spec, spec.zero && spec.precision < 0, prefix, prefix_len, zeros + n, [&](Out& o) {
    o.fill('0', zeros);
    for (size_t i = n; i > 0; --i) o.put(digits[i - 1]);
  });
}

void format_string(Out& out, const Spec& spec, const char* s) {
  if (!s) s = "(null)";
  // With a precision the argument need not be NUL-terminated: read at most that many bytes.
  size_t len = 0;
  const size_t limit = spec.precision >= 0 ? size_t(spec.precision) : SIZE_MAX;
  while (len < limit && s[len] != '\0') ++len;
  field(out, spec, false, nullptr, 0, len, [&](Out& o) { o.put(s, len); });
}

constexpr uint64_t kPow10[] = {1ull,
                               10ull,
                               100ull,
                               1000ull,
                               10000ull,
                               100000ull,
                               1000000ull,
                               10000000ull,
                               100000000ull,
                               1000000000ull,
                               10000000000ull,
                               100000000000ull,
                               1000000000000ull,
                               10000000000000ull,
                               100000000000000ull,
                               1000000000000000ull,
                               10000000000000000ull,
                               100000000000000000ull,
                               1000000000000000000ull};
constexpr int kMaxDigits = 17;  // enough to tell any two doubles apart
// Powers of ten a double holds exactly.
constexpr double kExact10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// a * b - p exactly, for p = fl(a * b): the rounding error of the product. Dekker's splitting
// where there is no hardware fused multiply-add (Cortex-M33 has none for doubles); with one,
// the compiler could contract the splitting itself, so it is used directly.
double product_error(double a, double b, double p) {
#ifdef __FP_FAST_FMA
  return __builtin_fma(a, b, -p);
#else
  constexpr double kSplit = 134217729.0;  // 2^27 + 1
  const double ca = kSplit * a, cb = kSplit * b;
  const double ah = ca - (ca - a), al = a - ah;
  const double bh = cb - (cb - b), bl = b - bh;
  return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
#endif
}

// v * 10^k as value + error, a double-double: each step multiplies or divides by a power of
// ten a double holds exactly and carries its rounding error along, so ties (0.125 -> "0.12",
// 0.95 -> "0.9") are decided on the true value and all 17 digits come out right.
struct Scaled {
  double value;
  double error;
};
Scaled scale_pow10(double v, int k) {
  Scaled s{v, 0.0};
  while (k != 0) {
    const int step = k > 22 ? 22 : (k < -22 ? -22 : k);
    k -= step;
    if (step > 0) {
      const double p = kExact10[step];
      const double hi = s.value * p;
      s = {hi, product_error(s.value, p, hi) + s.error * p};
    } else {
      const double d = kExact10[-step];
      // value - q * d: q * d == hi + lo exactly, and value - hi is exact (hi is within a factor
      // 2 of value). Near the largest doubles hi's partial products would overflow, so the
      // residual is computed on value * 2^-64: scaling by a power of two is exact.
      const double scale = s.value > 0x1p1000 ? 0x1p-64 : 1.0;
      const double x = s.value * scale;
      const double q = x / d;
      const double hi = q * d;
      const double residual = ((x - hi) - product_error(q, d, hi)) / scale;
      s = {q / scale, (residual + s.error) / d};
    }
    // Renormalize (|error| <= half an ulp of value), which round_scaled relies on.
    const double sum = s.value + s.error;
    s = {sum, s.error - (sum - s.value)};
  }
  return s;
}

// Round half to even of value + error, which is below 2^63.
uint64_t round_scaled(const Scaled& s) {
  if (s.value < 4503599627370496.0) {  // 2^52: |error| < half an ulp <= 1/4, only a tie needs it
    const uint64_t m = uint64_t(s.value);
    const double frac = s.value - double(m);
    if (frac > 0.5 || (frac == 0.5 && (s.error > 0 || (s.error == 0 && (m & 1))))) return m + 1;
    return m;
  }
  // value is an integer; the error may hold whole units (an ulp is 2 or more up here).
  int64_t whole = int64_t(s.error);
  if (double(whole) > s.error) --whole;  // floor
  const double frac = s.error - double(whole);
  const uint64_t m = uint64_t(s.value) + uint64_t(whole);
  return frac > 0.5 || (frac == 0.5 && (m & 1)) ? m + 1 : m;
}

// floor(log10(v)) for a finite v > 0, within one: from the binary exponent.
int estimate_exponent10(double v) {
  uint64_t bits = std::bit_cast<uint64_t>(v);
  int e2 = int((bits >> 52) & 0x7ff) - 1023;
  if (e2 == -1023) {                                             // subnormal: the exponent field is 0, normalize first
    bits = std::bit_cast<uint64_t>(v * 18446744073709551616.0);  // 2^64
    e2 = int((bits >> 52) & 0x7ff) - 1023 - 64;
  }
  // log10(2) = 0.30102999566...; an arithmetic floor for negative products.
  const int64_t p = int64_t(e2) * 30103;
  return int(p >= 0 ? p / 100000 : -((-p + 99999) / 100000));
}

// A decimal approximation of a non-negative value: digits[0..count) are the significant digits,
// digits[0] has weight 10^exponent, every digit past `count` is zero.
struct Decimal {
  char digits[kMaxDigits + 1];
  int count;
  int exponent;
  char digit_at(int power) const {
    const int i = exponent - power;
    return i >= 0 && i < count ? digits[i] : '0';
  }
};

// The digits of m (< 10^18) with the first one at 10^exponent.
Decimal decimal_from(uint64_t m, int exponent) {
  Decimal d;
  d.count = 1;
  while (d.count < kMaxDigits + 1 && m >= kPow10[d.count]) ++d.count;
  for (int i = d.count - 1; i >= 0; --i) {
    d.digits[i] = char('0' + m % 10);
    m /= 10;
  }
  d.exponent = exponent + d.count - 1;
  return d;
}

// Rounds v (finite, > 0) to `n` significant digits (1..17).
Decimal round_significant(double v, int n) {
  int e = estimate_exponent10(v);
  uint64_t m = 0;
  // The estimate is off by at most one; the third pass only guards against rounding at a
  // power of ten.
  for (int pass = 0; pass < 3; ++pass) {
    m = round_scaled(scale_pow10(v, n - 1 - e));
    if (m > kPow10[n]) {
      ++e;
    } else if (m < kPow10[n - 1]) {
      --e;
    } else {
      break;
    }
  }
  if (m >= kPow10[n]) {  // 9.99 -> 10.0: one more integer digit, all zeros
    m = kPow10[n - 1];
    ++e;
  }
  return decimal_from(m, e - (n - 1));
}

Decimal zero_decimal() { return decimal_from(0, 0); }

// v (finite, >= 0) rounded to `decimals` places after the point, as %f wants.
Decimal round_fixed(double v, int decimals) {
  if (v == 0) return zero_decimal();
  const int e = estimate_exponent10(v);
  if (e + 1 + decimals > kMaxDigits) return round_significant(v, kMaxDigits);  // the rest prints as zeros
  return decimal_from(round_scaled(scale_pow10(v, decimals)), -decimals);
}

// Fixed notation: integer digits, then `decimals` digits after the point.
void emit_fixed(Out& o, const Decimal& d, int decimals, bool point) {
  for (int p = d.exponent > 0 ? d.exponent : 0; p >= 0; --p) o.put(d.digit_at(p));
  if (point) o.put('.');
  for (int p = -1; p >= -decimals; --p) o.put(d.digit_at(p));
}

size_t fixed_length(const Decimal& d, int decimals, bool point) {
  return size_t(d.exponent > 0 ? d.exponent + 1 : 1) + (point ? 1 : 0) + size_t(decimals);
}

// Exponential notation: d.ddd e+XX with at least two exponent digits.
void emit_exponential(Out& o, const Decimal& d, int decimals, bool point, int exponent) {
  o.put(d.digits[0]);
  if (point) o.put('.');
  for (int i = 1; i <= decimals; ++i) o.put(i < d.count ? d.digits[i] : '0');
  o.put('e');
  o.put(exponent < 0 ? '-' : '+');
  const unsigned e = unsigned(exponent < 0 ? -exponent : exponent);
  if (e >= 100) o.put(char('0' + e / 100));
  o.put(char('0' + e / 10 % 10));
  o.put(char('0' + e % 10));
}

size_t exponential_length(int decimals, bool point, int exponent) {
  const int e = exponent < 0 ? -exponent : exponent;
  return 1 + (point ? 1 : 0) + size_t(decimals) + 2 + (e >= 100 ? 3 : 2);
}

void format_float(Out& out, const Spec& spec, double v, char conv) {
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  const bool negative = (bits >> 63) != 0;
  const bool finite = ((bits >> 52) & 0x7ff) != 0x7ff;
  char prefix[1] = {};
  size_t prefix_len = 0;
  if (negative) {
    prefix[prefix_len++] = '-';
  } else if (spec.plus) {
    prefix[prefix_len++] = '+';
  } else if (spec.space) {
    prefix[prefix_len++] = ' ';
  }
  if (!finite) {
    const char* text = (bits & 0xfffffffffffffull) != 0 ? "nan" : "inf";
    field(out, spec, false, prefix, prefix_len, 3, [&](Out& o) { o.put(text, 3); });
    return;
  }
  const double a = negative ? -v : v;
  int precision = spec.precision >= 0 ? spec.precision : 6;
  if (conv == 'f') {
    const Decimal d = round_fixed(a, precision);
    const bool point = precision > 0 || spec.alt;
    field(out, spec, spec.zero, prefix, prefix_len, fixed_length(d, precision, point),
          [&](Out& o) { emit_fixed(o, d, precision, point); });
    return;
  }
  if (conv == 'e') {
    const int n = precision + 1 > kMaxDigits ? kMaxDigits : precision + 1;
    const Decimal d = a == 0 ? zero_decimal() : round_significant(a, n);
    const bool point = precision > 0 || spec.alt;
    field(out, spec, spec.zero, prefix, prefix_len, exponential_length(precision, point, d.exponent),
          [&](Out& o) { emit_exponential(o, d, precision, point, d.exponent); });
    return;
  }
  // %g: `precision` significant digits, fixed notation for exponents in [-4, precision),
  // trailing zeros dropped unless '#'.
  if (precision == 0) precision = 1;
  const int n = precision > kMaxDigits ? kMaxDigits : precision;
  const Decimal d = a == 0 ? zero_decimal() : round_significant(a, n);
  const bool fixed = d.exponent >= -4 && d.exponent < precision;
  int decimals = fixed ? precision - 1 - d.exponent : precision - 1;
  if (!spec.alt) {
    // The last non-zero digit bounds the decimals that carry information.
    int last = d.count - 1;
    while (last > 0 && d.digits[last] == '0') --last;
    const int needed = fixed ? last - d.exponent : last;
    if (decimals > needed) decimals = needed > 0 ? needed : 0;
  }
  const bool point = decimals > 0 || spec.alt;
  if (fixed) {
    field(out, spec, spec.zero, prefix, prefix_len, fixed_length(d, decimals, point),
          [&](Out& o) { emit_fixed(o, d, decimals, point); });
  } else {
    field(out, spec, spec.zero, prefix, prefix_len, exponential_length(decimals, point, d.exponent),
          [&](Out& o) { emit_exponential(o, d, decimals, point, d.exponent); });
  }
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

size_t vformat(char* buf, size_t cap, const char* fmt, va_list ap) {
  Out out{buf, cap};
  const char* p = fmt;
  while (*p) {
    if (*p != '%') {
      out.put(*p++);
      continue;
    }
    const char* start = p++;
    Spec spec;
    for (;; ++p) {
      if (*p == '-') {
        spec.left = true;
      } else if (*p == '+') {
        spec.plus = true;
      } else if (*p == ' ') {
        spec.space = true;
      } else if (*p == '#') {
        spec.alt = true;
      } else if (*p == '0') {
        spec.zero = true;
      } else {
        break;
      }
    }
    if (*p == '*') {
      const int w = va_arg(ap, int);
      if (w < 0) spec.left = true;
      spec.width = w < 0 ? size_t(-int64_t(w)) : size_t(w);
      ++p;
    } else {
      while (is_digit(*p)) spec.width = spec.width * 10 + size_t(*p++ - '0');
    }
    if (*p == '.') {
      ++p;
      if (*p == '*') {
        const int prec = va_arg(ap, int);
        spec.precision = prec < 0 ? -1 : prec;  // a negative precision counts as none
        ++p;
      } else {
        spec.precision = 0;
        while (is_digit(*p)) spec.precision = spec.precision * 10 + (*p++ - '0');
      }
    }
    if (*p == 'h') {
      spec.length = p[1] == 'h' ? 'H' : 'h';
      p += p[1] == 'h' ? 2 : 1;
    } else if (*p == 'l') {
      spec.length = p[1] == 'l' ? 'q' : 'l';
      p += p[1] == 'l' ? 2 : 1;
    } else if (*p == 'z' || *p == 'j' || *p == 't' || *p == 'L') {
      spec.length = *p++;
    }
    if (spec.left) spec.zero = false;
    const char conv = *p;
    if (conv == '\0') {  // the format ends inside a conversion: show what was there
      out.put(start, size_t(p - start));
      break;
    }
    ++p;
    switch (conv) {
      case 'd':
      case 'i': {
        int64_t v;
        switch (spec.length) {
          case 'H': v = static_cast<signed char>(va_arg(ap, int)); break;
          case 'h': v = static_cast<short>(va_arg(ap, int)); break;
          case 'l': v = va_arg(ap, long); break;
          case 'q': v = va_arg(ap, long long); break;
          case 'z':
          case 't': v = va_arg(ap, ptrdiff_t); break;
          case 'j': v = va_arg(ap, intmax_t); break;
          default: v = va_arg(ap, int); break;
        }
        // Negating through unsigned keeps INT64_MIN defined.
        const uint64_t magnitude = v < 0 ? 0 - uint64_t(v) : uint64_t(v);
        format_integer(out, spec, magnitude, v < 0, true, 10, false);
        break;
      }
      case 'u':
      case 'x':
      case 'X': {
        uint64_t v;
        switch (spec.length) {
          case 'H': v = static_cast<unsigned char>(va_arg(ap, unsigned)); break;
          case 'h': v = static_cast<unsigned short>(va_arg(ap, unsigned)); break;
          case 'l': v = va_arg(ap, unsigned long); break;
          case 'q': v = va_arg(ap, unsigned long long); break;
          case 'z':
          case 't': v = va_arg(ap, size_t); break;
          case 'j': v = va_arg(ap, uintmax_t); break;
          default: v = va_arg(ap, unsigned); break;
        }
        format_integer(out, spec, v, false, false, conv == 'u' ? 10 : 16, conv == 'X');
        break;
      }
      case 'c': {
        const char c = static_cast<char>(va_arg(ap, int));
        field(out, spec, false, nullptr, 0, 1, [&](Out& o) { o.put(c); });
        break;
      }
      case 's': format_string(out, spec, va_arg(ap, const char*)); break;
      case 'e':
      case 'f':
      case 'g': {
        const double v = spec.length == 'L' ? double(va_arg(ap, long double)) : va_arg(ap, double);
        format_float(out, spec, v, conv);
        break;
      }
      case '%': out.put('%'); break;
      default: out.put(start, size_t(p - start)); break;  // unsupported: copied as written
    }
  }
  if (cap > 0) buf[out.n < cap ? out.n : cap - 1] = '\0';
  return out.n;
}

size_t format(char* buf, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const size_t n = vformat(buf, cap, fmt, ap);
  va_end(ap);
  return n;
}

}  // namespace keel
