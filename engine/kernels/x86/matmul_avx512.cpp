// AVX-512 VNNI kernels. One 64-byte quant load holds 4 inputs of the 16 rows of a panel (Q8),
// or 4 + 4 inputs after splitting nibbles (Q4, Q4M), so `vpdpbusd` (u8 weight x s8 activation,
// sums of 4 products into int32, no saturation) accumulates all 16 rows per instruction. The
// zero point enters once per block: the int32 accumulator starts at -z * sum(q_a).
//
// The panels and tiles of tokens are walked by kernels/matmul_driver.h; with several tokens
// every quant load feeds the up to 8 tokens of a tile.

#include "kernels/kquant_kernels.h"
#include "kernels/matmul_driver.h"
#include "kernels/x86/matmul_avx512_loads.h"
#include "kernels/x86/x86_tables.h"

namespace keel::x86 {

namespace {

// Multi-token prefetch distances in Q4 weight bytes (Q8: twice as far): a block with several
// tokens takes long enough that the hardware prefetcher's lead no longer hides the latency of
// L3 or DRAM. Far ahead into L2 (its queue holds many more misses than L1's fill buffers), near
// ahead into L1 (docs/performance.md, "Many sequences at once").
constexpr uint64_t kPrefetchL2Bytes = 8192;
constexpr uint64_t kPrefetchL1Bytes = 1024;

// The prefetches for one block of `lines` cache lines at qb.
inline void prefetch_block(const uint8_t* qb, int lines, uint64_t scale) {
  for (int line = 0; line < lines; ++line) {
    _mm_prefetch(reinterpret_cast<const char*>(qb + scale * kPrefetchL2Bytes + line * 64), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(qb + scale * kPrefetchL1Bytes + line * 64), _MM_HINT_T0);
  }
}

// One token's Q4 / Q4M block: unpacking nibbles costs enough per byte that the hardware
// prefetcher alone leaves the quant loads waiting on DRAM. Asking for the block's 4 lines 8
// blocks (2 KiB) ahead, into L1 only, measured best (DRAM-cold, one thread, docs/performance.md
// "One token of Q4 and Q4M"); nearer, farther, or into L2 as well (as prefetch_block) read slower.
constexpr uint64_t kDecodePrefetchBytes = 2048;
inline void prefetch_decode_block(const uint8_t* qb) {
  for (int line = 0; line < 4; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(qb + kDecodePrefetchBytes + line * 64), _MM_HINT_T0);
}

// acc_f += (d_w * d_a) * float(acc_i), per row lane.
inline __m512 scale_add(__m512 accf, __m512 dw, float da, __m512i acc) {
  return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(acc), accf);
}

void quantize_act_avx512(const float* x, uint32_t cols, ActBlock* out) {
  const uint32_t nb = act_blocks(cols);
  for (uint32_t b = 0; b < nb; ++b) {
    const uint32_t c0 = b * kQuantBlock;
    const uint32_t n = cols - c0 < kQuantBlock ? cols - c0 : kQuantBlock;
    const __mmask16 m0 = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? __mmask16(0xffff) : n > 16 ? __mmask16((1u << (n - 16)) - 1) : __mmask16(0);
    __m512 v0 = _mm512_maskz_loadu_ps(m0, x + c0);
    __m512 v1 = _mm512_maskz_loadu_ps(m1, x + c0 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    // Non-finite activations (a corrupted model) are not converted: zeros and a NaN scale.
    const __m512 big = _mm512_set1_ps(3.4028235e38f);
    const bool finite = _mm512_cmp_ps_mask(_mm512_abs_ps(v0), big, _CMP_LE_OQ) == 0xffff &&
                        _mm512_cmp_ps_mask(_mm512_abs_ps(v1), big, _CMP_LE_OQ) == 0xffff;
    float d = 0.0f, id = 0.0f;
    if (!finite) {
      d = __builtin_nanf("");
      v0 = v1 = _mm512_setzero_ps();
    } else if (amax >= 1e-30f) {
      d = amax / 127.0f;
      id = 1.0f / d;
    }
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));  // ties to even
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    ActBlock& blk = out[b];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.q), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.q + 16), _mm512_cvtepi32_epi8(i1));
    blk.d = d;
    blk.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  }
}

