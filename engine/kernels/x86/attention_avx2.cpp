// AVX2 + F16C + FMA attention over the cache: f16 rows, then the quantized rows (one template
// per operation, the q8 and q4 row formats as small policy structs). head_dim is a multiple of 8
// for every model we run (64 for SmolLM2, 8 for stories260K); other sizes take a scalar tail.
#include <immintrin.h>

#include <cmath>

#include "core/f16.h"
#include "kernels/x86/query_q8.h"
#include "kernels/attention.h"
#include "kernels/unrolled.h"
#include "kernels/x86/f16_group_kernels.h"
#include "kernels/x86/f16_lane_sums.h"

namespace keel {
namespace {

// Eight 8-lane sums to one vector of eight totals: [sum(a[0]), ..., sum(a[7])].
inline __m256 sum8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 h03 = _mm256_hadd_ps(h01, h23), h47 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(h03, h47, 0x20), _mm256_permute2f128_ps(h03, h47, 0x31));
}

void scores_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t hd8 = hd & ~7u;
  uint32_t j = 0;
  if (hd8 == hd && hd <= 16) {
    // Small heads, eight keys at a time: eight independent FMA chains instead of one or two
    // FMAs per key and a horizontal sum each (stories260K's 8-wide heads waited on latency).
    const __m256 sc = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
      const uint16_t* kj = k + uint64_t(j) * hd;
      __m256 acc[8];
      for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      for (uint32_t i = 0; i < hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, load_half8(kj + uint64_t(r) * hd + i), acc[r]);
      }
      _mm256_storeu_ps(s + j, _mm256_mul_ps(sum8(acc), sc));
    }
  }
  if (hd8 == hd && hd > 16) {
    // Wider heads, eight keys at a time: the per-key loop's FMA chains and sums (hsum8_in_order),
    // eight chains in flight and one shuffle tree for eight keys instead of one per key.
    const __m256 sc = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
      const uint16_t* kj = k + uint64_t(j) * hd;
      __m256 acc[8];
      for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      for (uint32_t i = 0; i < hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, load_half8(kj + uint64_t(r) * hd + i), acc[r]);
      }
      _mm256_storeu_ps(s + j, _mm256_mul_ps(hsum8_in_order(acc), sc));
    }
  }
  for (; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * hd;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t i = 0; i < hd8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_half8(kj + i), acc);
    float t = hsum(acc);
    for (uint32_t i = hd8; i < hd; ++i) t += q[i] * f16_to_f32(kj[i]);
    s[j] = t * scale;
  }
}

void weighted_sum_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t hd8 = hd & ~7u;
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  if (hd == 8) {
    // One vector per value row: four rows in flight so the adds do not wait on each other.
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    uint32_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const uint16_t* vj = v + uint64_t(j) * 8;
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_half8(vj), a0);
      a1 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 1]), load_half8(vj + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 2]), load_half8(vj + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 3]), load_half8(vj + 24), a3);
    }
    for (; j < n; ++j) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_half8(v + uint64_t(j) * 8), a0);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return;
  }
  if (hd8 == hd && hd <= 128) {
    // Keep the whole output row in registers (up to 16 x 8 lanes).
    __m256 acc[16];
    const uint32_t nv = hd / 8;
    for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_setzero_ps();
    for (uint32_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const uint16_t* vj = v + uint64_t(j) * hd;
      for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_fmadd_ps(pj, load_half8(vj + 8 * b), acc[b]);
    }
    for (uint32_t b = 0; b < nv; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
    return;
  }
  for (uint32_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const uint16_t* vj = v + uint64_t(j) * hd;
    uint32_t i = 0;
    for (; i < hd8; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pj, load_half8(vj + i), _mm256_loadu_ps(out + i)));
    for (; i < hd; ++i) out[i] += p[j] * f16_to_f32(vj[i]);
  }
}

