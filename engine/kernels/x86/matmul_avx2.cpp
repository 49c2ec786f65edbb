// AVX2 + FMA + F16C kernels over the same panels as the AVX-512 ones: a 64-byte group of a
// panel is two 32-byte halves (rows 0-7 and 8-15), each 8 rows x 4 inputs.
//
// `vpmaddubsw` (u8 x s8, adjacent pairs summed into a *saturating* int16) needs care:
//  - Q8: the stored byte u = q + 128 can be 255, and 255*127*2 overflows int16. We undo the
//    bias (s = u ^ 0x80 = q as int8) and feed |s| as the unsigned operand and sign(a, s) as the
//    signed one: |s| <= 128 and |a| <= 127, so a pair is at most 2*128*127 = 32512 < 32767.
//    The int32 sums are then sum q*a directly; no zero-point correction is needed.
//  - Q4: u <= 15, a pair is at most 2*15*127 = 3810, so the 8 pairs of a block (low and high
//    nibbles of 4 groups) add up in int16 to at most 30480 before one `vpmaddwd` widens them.
#include <immintrin.h>

#include <cstring>

#include "kernels/kquant_kernels.h"
#include "kernels/matmul_driver.h"
#include "kernels/x86/matmul_avx2_loads.h"
#include "kernels/x86/x86_tables.h"

namespace keel::x86 {

namespace {

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 0x55));
  return _mm_cvtss_f32(m);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum8_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// acc_f += (d_w * d_a) * float(acc_i), per row lane.
inline __m256 scale_add(__m256 accf, __m256 dw, float da, __m256i acc) {
  return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(acc), accf);
}

void quantize_act_avx2(const float* x, uint32_t cols, ActBlock* out) {
  const uint32_t nb = act_blocks(cols);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (uint32_t b = 0; b < nb; ++b) {
    const uint32_t c0 = b * kQuantBlock;
    const uint32_t n = cols - c0 < kQuantBlock ? cols - c0 : kQuantBlock;
    float tail[kQuantBlock];
    const float* src = x + c0;
    if (n < kQuantBlock) {
      memset(tail, 0, sizeof(tail));
      memcpy(tail, src, n * sizeof(float));
      src = tail;
    }
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(src + 8 * k);
    const __m256 m01 = _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask));
    const __m256 m23 = _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask));
    const float amax = hmax8(_mm256_max_ps(m01, m23));
    // Non-finite activations (a corrupted model) are not converted: zeros and a NaN scale.
    const __m256 big = _mm256_set1_ps(3.4028235e38f);
    int finite = 0xff;
    for (int k = 0; k < 4; ++k)
      finite &= _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v[k], abs_mask), big, _CMP_LE_OQ));
    float d = 0.0f, id = 0.0f;
    if (finite != 0xff) {
      d = __builtin_nanf("");
      for (int k = 0; k < 4; ++k) v[k] = _mm256_setzero_ps();
    } else if (amax >= 1e-30f) {
      d = amax / 127.0f;
      id = 1.0f / d;
    }
    const __m256 vid = _mm256_set1_ps(id);
    __m256i i[4];
    for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));  // ties to even
    // Values are in [-127, 127]: the saturating packs are exact; the permute undoes their
    // per-128-bit-lane interleaving.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    ActBlock& blk = out[b];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.q), _mm256_permutevar8x32_epi32(p, order));
    blk.d = d;
    blk.sum = hsum8_epi32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
  }
}