// The rows of the panel that exist, of every token of the tile.
template <int T>
inline void store_rows(const PanelView& pv, float* y, uint32_t y_stride, const __m512 (&accf)[T]) {
  const __mmask16 rows_mask = __mmask16((1u << pv.n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + uint64_t(t) * y_stride, rows_mask, accf[t]);
}

// One panel of Q8 against T tokens. x: token t's blocks at x + t * nb; y: token t at
// y + t * y_stride (already offset to the panel's first row).
template <int T>
void q8_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint32_t nb = pv.nb;
  const uint8_t* scales = pv.header;
  const uint8_t* quants = pv.quants;
  __m512 accf[T];
  for (int t = 0; t < T; ++t) accf[t] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nb; ++b) {
    const __m512 dw = load_f16x16(scales + b * 32);
    const uint8_t* qb = quants + uint64_t(b) * 512;
    if constexpr (T == 1) {
      // Two independent chains so consecutive vpdpbusd do not wait on each other.
      const ActBlock& a = x[b];
      __m512i acc0 = _mm512_set1_epi32(-128 * a.sum);
      __m512i acc1 = _mm512_setzero_si512();
      for (int g = 0; g < 8; g += 2) {
        acc0 = _mm512_dpbusd_epi32(acc0, load512(qb + g * 64), bcast4(a.q + 4 * g));
        acc1 = _mm512_dpbusd_epi32(acc1, load512(qb + g * 64 + 64), bcast4(a.q + 4 * g + 4));
      }
      accf[0] = scale_add(accf[0], dw, a.d, _mm512_add_epi32(acc0, acc1));
    } else {
      __m512i acc[T];
      prefetch_block(qb, 8, 2);  // as in q4_panel
      for (int t = 0; t < T; ++t) acc[t] = _mm512_set1_epi32(-128 * x[uint64_t(t) * nb + b].sum);
      for (int g = 0; g < 8; ++g) {
        const __m512i w = load512(qb + g * 64);
        for (int t = 0; t < T; ++t) acc[t] = _mm512_dpbusd_epi32(acc[t], w, bcast4(x[uint64_t(t) * nb + b].q + 4 * g));
      }
      for (int t = 0; t < T; ++t) accf[t] = scale_add(accf[t], dw, x[uint64_t(t) * nb + b].d, acc[t]);
    }
  }
  store_rows(pv, y, y_stride, accf);
}

// One panel of Q4 (kMin = false: value d * (u - 8)) or Q4M (kMin = true: value d * u + m).
template <int T, bool kMin>
void q4_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint32_t nb = pv.nb;
  const uint8_t* scales = pv.header;
  const uint8_t* mins = pv.header + uint64_t(nb) * 32;
  const uint8_t* quants = pv.quants;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // Every lane adds block b's scaled sum and then its min term, in the order the 256-bit kernel
  // does: a token's result is then bit for bit the same whichever kernel multiplied it, alone or
  // beside others (batched decode, llm/scheduler.h).
  __m512 accf[T];
  for (int t = 0; t < T; ++t) accf[t] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nb; ++b) {
    const __m512 dw = load_f16x16(scales + b * 32);
    const uint8_t* qb = quants + uint64_t(b) * 256;
    __m512i acc[T];
    if constexpr (T == 1) {
      prefetch_decode_block(qb);
      const ActBlock& a = x[b];
      __m512i acc_lo = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-8 * a.sum);
      __m512i acc_hi = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i w = load512(qb + c * 64);
        const __m512i lo = _mm512_and_si512(w, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
        acc_lo = _mm512_dpbusd_epi32(acc_lo, lo, bcast4(a.q + 8 * c));
        acc_hi = _mm512_dpbusd_epi32(acc_hi, hi, bcast4(a.q + 8 * c + 4));
      }
      acc[0] = _mm512_add_epi32(acc_lo, acc_hi);
    } else {
      // Several tokens spend long enough on a block that the hardware prefetcher's lead no longer
      // hides the latency: ask for the weights ahead (past the panel's end that is the next
      // panel, which follows it in memory).
      prefetch_block(qb, 4, 1);
      for (int t = 0; t < T; ++t)
        acc[t] = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-8 * x[uint64_t(t) * nb + b].sum);
      for (int c = 0; c < 4; ++c) {
        const __m512i w = load512(qb + c * 64);
        const __m512i lo = _mm512_and_si512(w, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
        for (int t = 0; t < T; ++t) {
          const int8_t* q = x[uint64_t(t) * nb + b].q;
          acc[t] = _mm512_dpbusd_epi32(acc[t], lo, bcast4(q + 8 * c));
          acc[t] = _mm512_dpbusd_epi32(acc[t], hi, bcast4(q + 8 * c + 4));
        }
      }
    }
    if constexpr (kMin) {
      const __m512 mw = load_f16x16(mins + b * 32);
      for (int t = 0; t < T; ++t) {
        const ActBlock& a = x[uint64_t(t) * nb + b];
        const __m512 da = _mm512_set1_ps(a.d);
        accf[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(acc[t]), accf[t]);
        // float(sum) exactly (|sum| <= 32 * 127), converted in the vector unit from a broadcast
        // load: one operation instead of a scalar conversion and a broadcast.
        accf[t] = _mm512_fmadd_ps(_mm512_mul_ps(mw, da), _mm512_cvtepi32_ps(_mm512_set1_epi32(a.sum)), accf[t]);
      }
    } else {
      for (int t = 0; t < T; ++t) accf[t] = scale_add(accf[t], dw, x[uint64_t(t) * nb + b].d, acc[t]);
    }
  }
  store_rows(pv, y, y_stride, accf);
}