void weighted_sum_more_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t hd8 = hd & ~7u;
  if (hd8 == hd && hd <= 128) {
    // weighted_sum's register path: one fused chain per output, in key order.
    __m256 acc[16];
    const uint32_t nv = hd / 8;
    for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_loadu_ps(out + 8 * b);
    for (uint32_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const uint16_t* vj = v + uint64_t(j) * hd;
      for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_fmadd_ps(pj, load_half8(vj + 8 * b), acc[b]);
    }
    for (uint32_t b = 0; b < nv; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
    return;
  }
  for (uint32_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const uint16_t* vj = v + uint64_t(j) * hd;
    uint32_t i = 0;
    for (; i < hd8; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pj, load_half8(vj + i), _mm256_loadu_ps(out + i)));
    for (; i < hd; ++i) out[i] += p[j] * f16_to_f32(vj[i]);
  }
}

void to_half_avx2(const float* x, uint32_t n, uint16_t* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

// Products and sums rounded one by one as the scalar rope_rotate's (x86's baseline has no fused
// multiply-add; this unit has, and GCC would fuse a * b - c * d here, vector or scalar, under
// its default contraction), the halves converted by F16C, which rounds to nearest even as
// f32_to_f16.
__attribute__((optimize("fp-contract=off"))) void rotate_rows_avx2(uint16_t* rows, uint32_t n, uint32_t head_dim,
                                                                   uint32_t pairs, bool halves, const float* cos,
                                                                   const float* sin) {
  for (uint32_t r = 0; r < n; ++r) {
    uint16_t* row = rows + uint64_t(r) * head_dim;
    uint32_t i = 0;
    if (halves) {
      uint16_t* second = row + pairs;
      for (; i + 8 <= pairs; i += 8) {
        const __m256 x0 = load_half8(row + i), x1 = load_half8(second + i);
        const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
        const __m256 a = _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s));
        const __m256 b = _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + i),
                         _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(second + i),
                         _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
    } else {
      // Four pairs (x, y) a vector: even lanes x c + y (-s) = x c - y s, odd lanes y c + x s
      // (a sum's operands commute, a negation is exact): the scalar results' bits.
      const __m256 even_negative =
          _mm256_castsi256_ps(_mm256_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
      for (; i + 4 <= pairs; i += 4) {
        const __m256 v = load_half8(row + 2 * i);
        const __m256 swapped = _mm256_permute_ps(v, 0xb1);
        const __m128 c4 = _mm_loadu_ps(cos + i), s4 = _mm_loadu_ps(sin + i);
        const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        const __m256 s =
            _mm256_xor_ps(_mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4)), even_negative);
        const __m256 r = _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(swapped, s));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 2 * i),
                         _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
    }
    for (; i < pairs; ++i) {
      const uint32_t ia = halves ? i : 2 * i, ib = halves ? i + pairs : 2 * i + 1;
      const float x0 = f16_to_f32(row[ia]), x1 = f16_to_f32(row[ib]);
      row[ia] = f32_to_f16(x0 * cos[i] - x1 * sin[i]);
      row[ib] = f32_to_f16(x0 * sin[i] + x1 * cos[i]);
    }
  }
}

// Quantized rows (core/kv_type.h) with 32-number groups, at most kMaxGroups per row; other
// shapes take the ref kernels.
//
// Scores are integer dot products: the query is quantized per step to int8 per group (scale
// max|q|/127, kept in f32), each key group's 32 products are summed exactly in int32, and the
// two scales are applied once per group. Eight keys go through together so the horizontal
// sums, the scale loads and the conversions are shared by a vector of eight keys.
constexpr uint32_t kMaxGroups = x86::kQueryMaxGroups;
using x86::quantize_query;
using x86::QueryQ8;

// Eight int32 8-lane sums to one vector of eight totals, as sum8 does for floats.
inline __m256i sum8_epi32(const __m256i* a) {
  const __m256i h01 = _mm256_hadd_epi32(a[0], a[1]), h23 = _mm256_hadd_epi32(a[2], a[3]);
  const __m256i h45 = _mm256_hadd_epi32(a[4], a[5]), h67 = _mm256_hadd_epi32(a[6], a[7]);
  const __m256i h03 = _mm256_hadd_epi32(h01, h23), h47 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h03, h47, 0x20), _mm256_permute2x128_si256(h03, h47, 0x31));
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
  return _mm_cvtsi128_si32(x);
}

