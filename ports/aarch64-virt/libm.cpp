// The double-precision functions the engine calls (exp, pow, sin, cos, sincos, log; RoPE's frequencies
// and angles and the sampler's normalization are computed in double), for a target without a
// C library. Within about 2 units in the last place of the exact result over the ranges the
// engine uses, so that the float RoPE table equals the host's (glibc's are correctly rounded
// in practice): the greedy text is compared with the host's bit for bit in the end
// (scripts/aarch64_virt.sh). pow works in double-double through log and exp, since log's
// rounding error times an exponent of ~10 would otherwise cost ~20 units in the last place.
// Polynomials are Taylor series truncated where the next term is below 2^-70 of the result.
#include <cstdint>

namespace {

uint64_t bits(double x) {
  uint64_t u;
  __builtin_memcpy(&u, &x, 8);
  return u;
}
double from_bits(uint64_t u) {
  double x;
  __builtin_memcpy(&x, &u, 8);
  return x;
}

// 1/n! for n = 0..22, each rounded once (the products up to 22! are exact in long double's
// 113 bits up to 22!, well within the bits these terms contribute).
struct InvFactorials {
  double v[23];
};
constexpr InvFactorials make_inv_factorials() {
  InvFactorials t{};
  long double f = 1;
  for (int n = 0; n <= 22; ++n) {
    if (n > 0) f *= n;
    t.v[n] = double(1.0L / f);
  }
  return t;
}
constexpr InvFactorials kInvFactorialTable = make_inv_factorials();
constexpr const double* kInvFactorial = kInvFactorialTable.v;

constexpr double kInf = __builtin_inf();
constexpr double kNan = __builtin_nan("");

// ln 2 as a 32-bit head (k * head is exact for |k| < 2^21) and the rest.
constexpr double kLn2Hi = 0x1.62e42ffp-1;
constexpr double kLn2Lo = -0x1.718432a1b0e26p-35;
constexpr double kInvLn2 = 0x1.71547652b82fep+0;

// x * 2^k for any k the callers produce, through at most two exact scalings.
double scale2(double x, int64_t k) {
  if (k > 1023) {
    x *= from_bits(uint64_t(1023 + 1023) << 52);
    k -= 1023;
    if (k > 1023) k = 1023;
  } else if (k < -1022) {
    x *= from_bits(uint64_t(1023 - 1022) << 52);
    k += 1022;
    if (k < -1022) k = -1022;
  }
  return x * from_bits(uint64_t(1023 + k) << 52);
}

// exp(hi + lo) for |lo| <= 2^-50 |hi| (lo = 0 for exp itself).
double exp_dd(double hi, double lo) {
  if (hi != hi) return hi;
  if (hi > 709.782712893384) return kInf;
  if (hi < -745.1332191019412) return 0.0;
  const double kd = __builtin_round(hi * kInvLn2);
  const int64_t k = int64_t(kd);
  // |r| <= ln2 / 2 + rounding; hi - k * kLn2Hi is exact (Sterbenz) for k != 0
  const double r = (hi - kd * kLn2Hi) + (lo - kd * kLn2Lo);
  // exp(r) = sum r^n / n!, n <= 14: the next term is below 2^-70 for |r| <= 0.35
  double p = kInvFactorial[14];
  for (int n = 13; n >= 0; --n) p = kInvFactorial[n] + r * p;
  return scale2(p, k);
}

// log(x) for finite x > 0 as hi + lo, |lo| <= 2^-52 |hi|, error about 2^-100 |hi|.
void log_dd(double x, double* hi, double* lo) {
  int64_t e = 0;
  uint64_t u = bits(x);
  if ((u >> 52) == 0) {  // subnormal: make it normal first
    x *= 0x1p54;
    u = bits(x);
    e = -54;
  }
  e += int64_t(u >> 52) - 1023;
  // m in [sqrt(1/2), sqrt(2)), x = m * 2^e
  double m = from_bits((u & ((1ull << 52) - 1)) | (1023ull << 52));
  if (m > 1.4142135623730951) {
    m *= 0.5;
    ++e;
  }
  // log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716. m - 1 is exact (Sterbenz);
  // m + 1 and the quotient are carried to double-double.
  const double a = m - 1.0;
  const double b_hi = m + 1.0;
  const double b_lo = m - (b_hi - 1.0);
  const double s_hi = a / b_hi;
  const double s_lo = (__builtin_fma(-s_hi, b_hi, a) - s_hi * b_lo) / b_hi;
  // 2 (s^3/3 + s^5/5 + ... + s^25/25): only its own rounding matters, it is below 0.0034
  const double s2 = s_hi * s_hi;
  double t = 0.0;
  for (int n = 25; n >= 3; n -= 2) t = 1.0 / n + s2 * t;
  const double tail = 2.0 * s_hi * s2 * t;
  // e * ln2 + 2 s + tail, the two large terms summed exactly (two-sum)
  const double p = double(e) * kLn2Hi;  // exact: e has at most 11 bits
  const double q = 2.0 * s_hi;
  const double sum = p + q;
  const double bb = sum - p;
  const double err = (p - (sum - bb)) + (q - bb);
  const double l = err + (double(e) * kLn2Lo + 2.0 * s_lo + tail);
  *hi = sum + l;
  *lo = l - (*hi - sum);
}

// pi/2 in four pieces: 24, 24 and 24 significant bits (n times each is exact for |n| < 2^29)
// and the next 53 bits (computed from pi to 100 digits).
constexpr double kPio2[4] = {0x1.921fb6p+0, -0x1.777a5cp-25, -0x1.ee59dap-50, 0x1.98a2e03707345p-77};
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;

// x = n pi/2 + r, |r| <= pi/4 (plus rounding). Accurate for |x| < 2^29 pi/2 (8.4e8), far past
// any angle position * inverse frequency the engine forms within its context lengths.
double reduce(double x, int64_t* n) {
  const double nd = __builtin_round(x * kTwoOverPi);
  *n = int64_t(nd);
  double r = x;
  for (double piece : kPio2) r -= nd * piece;
  return r;
}

// Taylor kernels on |r| <= pi/4: sin to r^21, cos to r^22 (next terms below 2^-75).
double sin_kernel(double r) {
  const double r2 = r * r;
  double p = 0.0;  // sum over k = 1..10 of (-1)^k r^(2k-2) / (2k+1)!
  for (int k = 10; k >= 1; --k) p = (k % 2 ? -kInvFactorial[2 * k + 1] : kInvFactorial[2 * k + 1]) + r2 * p;
  return r + r * r2 * p;
}

double cos_kernel(double r) {
  const double r2 = r * r;
  double p = 0.0;  // sum over k = 2..11 of (-1)^k r^(2k-4) / (2k)!
  for (int k = 11; k >= 2; --k) p = (k % 2 ? -kInvFactorial[2 * k] : kInvFactorial[2 * k]) + r2 * p;
  // 1 - r^2/2 + r^4 p, the small terms summed first
  return 1.0 + (r2 * -0.5 + r2 * r2 * p);
}

}  // namespace