inline void store_rows(float* y, __m256 lo, __m256 hi, uint32_t n_rows) {
  if (n_rows == kPanelRows) {
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  float tmp[kPanelRows];
  _mm256_storeu_ps(tmp, lo);
  _mm256_storeu_ps(tmp + 8, hi);
  for (uint32_t r = 0; r < n_rows; ++r) y[r] = tmp[r];
}

// One panel of Q8 against T tokens (token t's blocks at x + t * nb, output at y + t * y_stride).
template <int T>
void q8_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint32_t nb = pv.nb;
  const uint8_t* scales = pv.header;
  const uint8_t* quants = pv.quants;
  const __m256i bias = _mm256_set1_epi8(char(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 accf_lo[T], accf_hi[T];
  for (int t = 0; t < T; ++t) accf_lo[t] = accf_hi[t] = _mm256_setzero_ps();
  for (uint32_t b = 0; b < nb; ++b) {
    const __m256 dw_lo = load_f16x8(scales + b * 32);
    const __m256 dw_hi = load_f16x8(scales + b * 32 + 16);
    const uint8_t* qb = quants + uint64_t(b) * 512;
    __m256i acc_lo[T], acc_hi[T];
    for (int t = 0; t < T; ++t) acc_lo[t] = acc_hi[t] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i s0 = _mm256_xor_si256(loadu256(qb + g * 64), bias);
      const __m256i s1 = _mm256_xor_si256(loadu256(qb + g * 64 + 32), bias);
      const __m256i a0 = _mm256_abs_epi8(s0);
      const __m256i a1 = _mm256_abs_epi8(s1);
      for (int t = 0; t < T; ++t) {
        const __m256i av = bcast4(x[uint64_t(t) * nb + b].q + 4 * g);
        const __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(av, s0));
        const __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(av, s1));
        acc_lo[t] = _mm256_add_epi32(acc_lo[t], _mm256_madd_epi16(p0, ones));
        acc_hi[t] = _mm256_add_epi32(acc_hi[t], _mm256_madd_epi16(p1, ones));
      }
    }
    for (int t = 0; t < T; ++t) {
      const float da = x[uint64_t(t) * nb + b].d;
      accf_lo[t] = scale_add(accf_lo[t], dw_lo, da, acc_lo[t]);
      accf_hi[t] = scale_add(accf_hi[t], dw_hi, da, acc_hi[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + uint64_t(t) * y_stride, accf_lo[t], accf_hi[t], pv.n_rows);
}

// One panel of Q4 (kMin = false: value d * (u - 8)) or Q4M (kMin = true: value d * u + m).
template <int T, bool kMin>
void q4_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint32_t nb = pv.nb;
  const uint8_t* scales = pv.header;
  const uint8_t* mins = pv.header + uint64_t(nb) * 32;
  const uint8_t* quants = pv.quants;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 accf_lo[T], accf_hi[T];
  for (int t = 0; t < T; ++t) accf_lo[t] = accf_hi[t] = _mm256_setzero_ps();
  for (uint32_t b = 0; b < nb; ++b) {
    const __m256 dw_lo = load_f16x8(scales + b * 32);
    const __m256 dw_hi = load_f16x8(scales + b * 32 + 16);
    const uint8_t* qb = quants + uint64_t(b) * 256;
    __m256i p_lo[T], p_hi[T];  // int16 pair sums, |.| <= 30480
    for (int t = 0; t < T; ++t) p_lo[t] = p_hi[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i w0 = loadu256(qb + c * 64);
      const __m256i w1 = loadu256(qb + c * 64 + 32);
      const __m256i l0 = _mm256_and_si256(w0, low4);
      const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), low4);
      const __m256i l1 = _mm256_and_si256(w1, low4);
      const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), low4);
      for (int t = 0; t < T; ++t) {
        const int8_t* q = x[uint64_t(t) * nb + b].q;
        const __m256i al = bcast4(q + 8 * c);
        const __m256i ah = bcast4(q + 8 * c + 4);
        p_lo[t] =
            _mm256_add_epi16(p_lo[t], _mm256_add_epi16(_mm256_maddubs_epi16(l0, al), _mm256_maddubs_epi16(h0, ah)));
        p_hi[t] =
            _mm256_add_epi16(p_hi[t], _mm256_add_epi16(_mm256_maddubs_epi16(l1, al), _mm256_maddubs_epi16(h1, ah)));
      }
    }
    for (int t = 0; t < T; ++t) {
      const ActBlock& a = x[uint64_t(t) * nb + b];
      __m256i i_lo = _mm256_madd_epi16(p_lo[t], ones);
      __m256i i_hi = _mm256_madd_epi16(p_hi[t], ones);
      if constexpr (!kMin) {
        const __m256i zs = _mm256_set1_epi32(8 * a.sum);
        i_lo = _mm256_sub_epi32(i_lo, zs);
        i_hi = _mm256_sub_epi32(i_hi, zs);
      }
      accf_lo[t] = scale_add(accf_lo[t], dw_lo, a.d, i_lo);
      accf_hi[t] = scale_add(accf_hi[t], dw_hi, a.d, i_hi);
      if constexpr (kMin) {
        const __m256 da = _mm256_set1_ps(a.d);
        const __m256 sa = _mm256_cvtepi32_ps(_mm256_set1_epi32(a.sum));  // exact, as in the AVX-512 kernel
        accf_lo[t] = _mm256_fmadd_ps(_mm256_mul_ps(load_f16x8(mins + b * 32), da), sa, accf_lo[t]);
        accf_hi[t] = _mm256_fmadd_ps(_mm256_mul_ps(load_f16x8(mins + b * 32 + 16), da), sa, accf_hi[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + uint64_t(t) * y_stride, accf_lo[t], accf_hi[t], pv.n_rows);
}

// Q8, Q4 and Q4M under the shared panel walk (kernels/matmul_driver.h); the 5-bit and K-quant
// formats are matmul_wide_avx2's.
struct Avx2Quant {
  static constexpr bool handles(fb::DType dt) {
    return dt == fb::DType::Q8 || dt == fb::DType::Q4 || dt == fb::DType::Q4M;
  }
  static constexpr int tile(fb::DType) { return 4; }
  template <fb::DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    if constexpr (DT == fb::DType::Q8) {
      q8_panel<T>(pv, x, y, y_stride);
    } else {
      q4_panel<T, DT == fb::DType::Q4M>(pv, x, y, y_stride);
    }
  }
};

void matmul_avx2(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                 uint32_t panel_begin, uint32_t panel_end) {
  if (is_wide_quant(w.dtype)) return matmul_wide_avx2(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  matmul_panels<Avx2Quant>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

// The f32 vector of the float matmul (kernels/matmul_driver.h): 8 lanes, a scalar column tail.
struct Avx2F32 {
  using Vec = __m256;
  static constexpr uint32_t kLanes = 8;
  static constexpr bool kMaskedTail = false;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load_x(const float* p) { return _mm256_loadu_ps(p); }
  template <fb::DType DT>
  static Vec load_w(const uint8_t* row, uint32_t c) {
    if constexpr (DT == fb::DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
    } else if constexpr (DT == fb::DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
    } else {
      const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
  }
  static Vec fma(Vec w, Vec x, Vec acc) { return _mm256_fmadd_ps(w, x, acc); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static float hsum(Vec v) { return hsum8(v); }
};

constexpr MatmulKernels kAvx2 = {"avx2", quantize_act_avx2, matmul_avx2, matmul_float_rows<Avx2F32>};

}  // namespace

const MatmulKernels& matmul_avx2_table() { return kAvx2; }

}  // namespace keel::x86