// The half at `first` + `stride` * r (in 16-bit units) for r = 0..7, as f32: one scale or
// minimum of eight consecutive rows.
inline __m256 load_halves_strided(const uint16_t* first, uint32_t stride) {
  return _mm256_cvtph_ps(_mm_setr_epi16(short(first[0]), short(first[stride]), short(first[2 * stride]),
                                        short(first[3 * stride]), short(first[4 * stride]), short(first[5 * stride]),
                                        short(first[6 * stride]), short(first[7 * stride])));
}

// Exact int32 dot product of 32 int8 query numbers with one group of a stored row.
struct Q8Rows {
  static constexpr KvType kType = KvType::Q8;
  static constexpr bool kHasMin = false;
  static const uint8_t* numbers(const uint16_t* row, uint32_t groups) {
    return reinterpret_cast<const uint8_t*>(row + groups);
  }
  // A group of a key as the dot products take it, prepared once for every query.
  struct Key {
    __m256i k, magnitude;
  };
  static Key key(const uint8_t* group) {
    const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group));
    return {kv, _mm256_abs_epi8(kv)};
  }
  static __m256i dot(__m256i qv, const Key& key) {
    // maddubs multiplies unsigned by signed bytes: |k| times q with k's sign (both within
    // +-127, so the pair sums stay inside int16).
    const __m256i pairs = _mm256_maddubs_epi16(key.magnitude, _mm256_sign_epi8(qv, key.k));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
  static __m256i dot(__m256i qv, const uint8_t* group) { return dot(qv, key(group)); }
  static constexpr uint32_t kGroupBytes = 32;
  // Values as f32, eight at a time: part 0..3 of a group.
  static __m256 load8(const uint8_t* group, uint32_t part) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + 8 * part))));
  }
};

// A q4 group is 16 bytes: numbers 0..15 in the low nibbles, 16..31 in the high ones.
struct Q4Rows {
  static constexpr KvType kType = KvType::Q4;
  static constexpr bool kHasMin = true;
  static const uint8_t* numbers(const uint16_t* row, uint32_t groups) {
    return reinterpret_cast<const uint8_t*>(row + 2 * groups);
  }
  static __m256i nibbles(const uint8_t* group) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(group));
    const __m128i low4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), low4), _mm_and_si128(x, low4));
  }
  struct Key {
    __m256i numbers;
  };
  static Key key(const uint8_t* group) { return {nibbles(group)}; }
  static __m256i dot(__m256i qv, const Key& key) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(key.numbers, qv), _mm256_set1_epi16(1));
  }
  static __m256i dot(__m256i qv, const uint8_t* group) { return dot(qv, key(group)); }
  static constexpr uint32_t kGroupBytes = 16;
  static __m256 load8(const uint8_t* group, uint32_t part) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + 8 * (part & 1)));
    const __m128i n = part < 2 ? x : _mm_srli_epi16(x, 4);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(n, _mm_set1_epi8(15))));
  }
};

