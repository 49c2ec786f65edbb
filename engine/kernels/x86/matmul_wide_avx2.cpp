// AVX2 kernels of the 5-bit and K-quant formats (Q5, Q5M, Q4K, Q5K, Q6K), over the panels of
// docs/format.md: a 64-byte group is two 32-byte halves (rows 0-7 and 8-15). Each block's
// nibbles get their high bits from the plane that follows them (shifted into bit 4, or bits 4-5),
// then `vpmaddubsw` multiplies them as in the Q4 kernel.
//
// int16 bounds of `vpmaddubsw`: a pair of 5-bit u (<= 31) is at most 2 * 31 * 127 = 7874, so the
// four pairs of two chunks (16 columns) sum to at most 31496 before `vpmaddwd` widens them. Q6K
// feeds |u - 32| <= 32 against sign(a, u - 32) (the Q8 trick): 4 * 2 * 32 * 127 = 32512. Each
// block therefore gives two int32 sums per row, columns 0-15 and 16-31: Q6K's two sub-blocks.
#include <immintrin.h>

#include "kernels/kquant_kernels.h"
#include "kernels/matmul_driver.h"
#include "kernels/x86/matmul_avx2_loads.h"
#include "model/weight_format.h"

namespace keel::x86 {

namespace {

using fb::DType;

inline __m256 load_u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256i load_i8x8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Moves bit kBit (and kBit + 1 for kMask 0x30) of every byte to bit 4 (and 5). 16-bit shifts
// carry bits across the byte boundary only into positions the mask clears.
template <int kBit, int kMask>
inline __m256i to_bit4(__m256i v) {
  __m256i s = v;
  if constexpr (kBit < 4) s = _mm256_slli_epi16(v, 4 - kBit);
  if constexpr (kBit > 4) s = _mm256_srli_epi16(v, kBit - 4);
  return _mm256_and_si256(s, _mm256_set1_epi8(char(kMask)));
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

// The 8 u vectors (4 chunks x rows 0-7 / 8-15, low then high nibble) of chunk C of a block.
template <DType DT, int C>
inline void chunk_u(const uint8_t* qb, const __m256i hp[4], __m256i u[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i w0 = loadu256(qb + C * 64);
  const __m256i w1 = loadu256(qb + C * 64 + 32);
  u[0] = _mm256_and_si256(w0, low4);
  u[1] = _mm256_and_si256(_mm256_srli_epi16(w0, 4), low4);
  u[2] = _mm256_and_si256(w1, low4);
  u[3] = _mm256_and_si256(_mm256_srli_epi16(w1, 4), low4);
  if constexpr (high_bits(DT) == 1) {
    u[0] = _mm256_or_si256(u[0], to_bit4<2 * C, 0x10>(hp[0]));
    u[1] = _mm256_or_si256(u[1], to_bit4<2 * C + 1, 0x10>(hp[0]));
    u[2] = _mm256_or_si256(u[2], to_bit4<2 * C, 0x10>(hp[1]));
    u[3] = _mm256_or_si256(u[3], to_bit4<2 * C + 1, 0x10>(hp[1]));
  } else if constexpr (high_bits(DT) == 2) {
    constexpr int k = C / 2;
    u[0] = _mm256_or_si256(u[0], to_bit4<4 * (C % 2), 0x30>(hp[2 * k]));
    u[1] = _mm256_or_si256(u[1], to_bit4<4 * (C % 2) + 2, 0x30>(hp[2 * k]));
    u[2] = _mm256_or_si256(u[2], to_bit4<4 * (C % 2), 0x30>(hp[2 * k + 1]));
    u[3] = _mm256_or_si256(u[3], to_bit4<4 * (C % 2) + 2, 0x30>(hp[2 * k + 1]));
  }
}

// Adds chunk C's products for T tokens into the int16 pair sums p_lo / p_hi (rows 0-7 / 8-15).
template <DType DT, int C, int T>
inline void chunk_dot(const uint8_t* qb, const __m256i hp[4], const ActBlock* x, uint32_t nb, uint32_t b,
                      __m256i p_lo[T], __m256i p_hi[T]) {
  __m256i u[4];
  chunk_u<DT, C>(qb, hp, u);
  if constexpr (DT == DType::Q6K) {
    const __m256i z = _mm256_set1_epi8(32);
    __m256i s[4], a[4];
    for (int i = 0; i < 4; ++i) {
      s[i] = _mm256_sub_epi8(u[i], z);
      a[i] = _mm256_abs_epi8(s[i]);
    }
    for (int t = 0; t < T; ++t) {
      const int8_t* q = x[uint64_t(t) * nb + b].q;
      const __m256i al = bcast4(q + 8 * C), ah = bcast4(q + 8 * C + 4);
      p_lo[t] = _mm256_add_epi16(p_lo[t], _mm256_add_epi16(_mm256_maddubs_epi16(a[0], _mm256_sign_epi8(al, s[0])),
                                                           _mm256_maddubs_epi16(a[1], _mm256_sign_epi8(ah, s[1]))));
      p_hi[t] = _mm256_add_epi16(p_hi[t], _mm256_add_epi16(_mm256_maddubs_epi16(a[2], _mm256_sign_epi8(al, s[2])),
                                                           _mm256_maddubs_epi16(a[3], _mm256_sign_epi8(ah, s[3]))));
    }
  } else {
    for (int t = 0; t < T; ++t) {
      const int8_t* q = x[uint64_t(t) * nb + b].q;
      const __m256i al = bcast4(q + 8 * C), ah = bcast4(q + 8 * C + 4);
      p_lo[t] =
          _mm256_add_epi16(p_lo[t], _mm256_add_epi16(_mm256_maddubs_epi16(u[0], al), _mm256_maddubs_epi16(u[1], ah)));
      p_hi[t] =
          _mm256_add_epi16(p_hi[t], _mm256_add_epi16(_mm256_maddubs_epi16(u[2], al), _mm256_maddubs_epi16(u[3], ah)));
    }
  }
}

template <DType DT, int T>
void wide_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint8_t* panel = pv.header;
  const uint32_t nb = pv.nb;
  constexpr uint32_t kQbb = quant_block_bytes(DT);
  const uint32_t ns = nb / (kSuperBlock / kQuantBlock);
  const uint8_t* quants = pv.quants;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 accf_lo[T], accf_hi[T];
  for (int t = 0; t < T; ++t) accf_lo[t] = accf_hi[t] = _mm256_setzero_ps();
  __m256 dsb_lo = _mm256_setzero_ps(), dsb_hi = dsb_lo, msb_lo = dsb_lo, msb_hi = dsb_lo;
  for (uint32_t b = 0; b < nb; ++b) {
    const uint8_t* qb = quants + uint64_t(b) * kQbb;
    __m256i hp[4];
    if constexpr (high_bits(DT) >= 1) {
      hp[0] = loadu256(qb + 256);
      hp[1] = loadu256(qb + 256 + 32);
    }
    if constexpr (high_bits(DT) == 2) {
      hp[2] = loadu256(qb + 256 + 64);
      hp[3] = loadu256(qb + 256 + 96);
    }
    __m256i i01_lo[T], i01_hi[T], i23_lo[T], i23_hi[T];
    {
      __m256i p_lo[T], p_hi[T];
      for (int t = 0; t < T; ++t) p_lo[t] = p_hi[t] = _mm256_setzero_si256();
      chunk_dot<DT, 0, T>(qb, hp, x, nb, b, p_lo, p_hi);
      chunk_dot<DT, 1, T>(qb, hp, x, nb, b, p_lo, p_hi);
      for (int t = 0; t < T; ++t) {
        i01_lo[t] = _mm256_madd_epi16(p_lo[t], ones);
        i01_hi[t] = _mm256_madd_epi16(p_hi[t], ones);
        p_lo[t] = p_hi[t] = _mm256_setzero_si256();
      }
      chunk_dot<DT, 2, T>(qb, hp, x, nb, b, p_lo, p_hi);
      chunk_dot<DT, 3, T>(qb, hp, x, nb, b, p_lo, p_hi);
      for (int t = 0; t < T; ++t) {
        i23_lo[t] = _mm256_madd_epi16(p_lo[t], ones);
        i23_hi[t] = _mm256_madd_epi16(p_hi[t], ones);
      }
    }
    if constexpr (DT == DType::Q6K) {
      if (b % 8 == 0) {
        dsb_lo = load_f16x8(panel + (b / 8) * 32);
        dsb_hi = load_f16x8(panel + (b / 8) * 32 + 16);
      }
      const uint8_t* sc = panel + uint64_t(ns) * 32 + uint64_t(b) * 32;  // [2][16] int8
      const __m256i s0_lo = load_i8x8(sc), s0_hi = load_i8x8(sc + 8);
      const __m256i s1_lo = load_i8x8(sc + 16), s1_hi = load_i8x8(sc + 24);
      for (int t = 0; t < T; ++t) {
        const __m256 da = _mm256_set1_ps(x[uint64_t(t) * nb + b].d);
        const __m256i v_lo =
            _mm256_add_epi32(_mm256_mullo_epi32(s0_lo, i01_lo[t]), _mm256_mullo_epi32(s1_lo, i23_lo[t]));
        const __m256i v_hi =
            _mm256_add_epi32(_mm256_mullo_epi32(s0_hi, i01_hi[t]), _mm256_mullo_epi32(s1_hi, i23_hi[t]));
        accf_lo[t] = _mm256_fmadd_ps(_mm256_mul_ps(dsb_lo, da), _mm256_cvtepi32_ps(v_lo), accf_lo[t]);
        accf_hi[t] = _mm256_fmadd_ps(_mm256_mul_ps(dsb_hi, da), _mm256_cvtepi32_ps(v_hi), accf_hi[t]);
      }
      continue;
    }
    // Per-row multipliers of isum * d_a (s) and of sum_a * d_a (m).
    __m256 s_lo, s_hi, m_lo = _mm256_setzero_ps(), m_hi = m_lo;
    if constexpr (is_kquant(DT)) {
      if (b % 8 == 0) {
        dsb_lo = load_f16x8(panel + (b / 8) * 32);
        dsb_hi = load_f16x8(panel + (b / 8) * 32 + 16);
        msb_lo = load_f16x8(panel + uint64_t(ns) * 32 + (b / 8) * 32);
        msb_hi = load_f16x8(panel + uint64_t(ns) * 32 + (b / 8) * 32 + 16);
      }
      const uint8_t* sc = panel + uint64_t(ns) * 64 + uint64_t(b) * 16;
      const uint8_t* mn = sc + uint64_t(nb) * 16;
      s_lo = _mm256_mul_ps(dsb_lo, load_u8x8(sc));
      s_hi = _mm256_mul_ps(dsb_hi, load_u8x8(sc + 8));
      m_lo = _mm256_mul_ps(msb_lo, load_u8x8(mn));
      m_hi = _mm256_mul_ps(msb_hi, load_u8x8(mn + 8));
    } else {
      s_lo = load_f16x8(panel + uint64_t(b) * 32);
      s_hi = load_f16x8(panel + uint64_t(b) * 32 + 16);
      if constexpr (DT == DType::Q5M) {
        m_lo = load_f16x8(panel + uint64_t(nb) * 32 + uint64_t(b) * 32);
        m_hi = load_f16x8(panel + uint64_t(nb) * 32 + uint64_t(b) * 32 + 16);
      }
    }
    for (int t = 0; t < T; ++t) {
      const ActBlock& a = x[uint64_t(t) * nb + b];
      const __m256 da = _mm256_set1_ps(a.d);
      __m256i v_lo = _mm256_add_epi32(i01_lo[t], i23_lo[t]);
      __m256i v_hi = _mm256_add_epi32(i01_hi[t], i23_hi[t]);
      if constexpr (DT == DType::Q5) {
        const __m256i zs = _mm256_set1_epi32(16 * a.sum);
        v_lo = _mm256_sub_epi32(v_lo, zs);
        v_hi = _mm256_sub_epi32(v_hi, zs);
      }
      accf_lo[t] = _mm256_fmadd_ps(_mm256_mul_ps(s_lo, da), _mm256_cvtepi32_ps(v_lo), accf_lo[t]);
      accf_hi[t] = _mm256_fmadd_ps(_mm256_mul_ps(s_hi, da), _mm256_cvtepi32_ps(v_hi), accf_hi[t]);
      if constexpr (DT == DType::Q5M) {
        const __m256 sa = _mm256_set1_ps(float(a.sum));
        accf_lo[t] = _mm256_fmadd_ps(_mm256_mul_ps(m_lo, da), sa, accf_lo[t]);
        accf_hi[t] = _mm256_fmadd_ps(_mm256_mul_ps(m_hi, da), sa, accf_hi[t]);
      } else if constexpr (is_kquant(DT)) {
        const __m256 sa = _mm256_set1_ps(float(a.sum));
        accf_lo[t] = _mm256_fnmadd_ps(_mm256_mul_ps(m_lo, da), sa, accf_lo[t]);
        accf_hi[t] = _mm256_fnmadd_ps(_mm256_mul_ps(m_hi, da), sa, accf_hi[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + uint64_t(t) * y_stride, accf_lo[t], accf_hi[t], pv.n_rows);
}

// The panel walk is kernels/matmul_driver.h's.
struct Avx2Wide {
  static constexpr bool handles(DType dt) { return is_wide_quant(dt); }
  static constexpr int tile(DType) { return 4; }
  template <DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    wide_panel<DT, T>(pv, x, y, y_stride);
  }
};

}  // namespace

void matmul_wide_avx2(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                      uint32_t panel_begin, uint32_t panel_end) {
  matmul_panels<Avx2Wide>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::x86
