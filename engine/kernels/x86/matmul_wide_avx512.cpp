// AVX-512 VNNI kernels of the 5-bit and K-quant formats for several tokens (prefill and batched
// decode): one 64-byte quant group is 4 inputs of all 16 rows, and `vpdpbusd` (u8 x s8, sums
// of 4 products into int32, no saturation) takes the unsigned u directly, Q6K's zero point
// included: sum (u - 32) a = sum u a - 32 sum a over each 16-column half.
//
// Every float operation per row lane is the one the AVX2 kernel performs, in the same order, on
// the same exact integers, so a token's outputs are bit for bit the same whichever kernel (and
// however many tokens beside it) computed them.
#include "kernels/kquant_kernels.h"
#include "kernels/matmul_driver.h"
#include "kernels/x86/matmul_avx512_loads.h"
#include "model/weight_format.h"

namespace keel::x86 {

namespace {

using fb::DType;

inline __m512 load_u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512i load_i8x16(const uint8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int kBit, int kMask>
inline __m512i to_bit4(__m512i v) {
  __m512i s = v;
  if constexpr (kBit < 4) s = _mm512_slli_epi16(v, 4 - kBit);
  if constexpr (kBit > 4) s = _mm512_srli_epi16(v, kBit - 4);
  return _mm512_and_si512(s, _mm512_set1_epi8(char(kMask)));
}

// Chunk C of a block: acc[t] += sum over its 8 columns of u * q, for the 16 rows.
template <DType DT, int C, int T>
inline void chunk_dot(const uint8_t* qb, const __m512i hp[2], const ActBlock* x, uint32_t nb, uint32_t b,
                      __m512i acc[T]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i w = load512(qb + C * 64);
  __m512i lo = _mm512_and_si512(w, low4);
  __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
  if constexpr (high_bits(DT) == 1) {
    lo = _mm512_or_si512(lo, to_bit4<2 * C, 0x10>(hp[0]));
    hi = _mm512_or_si512(hi, to_bit4<2 * C + 1, 0x10>(hp[0]));
  } else if constexpr (high_bits(DT) == 2) {
    lo = _mm512_or_si512(lo, to_bit4<4 * (C % 2), 0x30>(hp[C / 2]));
    hi = _mm512_or_si512(hi, to_bit4<4 * (C % 2) + 2, 0x30>(hp[C / 2]));
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* q = x[uint64_t(t) * nb + b].q;
    acc[t] = _mm512_dpbusd_epi32(acc[t], lo, bcast4(q + 8 * C));
    acc[t] = _mm512_dpbusd_epi32(acc[t], hi, bcast4(q + 8 * C + 4));
  }
}

// Sum of q[0..15]: `vpsadbw` adds 8 unsigned bytes at a time, so the bytes are biased by 128.
inline int32_t sum16(const int8_t* q) {
  const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), _mm_set1_epi8(char(0x80)));
  const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
  return _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128;
}

template <DType DT, int T>
void wide_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint8_t* panel = pv.header;
  const uint32_t nb = pv.nb;
  constexpr uint32_t kQbb = quant_block_bytes(DT);
  const uint32_t ns = nb / (kSuperBlock / kQuantBlock);
  const uint8_t* quants = pv.quants;
  __m512 accf[T];
  for (int t = 0; t < T; ++t) accf[t] = _mm512_setzero_ps();
  __m512 dsb = _mm512_setzero_ps(), msb = dsb;
  for (uint32_t b = 0; b < nb; ++b) {
    const uint8_t* qb = quants + uint64_t(b) * kQbb;
    __m512i hp[2];
    if constexpr (high_bits(DT) >= 1) hp[0] = load512(qb + 256);
    if constexpr (high_bits(DT) == 2) hp[1] = load512(qb + 320);
    if constexpr (is_kquant(DT)) {
      if (b % 8 == 0) {
        dsb = load_f16x16(panel + (b / 8) * 32);
        if constexpr (DT != DType::Q6K) msb = load_f16x16(panel + uint64_t(ns) * 32 + (b / 8) * 32);
      }
    }
    __m512i acc01[T], acc23[T];
    for (int t = 0; t < T; ++t) acc01[t] = acc23[t] = _mm512_setzero_si512();
    chunk_dot<DT, 0, T>(qb, hp, x, nb, b, acc01);
    chunk_dot<DT, 1, T>(qb, hp, x, nb, b, acc01);
    chunk_dot<DT, 2, T>(qb, hp, x, nb, b, acc23);
    chunk_dot<DT, 3, T>(qb, hp, x, nb, b, acc23);
    if constexpr (DT == DType::Q6K) {
      const uint8_t* sc = panel + uint64_t(ns) * 32 + uint64_t(b) * 32;  // [2][16] int8
      const __m512i s0 = load_i8x16(sc), s1 = load_i8x16(sc + 16);
      for (int t = 0; t < T; ++t) {
        const ActBlock& a = x[uint64_t(t) * nb + b];
        const int32_t half0 = sum16(a.q);
        const __m512i i01 = _mm512_sub_epi32(acc01[t], _mm512_set1_epi32(32 * half0));
        const __m512i i23 = _mm512_sub_epi32(acc23[t], _mm512_set1_epi32(32 * (a.sum - half0)));
        const __m512i v = _mm512_add_epi32(_mm512_mullo_epi32(s0, i01), _mm512_mullo_epi32(s1, i23));
        accf[t] = _mm512_fmadd_ps(_mm512_mul_ps(dsb, _mm512_set1_ps(a.d)), _mm512_cvtepi32_ps(v), accf[t]);
      }
      continue;
    }
    __m512 s, m = _mm512_setzero_ps();
    if constexpr (is_kquant(DT)) {
      const uint8_t* sc = panel + uint64_t(ns) * 64 + uint64_t(b) * 16;
      s = _mm512_mul_ps(dsb, load_u8x16(sc));
      m = _mm512_mul_ps(msb, load_u8x16(sc + uint64_t(nb) * 16));
    } else {
      s = load_f16x16(panel + uint64_t(b) * 32);
      if constexpr (DT == DType::Q5M) m = load_f16x16(panel + uint64_t(nb) * 32 + uint64_t(b) * 32);
    }
    for (int t = 0; t < T; ++t) {
      const ActBlock& a = x[uint64_t(t) * nb + b];
      const __m512 da = _mm512_set1_ps(a.d);
      __m512i v = _mm512_add_epi32(acc01[t], acc23[t]);
      if constexpr (DT == DType::Q5) v = _mm512_sub_epi32(v, _mm512_set1_epi32(16 * a.sum));
      accf[t] = _mm512_fmadd_ps(_mm512_mul_ps(s, da), _mm512_cvtepi32_ps(v), accf[t]);
      if constexpr (DT == DType::Q5M) {
        accf[t] = _mm512_fmadd_ps(_mm512_mul_ps(m, da), _mm512_set1_ps(float(a.sum)), accf[t]);
      } else if constexpr (is_kquant(DT)) {
        accf[t] = _mm512_fnmadd_ps(_mm512_mul_ps(m, da), _mm512_set1_ps(float(a.sum)), accf[t]);
      }
    }
  }
  const __mmask16 rows_mask = __mmask16((1u << pv.n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + uint64_t(t) * y_stride, rows_mask, accf[t]);
}

// The panel walk is kernels/matmul_driver.h's.
struct Avx512Wide {
  static constexpr bool handles(DType dt) { return is_wide_quant(dt); }
  static constexpr int tile(DType) { return 8; }
  template <DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    wide_panel<DT, T>(pv, x, y, y_stride);
  }
};

}  // namespace

void matmul_wide_avx512(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                        uint32_t panel_begin, uint32_t panel_end) {
  matmul_panels<Avx512Wide>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::x86