// Scores of the query `qq` (quantize_query's) against n rows.
template <class Rows>
void scores_quant_rows(const QueryQ8& qq, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const uint16_t* kj = k + uint64_t(j) * row;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < groups; ++b) {
      const __m256i qv = _mm256_load_si256(reinterpret_cast<const __m256i*>(qq.q + 32 * b));
      __m256i dots[8];
      for (uint32_t r = 0; r < 8; ++r) {
        const uint16_t* kr = kj + uint64_t(r) * row;
        dots[r] = Rows::dot(qv, Rows::numbers(kr, groups) + b * Rows::kGroupBytes);
      }
      const __m256 d = _mm256_mul_ps(load_halves_strided(kj + b, row), _mm256_set1_ps(qq.d[b]));
      acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum8_epi32(dots)), acc);
      if (Rows::kHasMin)
        acc = _mm256_fmadd_ps(load_halves_strided(kj + groups + b, row), _mm256_set1_ps(qq.sum[b]), acc);
    }
    _mm256_storeu_ps(s + j, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
  }
  for (; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * row;
    float acc = 0.0f;
    for (uint32_t b = 0; b < groups; ++b) {
      const __m256i qv = _mm256_load_si256(reinterpret_cast<const __m256i*>(qq.q + 32 * b));
      const int32_t dot = hsum_epi32(Rows::dot(qv, Rows::numbers(kj, groups) + b * Rows::kGroupBytes));
      acc += f16_to_f32(kj[b]) * qq.d[b] * float(dot);
      if (Rows::kHasMin) acc += f16_to_f32(kj[groups + b]) * qq.sum[b];
    }
    s[j] = acc * scale;
  }
}

template <class Rows>
void scores_quant(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  QueryQ8 qq;
  quantize_query(q, hd / 32, qq);
  scores_quant_rows<Rows>(qq, k, n, hd, scale, s);
}

// out = sum_j p[j] * (d_j * v_j + m_j), the minimum term for q4 only. The whole output row
// stays in registers; the coefficients p[j] * d_j of eight rows are computed as one vector and
// read back as broadcasts. (Summing the values in integers with int16 coefficients was tried:
// widening and interleaving the bytes costs as many shuffle-port operations as the f32 path's
// conversions, and it was no faster on AVX2.)
template <class Rows>
void weighted_sum_quant(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  __m256 acc[4 * kMaxGroups];
  __m256 mins[kMaxGroups];
  for (uint32_t b = 0; b < 4 * groups; ++b) acc[b] = _mm256_setzero_ps();
  for (uint32_t b = 0; b < groups; ++b) mins[b] = _mm256_setzero_ps();
  alignas(32) float coef[kMaxGroups][8];
  for (uint32_t j0 = 0; j0 < n; j0 += 8) {
    const uint16_t* vj0 = v + uint64_t(j0) * row;
    const uint32_t rows = n - j0 < 8 ? n - j0 : 8;
    if (rows == 8) {
      const __m256 pj = _mm256_loadu_ps(p + j0);
      for (uint32_t b = 0; b < groups; ++b) {
        _mm256_store_ps(coef[b], _mm256_mul_ps(pj, load_halves_strided(vj0 + b, row)));
        if (Rows::kHasMin) mins[b] = _mm256_fmadd_ps(pj, load_halves_strided(vj0 + groups + b, row), mins[b]);
      }
    } else {
      for (uint32_t r = 0; r < rows; ++r) {
        const uint16_t* vr = vj0 + uint64_t(r) * row;
        for (uint32_t b = 0; b < groups; ++b) {
          coef[b][r] = p[j0 + r] * f16_to_f32(vr[b]);
          // The tail's minima go to lane 0; the lanes are summed at the end.
          if (Rows::kHasMin) {
            mins[b] =
                _mm256_add_ps(mins[b], _mm256_setr_ps(p[j0 + r] * f16_to_f32(vr[groups + b]), 0, 0, 0, 0, 0, 0, 0));
          }
        }
      }
    }
    for (uint32_t r = 0; r < rows; ++r) {
      const uint8_t* vn = Rows::numbers(vj0 + uint64_t(r) * row, groups);
      for (uint32_t b = 0; b < groups; ++b) {
        const __m256 c = _mm256_broadcast_ss(&coef[b][r]);
        const uint8_t* vb = vn + b * Rows::kGroupBytes;
        __m256* a = acc + 4 * b;
        for (uint32_t h = 0; h < 4; ++h) a[h] = _mm256_fmadd_ps(c, Rows::load8(vb, h), a[h]);
      }
    }
  }
  for (uint32_t b = 0; b < 4 * groups; ++b) {
    const __m256 m = Rows::kHasMin ? _mm256_set1_ps(hsum(mins[b / 4])) : _mm256_setzero_ps();
    _mm256_storeu_ps(out + 8 * b, _mm256_add_ps(acc[b], m));
  }
}

