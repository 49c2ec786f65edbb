// AVX2 + FMA element-wise ops. exp uses the constants and evaluation order of
// kernels/ref/expf_ref.h so that ref and SIMD differ only by FMA rounding.
#include <immintrin.h>

#include "kernels/kernels.h"
#include "kernels/ref/expf_ref.h"
#include "kernels/x86/x86_tables.h"

namespace keel::x86 {

namespace {

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 0x55));
  return _mm_cvtss_f32(m);
}

inline __m256 exp8(__m256 x) {
  using namespace expf_poly;
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(kMinInput), _CMP_GE_OQ);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(kMaxInput));
  const __m256 magic = _mm256_set1_ps(kRoundMagic);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), magic), magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  // n is in [-126, 127] wherever `keep` holds; other lanes are discarded below.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 res = _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
  return _mm256_blendv_ps(res, x, nan);
}

void rmsnorm_avx2(const float* x, const float* w, uint32_t n, float eps, float* out) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
  }
  float ss = hsum8(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) ss += x[i] * x[i];
  // sqrtss directly: __builtin_sqrtf keeps a libm call for the errno case.
  const float inv = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss / float(n) + eps)));
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void softmax_avx2(float* x, uint32_t n) {
  if (n == 0) return;
  float mx = x[0];
  uint32_t i = 0;
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    mx = hmax8(vm);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vs = _mm256_setzero_ps();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
    _mm256_storeu_ps(x + i, e);
    vs = _mm256_add_ps(vs, e);
  }
  float sum = hsum8(vs);
  for (; i < n; ++i) {
    x[i] = expf_poly::exp_ref(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
  for (; i < n; ++i) x[i] *= inv;
}

void silu_mul_avx2(const float* gate, const float* up, uint32_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 den = _mm256_add_ps(one, exp8(_mm256_xor_ps(g, sign)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf_poly::exp_ref(-g)) * up[i];
  }
}

void add_avx2(const float* a, const float* b, uint32_t n, float* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void scale_avx2(float* x, uint32_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
}

float dot_avx2(const float* a, const float* b, uint32_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  if (i + 8 <= n) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    i += 8;
  }
  float s = hsum8(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_avx2(float a, const float* x, uint32_t n, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void gelu_mul_avx2(const float* gate, const float* up, uint32_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(0.044715f);
  const __m256 minus_two_k = _mm256_set1_ps(-2.0f * kSqrt2OverPi);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c, g), _mm256_mul_ps(g, g), g);  // g + c g^3
    const __m256 den = _mm256_add_ps(one, exp8(_mm256_mul_ps(minus_two_k, inner)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float u = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + expf_poly::exp_ref(-2.0f * u)) * up[i];
  }
}

constexpr VectorKernels kAvx2 = {"avx2",     rmsnorm_avx2, softmax_avx2, silu_mul_avx2, add_avx2,
                                 scale_avx2, dot_avx2,     axpy_avx2,    gelu_mul_avx2};

}  // namespace

const VectorKernels& vector_avx2_table() { return kAvx2; }

}  // namespace keel::x86