// Decode (one token) of F32 weights runs the 256-bit kernel of the AVX2 table: single-thread
// DRAM-cold on Zen 4 (which executes 512-bit ops as two 256-bit halves) it reaches ~105% of the
// plain-read ceiling against ~90% for the 512-bit version (tools/bench_kernels/kernel_bench.cpp).
// Q4M ran there too until prefetch_decode_block: the 512-bit kernel now reads more of the ceiling
// (docs/performance.md, "One token of Q4 and Q4M"). Q8, Q4, F16 and BF16 measured even or better
// at 512 bits. With several tokens the 512-bit kernels win by far.
bool decode_prefers_256(fb::DType dt, uint32_t n_tokens) { return n_tokens == 1 && dt == fb::DType::F32; }

// Q8, Q4 and Q4M under the shared panel walk; the 5-bit and K-quant formats are
// matmul_wide_avx512's.
struct Avx512Quant {
  static constexpr bool handles(fb::DType dt) {
    return dt == fb::DType::Q8 || dt == fb::DType::Q4 || dt == fb::DType::Q4M;
  }
  static constexpr int tile(fb::DType) { return 8; }
  template <fb::DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    if constexpr (DT == fb::DType::Q8) {
      q8_panel<T>(pv, x, y, y_stride);
    } else {
      q4_panel<T, DT == fb::DType::Q4M>(pv, x, y, y_stride);
    }
  }
};

void matmul_avx512(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                   uint32_t panel_begin, uint32_t panel_end) {
  // The 512-bit kernels of the 5-bit and K-quant formats beat their 256-bit ones at one token
  // too (docs/performance.md, "Every quantized format").
  if (is_wide_quant(w.dtype)) return matmul_wide_avx512(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  if (decode_prefers_256(w.dtype, n_tokens))
    return matmul_avx2_table().matmul(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  matmul_panels<Avx512Quant>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

// The f32 vector of the float matmul (kernels/matmul_driver.h): 16 lanes, the column tail read
// with masked loads (nothing past it is touched).
struct Avx512F32 {
  using Vec = __m512;
  static constexpr uint32_t kLanes = 16;
  static constexpr bool kMaskedTail = true;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load_x(const float* p) { return _mm512_loadu_ps(p); }
  static __mmask16 mask(uint32_t n) { return __mmask16((1u << n) - 1); }
  static Vec load_x_tail(const float* p, uint32_t n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  template <fb::DType DT>
  static Vec load_w(const uint8_t* row, uint32_t c) {
    if constexpr (DT == fb::DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
    } else if constexpr (DT == fb::DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
    } else {
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
  }
  template <fb::DType DT>
  static Vec load_w_tail(const uint8_t* row, uint32_t c, uint32_t n) {
    if constexpr (DT == fb::DType::F32) {
      return _mm512_maskz_loadu_ps(mask(n), reinterpret_cast<const float*>(row) + c);
    } else if constexpr (DT == fb::DType::F16) {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), row + 2 * c));
    } else {
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask(n), row + 2 * c));
      return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
  }
  static Vec fma(Vec w, Vec x, Vec acc) { return _mm512_fmadd_ps(w, x, acc); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static float hsum(Vec v) { return _mm512_reduce_add_ps(v); }
};

void matmul_f_avx512(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                     uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end) {
  if (decode_prefers_256(w.dtype, n_tokens))
    return matmul_avx2_table().matmul_f(w, x, n_tokens, x_stride, y, y_stride, panel_begin, panel_end);
  matmul_float_rows<Avx512F32>(w, x, n_tokens, x_stride, y, y_stride, panel_begin, panel_end);
}

constexpr MatmulKernels kAvx512 = {"avx512vnni", quantize_act_avx512, matmul_avx512, matmul_f_avx512};

}  // namespace

const MatmulKernels& matmul_avx512_table() { return kAvx512; }

}  // namespace keel::x86