bool quant_fast_path(uint32_t hd) { return kv_group(hd) == 32 && hd / 32 <= kMaxGroups; }

void scores_q8_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  if (!quant_fast_path(hd)) return attention_kernels_ref().scores_q8(q, k, n, hd, scale, s);
  scores_quant<Q8Rows>(q, k, n, hd, scale, s);
}

void weighted_sum_q8_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  if (!quant_fast_path(hd)) return attention_kernels_ref().weighted_sum_q8(p, v, n, hd, out);
  weighted_sum_quant<Q8Rows>(p, v, n, hd, out);
}

void scores_q4_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  if (!quant_fast_path(hd)) return attention_kernels_ref().scores_q4(q, k, n, hd, scale, s);
  scores_quant<Q4Rows>(q, k, n, hd, scale, s);
}

void weighted_sum_q4_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  if (!quant_fast_path(hd)) return attention_kernels_ref().weighted_sum_q4(p, v, n, hd, out);
  weighted_sum_quant<Q4Rows>(p, v, n, hd, out);
}

// ---- The queries of one KV head together ----
//
// With grouped-query attention the g queries that share a KV head read the same rows. On AVX2
// the single-query kernels are bound by the work done on each row (f16 conversions, q8/q4
// widening), not by memory, so these do that work once per row for all the queries: each
// converted vector feeds one FMA per query. Per query, every FMA is the single-query kernel's
// with the same operands, in the same order along each chain (a score's chain runs over the head
// dims of its key, a weighted sum's over the rows for each output lane), so the results are its
// bits. Queries go three at a time: 4 keys x 3 queries or 4 vectors x 3 queries of accumulators
// and the operands fit AVX2's sixteen registers.
constexpr uint32_t kGroupBlock = 3;

// The f16 kernels of the group are f16_group_kernels.h's, three queries at a time.
void scores_f16_group_avx2(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale,
                           float* s, uint64_t s_stride) {
  scores_f16_group_of<kGroupBlock>(q, g, k, n, hd, scale, s, s_stride, scores_avx2);
}

void weighted_sum_f16_group_avx2(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n,
                                 uint32_t hd, float* out) {
  weighted_sum_f16_group_of<kGroupBlock>(p, p_stride, g, v, n, hd, out, weighted_sum_avx2);
}

// Four keys' int32 lane sums to their four totals (exact, so in any order): keys 0..3.
inline __m128i sum4_epi32(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// scores_quant_rows for G <= kGroupBlock quantized queries: each key group loaded (and q8's
// magnitudes or q4's nibbles taken) once for the G queries, each key's scale and minimum
// converted once; four keys x G queries of int32 products in registers. The integer sums are
// exact and every f32 operation is scores_quant_rows' own, in its order.
template <class Rows, uint32_t G>
void scores_quant_block(const QueryQ8* qq, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                        uint64_t s_stride) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  const __m256 sc = _mm256_set1_ps(scale);
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const uint16_t* kj = k + uint64_t(j) * row;
    prefetch_rows(kj, k + uint64_t(n) * row, 8, row * 2);
    __m256 acc[G];
    unrolled<G>([&](auto g) { acc[g] = _mm256_setzero_ps(); });
    for (uint32_t b = 0; b < groups; ++b) {
      __m256i qv[G];
      unrolled<G>([&](auto g) { qv[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(qq[g].q + 32 * b)); });
      __m128i totals[2][G];  // [keys 0..3, 4..7][query]
      unrolled<2>([&](auto half) {
        __m256i d[G][4];
        unrolled<4>([&](auto r) {
          const uint16_t* kr = kj + uint64_t(4 * half + r) * row;
          const typename Rows::Key key = Rows::key(Rows::numbers(kr, groups) + b * Rows::kGroupBytes);
          unrolled<G>([&](auto g) { d[g][r] = Rows::dot(qv[g], key); });
        });
        unrolled<G>([&](auto g) { totals[half][g] = sum4_epi32(d[g][0], d[g][1], d[g][2], d[g][3]); });
      });
      const __m256 dk = load_halves_strided(kj + b, row);
      const __m256 mk = Rows::kHasMin ? load_halves_strided(kj + groups + b, row) : dk;
      unrolled<G>([&](auto g) {
        const __m256 dots = _mm256_cvtepi32_ps(_mm256_set_m128i(totals[1][g], totals[0][g]));
        acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(dk, _mm256_set1_ps(qq[g].d[b])), dots, acc[g]);
        if (Rows::kHasMin) acc[g] = _mm256_fmadd_ps(mk, _mm256_set1_ps(qq[g].sum[b]), acc[g]);
      });
    }
    unrolled<G>([&](auto g) { _mm256_storeu_ps(s + g * s_stride + j, _mm256_mul_ps(acc[g], sc)); });
  }
  // The last keys one at a time, as scores_quant_rows takes them.
  for (uint32_t g = 0; g < G; ++g)
    scores_quant_rows<Rows>(qq[g], k + uint64_t(j) * row, n - j, hd, scale, s + g * s_stride + j);
}