extern "C" {

double exp(double x) { return exp_dd(x, 0.0); }

double log(double x) {
  if (x != x || x == kInf) return x;
  if (x == 0.0) return -kInf;
  if (x < 0.0) return kNan;
  double hi, lo;
  log_dd(x, &hi, &lo);
  return hi;
}

double log2(double x) {
  if (x != x || x == kInf) return x;
  if (x == 0.0) return -kInf;
  if (x < 0.0) return kNan;
  double hi, lo;
  log_dd(x, &hi, &lo);
  return (hi + lo) * kInvLn2;
}

double pow(double x, double y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (x != x || y != y) return kNan;
  const bool y_integer = __builtin_round(y) == y;
  bool negate = false;
  if (x < 0.0) {
    if (!y_integer) return kNan;
    // odd integer exponents keep the sign; |y| >= 2^53 is always even
    negate = __builtin_fabs(y) < 0x1p53 && (int64_t(y) & 1) != 0;
    x = -x;
  }
  double r;
  if (x == 0.0) {
    r = y < 0.0 ? kInf : 0.0;
  } else if (x == kInf) {
    r = y < 0.0 ? 0.0 : kInf;
  } else if (__builtin_fabs(y) == kInf) {
    r = (x < 1.0) == (y < 0.0) ? kInf : 0.0;
  } else {
    double l_hi, l_lo;
    log_dd(x, &l_hi, &l_lo);
    const double p_hi = y * l_hi;
    const double p_lo = __builtin_fma(y, l_hi, -p_hi) + y * l_lo;
    r = exp_dd(p_hi, p_lo);
  }
  return negate ? -r : r;
}

double sin(double x) {
  if (x != x || __builtin_fabs(x) == kInf) return kNan;
  if (__builtin_fabs(x) < 0x1p-27) return x;
  int64_t n;
  const double r = reduce(x, &n);
  switch (n & 3) {
    case 0: return sin_kernel(r);
    case 1: return cos_kernel(r);
    case 2: return -sin_kernel(r);
    default: return -cos_kernel(r);
  }
}

// GCC turns sin(a) and cos(a) of one angle (RoPE's tables) into one call of this GNU function.
void sincos(double x, double* s, double* c) {
  if (x != x || __builtin_fabs(x) == kInf) {
    *s = *c = kNan;
    return;
  }
  if (__builtin_fabs(x) < 0x1p-27) {
    *s = x;
    *c = 1.0;
    return;
  }
  int64_t n;
  const double r = reduce(x, &n);
  const double sr = sin_kernel(r), cr = cos_kernel(r);
  switch (n & 3) {
    case 0: *s = sr, *c = cr; break;
    case 1: *s = cr, *c = -sr; break;
    case 2: *s = -sr, *c = -cr; break;
    default: *s = -cr, *c = sr; break;
  }
}

double cos(double x) {
  if (x != x || __builtin_fabs(x) == kInf) return kNan;
  int64_t n;
  const double r = reduce(x, &n);
  switch (n & 3) {
    case 0: return cos_kernel(r);
    case 1: return -sin_kernel(r);
    case 2: return -cos_kernel(r);
    default: return sin_kernel(r);
  }
}

}  // extern "C"