template <class Rows>
void scores_quant_group(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                        uint64_t s_stride) {
  if (!quant_fast_path(hd)) {
    const AttentionKernels& ref = attention_kernels_ref();
    for (uint32_t i = 0; i < g; ++i)
      ref.scores_of(Rows::kType)(q + uint64_t(i) * hd, k, n, hd, scale, s + i * s_stride);
    return;
  }
  for_query_blocks<kGroupBlock>(g, [&](uint32_t i, auto size) {
    QueryQ8 qq[size];
    for (uint32_t x = 0; x < size; ++x) quantize_query(q + uint64_t(i + x) * hd, hd / 32, qq[x]);
    if constexpr (size == 1) {
      scores_quant_rows<Rows>(qq[0], k, n, hd, scale, s + i * s_stride);
    } else {
      scores_quant_block<Rows, size>(qq, k, n, hd, scale, s + i * s_stride, s_stride);
    }
  });
}

// weighted_sum_quant for G <= kGroupBlock queries: each group's 32 numbers of a row are widened
// to f32 once and multiplied into the G queries' accumulators with their own coefficients
// p[j] * d_j (computed as weighted_sum_quant computes them); q4's minimum terms are summed per
// query into the same lanes as there. Rows in blocks of kGroupRows, one pass per group.
template <class Rows, uint32_t G>
void weighted_sum_quant_block(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t n, uint32_t hd,
                              float* out) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  __m256 mins[G][kMaxGroups];
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t b = 0; b < groups; ++b) mins[g][b] = _mm256_setzero_ps();
  alignas(32) float coef[G][kGroupRows];
  // The chains are carried in `out` between blocks, from +0 as weighted_sum_quant's start.
  for (uint32_t i = 0; i < G * hd; ++i) out[i] = 0.0f;
  for (uint32_t j0 = 0; j0 < n; j0 += kGroupRows) {
    const uint32_t len = n - j0 < kGroupRows ? n - j0 : kGroupRows;
    const uint16_t* vb = v + uint64_t(j0) * row;
    prefetch_rows(vb, v + uint64_t(n) * row, kGroupRows, row * 2);
    for (uint32_t b = 0; b < groups; ++b) {
      // Coefficients and minimum terms of this group's rows: eight rows as one vector, as
      // weighted_sum_quant takes them, and the last of all rows one by one into lane 0.
      uint32_t r = 0;
      for (; r + 8 <= len; r += 8) {
        const __m256 d = load_halves_strided(vb + uint64_t(r) * row + b, row);
        const __m256 m = Rows::kHasMin ? load_halves_strided(vb + uint64_t(r) * row + groups + b, row) : d;
        for (uint32_t g = 0; g < G; ++g) {
          const __m256 pj = _mm256_loadu_ps(p + g * p_stride + j0 + r);
          _mm256_store_ps(coef[g] + r, _mm256_mul_ps(pj, d));
          if (Rows::kHasMin) mins[g][b] = _mm256_fmadd_ps(pj, m, mins[g][b]);
        }
      }
      for (; r < len; ++r) {
        const uint16_t* vr = vb + uint64_t(r) * row;
        const float d = f16_to_f32(vr[b]), m = Rows::kHasMin ? f16_to_f32(vr[groups + b]) : 0.0f;
        for (uint32_t g = 0; g < G; ++g) {
          const float pj = p[g * p_stride + j0 + r];
          coef[g][r] = pj * d;
          if (Rows::kHasMin) mins[g][b] = _mm256_add_ps(mins[g][b], _mm256_setr_ps(pj * m, 0, 0, 0, 0, 0, 0, 0));
        }
      }
      __m256 acc[G][4];
      unrolled<G>([&](auto g) {
        unrolled<4>([&](auto h) { acc[g][h] = _mm256_loadu_ps(out + uint64_t(g) * hd + 32 * b + 8 * h); });
      });
      for (r = 0; r < len; ++r) {
        const uint8_t* x = Rows::numbers(vb + uint64_t(r) * row, groups) + b * Rows::kGroupBytes;
        __m256 c[G];
        unrolled<G>([&](auto g) { c[g] = _mm256_broadcast_ss(&coef[g][r]); });
        unrolled<4>([&](auto h) {
          const __m256 xv = Rows::load8(x, h);
          unrolled<G>([&](auto g) { acc[g][h] = _mm256_fmadd_ps(c[g], xv, acc[g][h]); });
        });
      }
      unrolled<G>([&](auto g) {
        unrolled<4>([&](auto h) { _mm256_storeu_ps(out + uint64_t(g) * hd + 32 * b + 8 * h, acc[g][h]); });
      });
    }
  }
  for (uint32_t g = 0; g < G; ++g) {
    for (uint32_t b = 0; b < 4 * groups; ++b) {
      float* o = out + uint64_t(g) * hd + 8 * b;
      const __m256 a = _mm256_loadu_ps(o);
      const __m256 m = Rows::kHasMin ? _mm256_set1_ps(hsum(mins[g][b / 4])) : _mm256_setzero_ps();
      _mm256_storeu_ps(o, _mm256_add_ps(a, m));
    }
  }
}

template <class Rows>
void weighted_sum_quant_group(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t hd,
                              float* out) {
  if (!quant_fast_path(hd)) {
    const AttentionKernels& ref = attention_kernels_ref();
    for (uint32_t i = 0; i < g; ++i)
      ref.weighted_sum_of(Rows::kType)(p + i * p_stride, v, n, hd, out + uint64_t(i) * hd);
    return;
  }
  for_query_blocks<kGroupBlock>(g, [&](uint32_t i, auto size) {
    weighted_sum_quant_block<Rows, size>(p + i * p_stride, p_stride, v, n, hd, out + uint64_t(i) * hd);
  });
}

}  // namespace

const AttentionKernels* attention_kernels_x86_avx2_table() {
  static const AttentionKernels k{"avx2",
                                  scores_avx2,
                                  weighted_sum_avx2,
                                  to_half_avx2,
                                  weighted_sum_more_avx2,
                                  scores_q8_avx2,
                                  weighted_sum_q8_avx2,
                                  scores_q4_avx2,
                                  weighted_sum_q4_avx2,
                                  scores_f16_group_avx2,
                                  weighted_sum_f16_group_avx2,
                                  scores_quant_group<Q8Rows>,
                                  weighted_sum_quant_group<Q8Rows>,
                                  scores_quant_group<Q4Rows>,
                                  weighted_sum_quant_group<Q4Rows>,
                                  rotate_rows_avx2};
  return &k;
}

}  // namespace keel
