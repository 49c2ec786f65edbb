// AVX-512 VNNI kernels. One 64-byte quant load holds 4 inputs of the 16 rows of a panel (Q8),
// or 4 + 4 inputs after splitting nibbles (Q4, Q4M), so `vpdpbusd` (u8 weight x s8 activation,
// sums of 4 products into int32, no saturation) accumulates all 16 rows per instruction. The
// zero point enters once per block: the int32 accumulator starts at -z * sum(q_a).
//
// Decode (one token) streams each panel once, front to back. With several tokens a panel is
// loaded once per tile of up to kTileTokens tokens and every load feeds all of them; a panel
// (~10 KB at 576 columns) stays in L1/L2 across tiles.

#include <cstring>

#include "kernels/kernels.h"
#include "kernels/x86/avx512_intrin.h"
#include "kernels/kquant_kernels.h"
#include "kernels/x86/x86_tables.h"

namespace keel::x86 {

namespace {

constexpr uint32_t kTileTokens = 8;
constexpr uint32_t kFloatTileTokens = 4;
constexpr uint64_t kPrefetchAheadBytes = 1024;

inline int32_t load_i32(const void* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

inline __m512 load_scales(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i load_quants(const uint8_t* p) { return _mm512_loadu_si512(reinterpret_cast<const void*>(p)); }

inline __m512i bcast4(const int8_t* q) { return _mm512_set1_epi32(load_i32(q)); }

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

// One panel of Q8 against T tokens. x: token t's blocks at x + t * nb; y: token t at
// y + t * y_stride (already offset to the panel's first row).
template <int T>
void q8_panel(const uint8_t* panel, uint32_t nb, uint64_t qoff, const ActBlock* x, float* y, uint32_t y_stride,
              __mmask16 rows_mask) {
  const uint8_t* scales = panel;
  const uint8_t* quants = panel + qoff;
  __m512 accf[T];
  for (int t = 0; t < T; ++t) accf[t] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nb; ++b) {
    const __m512 dw = load_scales(scales + b * 32);
    const uint8_t* qb = quants + uint64_t(b) * 512;
    if constexpr (T == 1) {
      // Two independent chains so consecutive vpdpbusd do not wait on each other.
      const ActBlock& a = x[b];
      __m512i acc0 = _mm512_set1_epi32(-128 * a.sum);
      __m512i acc1 = _mm512_setzero_si512();
      for (int g = 0; g < 8; g += 2) {
        acc0 = _mm512_dpbusd_epi32(acc0, load_quants(qb + g * 64), bcast4(a.q + 4 * g));
        acc1 = _mm512_dpbusd_epi32(acc1, load_quants(qb + g * 64 + 64), bcast4(a.q + 4 * g + 4));
      }
      accf[0] = scale_add(accf[0], dw, a.d, _mm512_add_epi32(acc0, acc1));
    } else {
      __m512i acc[T];
      for (int line = 0; line < 8; ++line)  // as in q4_panel
        _mm_prefetch(reinterpret_cast<const char*>(qb + 2 * kPrefetchAheadBytes + line * 64), _MM_HINT_T0);
      for (int t = 0; t < T; ++t) acc[t] = _mm512_set1_epi32(-128 * x[uint64_t(t) * nb + b].sum);
      for (int g = 0; g < 8; ++g) {
        const __m512i w = load_quants(qb + g * 64);
        for (int t = 0; t < T; ++t) acc[t] = _mm512_dpbusd_epi32(acc[t], w, bcast4(x[uint64_t(t) * nb + b].q + 4 * g));
      }
      for (int t = 0; t < T; ++t) accf[t] = scale_add(accf[t], dw, x[uint64_t(t) * nb + b].d, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + uint64_t(t) * y_stride, rows_mask, accf[t]);
}

// One panel of Q4 (kMin = false: value d * (u - 8)) or Q4M (kMin = true: value d * u + m).
template <int T, bool kMin>
void q4_panel(const uint8_t* panel, uint32_t nb, uint64_t qoff, const ActBlock* x, float* y, uint32_t y_stride,
              __mmask16 rows_mask) {
  const uint8_t* scales = panel;
  const uint8_t* mins = panel + uint64_t(nb) * 32;
  const uint8_t* quants = panel + qoff;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // Every lane adds block b's scaled sum and then its min term, in the order the 256-bit kernel
  // (which runs Q4M decode, see decode_prefers_256) does: a token's result is then bit for bit
  // the same whether it is multiplied alone or beside others (batched decode, llm/scheduler.h).
  __m512 accf[T];
  for (int t = 0; t < T; ++t) accf[t] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nb; ++b) {
    const __m512 dw = load_scales(scales + b * 32);
    const uint8_t* qb = quants + uint64_t(b) * 256;
    __m512i acc[T];
    if constexpr (T == 1) {
      const ActBlock& a = x[b];
      __m512i acc_lo = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-8 * a.sum);
      __m512i acc_hi = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i w = load_quants(qb + c * 64);
        const __m512i lo = _mm512_and_si512(w, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
        acc_lo = _mm512_dpbusd_epi32(acc_lo, lo, bcast4(a.q + 8 * c));
        acc_hi = _mm512_dpbusd_epi32(acc_hi, hi, bcast4(a.q + 8 * c + 4));
      }
      acc[0] = _mm512_add_epi32(acc_lo, acc_hi);
    } else {
      // Several tokens spend long enough on a block that the hardware prefetcher's lead no longer
      // hides DRAM latency: ask for the weights a few blocks ahead (past the panel's end that is
      // the next panel, which follows it in memory).
      for (int line = 0; line < 4; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(qb + kPrefetchAheadBytes + line * 64), _MM_HINT_T0);
      for (int t = 0; t < T; ++t)
        acc[t] = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-8 * x[uint64_t(t) * nb + b].sum);
      for (int c = 0; c < 4; ++c) {
        const __m512i w = load_quants(qb + c * 64);
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
      const __m512 mw = load_scales(mins + b * 32);
      for (int t = 0; t < T; ++t) {
        const ActBlock& a = x[uint64_t(t) * nb + b];
        accf[t] = scale_add(accf[t], dw, a.d, acc[t]);
        accf[t] = _mm512_fmadd_ps(_mm512_mul_ps(mw, _mm512_set1_ps(a.d)), _mm512_set1_ps(float(a.sum)), accf[t]);
      }
    } else {
      for (int t = 0; t < T; ++t) accf[t] = scale_add(accf[t], dw, x[uint64_t(t) * nb + b].d, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + uint64_t(t) * y_stride, rows_mask, accf[t]);
}

// The kernels read one scale line (and one min line) for every two blocks while streaming the
// quants: interleaved with the quant stream, those few lines near the panel start make the
// hardware stream prefetcher back off (measured: DRAM-cold Q8 1536x576 went from ~18 to ~30
// GB/s single-thread on the reference machine, and 49152x576 from ~4 to ~19). Fetching the
// whole header up front leaves one clean forward stream.
inline void prefetch_header(const uint8_t* panel, uint64_t header_bytes) {
  for (uint64_t o = 0; o < header_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(panel + o), _MM_HINT_T0);
}

template <int T>
void quant_panel(fb::DType dt, const uint8_t* panel, uint32_t nb, uint64_t qoff, const ActBlock* x, float* y,
                 uint32_t y_stride, __mmask16 rows_mask) {
  if (dt == fb::DType::Q8) {
    q8_panel<T>(panel, nb, qoff, x, y, y_stride, rows_mask);
  } else if (dt == fb::DType::Q4) {
    q4_panel<T, false>(panel, nb, qoff, x, y, y_stride, rows_mask);
  } else {
    q4_panel<T, true>(panel, nb, qoff, x, y, y_stride, rows_mask);
  }
}

// Decode (one token) of Q4M and F32 weights runs the 256-bit kernels of the AVX2 table: single-thread
// DRAM-cold on the reference machine (Zen 4, which executes 512-bit ops as two 256-bit halves) they
// reach ~85% (Q4M) and ~105% (F32) of the plain-read ceiling against ~70% and ~90% for the 512-bit
// versions (tools/bench_kernels/kernel_bench.cpp). With several tokens the 512-bit kernels win by far
// (Q4M 1536x576, 64 tokens: 6.6 vs 11.6 us per token), so prefill stays here. Q8, Q4, F16 and BF16
// measured even or better at 512 bits.
bool decode_prefers_256(fb::DType dt, uint32_t n_tokens) {
  return n_tokens == 1 && (dt == fb::DType::Q4M || dt == fb::DType::F32);
}

void matmul_avx512(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                   uint32_t panel_begin, uint32_t panel_end) {
  const fb::DType dt = w.dtype;
  if (!is_quantized(dt)) return;
  // The 512-bit kernels of the 5-bit and K-quant formats beat their 256-bit ones at one token
  // too (docs/performance.md, "Every quantized format").
  if (is_wide_quant(dt)) return matmul_wide_avx512(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  if (decode_prefers_256(dt, n_tokens)) {
    matmul_avx2_table().matmul(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
    return;
  }
  const uint32_t nb = act_blocks(w.cols);
  const uint64_t pbytes = panel_bytes(dt, w.cols);
  const uint64_t qoff = panel_quants_offset(dt, w.cols);
  for (uint32_t p = panel_begin; p < panel_end; ++p) {
    const uint8_t* panel = w.data + p * pbytes;
    prefetch_header(panel, qoff);
    const uint32_t r0 = p * kPanelRows;
    const uint32_t n_rows = w.rows - r0 < kPanelRows ? w.rows - r0 : kPanelRows;
    const __mmask16 mask = __mmask16((1u << n_rows) - 1);
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
      const uint32_t nt = n_tokens - t0 < kTileTokens ? n_tokens - t0 : kTileTokens;
      const ActBlock* xt = x + uint64_t(t0) * nb;
      float* yt = y + uint64_t(t0) * y_stride + r0;
      switch (nt) {
        case 1: quant_panel<1>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        case 2: quant_panel<2>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        case 3: quant_panel<3>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        case 4: quant_panel<4>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        case 5: quant_panel<5>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        case 6: quant_panel<6>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        case 7: quant_panel<7>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
        default: quant_panel<8>(dt, panel, nb, qoff, xt, yt, y_stride, mask); break;
      }
    }
  }
}

// ---- float weights, row-major ----

template <fb::DType DT>
inline __m512 load_w_full(const uint8_t* row, uint32_t c) {
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
inline __m512 load_w(const uint8_t* row, uint32_t c, __mmask16 m) {
  if constexpr (DT == fb::DType::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (DT == fb::DType::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * c));
  } else {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
}

// One weight row against T tokens, rows streamed one at a time (see matmul_avx2.cpp: several
// rows side by side measured 2-3x slower from DRAM). With one token, U independent
// accumulators hide the FMA latency. The column tail uses masked loads (no fault past it).
template <fb::DType DT, int T>
void float_row(const uint8_t* row, uint32_t cols, const float* x, uint32_t x_stride, float* y, uint32_t y_stride) {
  constexpr int U = T == 1 ? 4 : T == 2 ? 2 : 1;
  __m512 acc[T][U];
  for (int t = 0; t < T; ++t)
    for (int u = 0; u < U; ++u) acc[t][u] = _mm512_setzero_ps();
  uint32_t c = 0;
  for (; c + 16 * U <= cols; c += 16 * U) {
    for (int u = 0; u < U; ++u) {
      const __m512 wv = load_w_full<DT>(row, c + 16 * u);
      for (int t = 0; t < T; ++t)
        acc[t][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + uint64_t(t) * x_stride + c + 16 * u), acc[t][u]);
    }
  }
  for (; c < cols; c += 16) {
    const __mmask16 m = cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - c)) - 1);
    const __m512 wv = load_w<DT>(row, c, m);
    for (int t = 0; t < T; ++t)
      acc[t][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + uint64_t(t) * x_stride + c), acc[t][0]);
  }
  for (int t = 0; t < T; ++t) {
    for (int u = 1; u < U; ++u) acc[t][0] = _mm512_add_ps(acc[t][0], acc[t][u]);
    y[uint64_t(t) * y_stride] = _mm512_reduce_add_ps(acc[t][0]);
  }
}

template <fb::DType DT>
void matmul_float(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                  uint32_t y_stride, uint32_t r_begin, uint32_t r_end) {
  const uint64_t row_bytes = uint64_t(w.cols) * float_elem_bytes(DT);
  for (uint32_t r = r_begin; r < r_end; ++r) {
    const uint8_t* row = w.data + r * row_bytes;
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += kFloatTileTokens) {
      const uint32_t nt = n_tokens - t0 < kFloatTileTokens ? n_tokens - t0 : kFloatTileTokens;
      const float* xt = x + uint64_t(t0) * x_stride;
      float* yt = y + uint64_t(t0) * y_stride + r;
      switch (nt) {
        case 1: float_row<DT, 1>(row, w.cols, xt, x_stride, yt, y_stride); break;
        case 2: float_row<DT, 2>(row, w.cols, xt, x_stride, yt, y_stride); break;
        case 3: float_row<DT, 3>(row, w.cols, xt, x_stride, yt, y_stride); break;
        default: float_row<DT, 4>(row, w.cols, xt, x_stride, yt, y_stride); break;
      }
    }
  }
}

void matmul_f_avx512(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                     uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end) {
  if (decode_prefers_256(w.dtype, n_tokens)) {
    matmul_avx2_table().matmul_f(w, x, n_tokens, x_stride, y, y_stride, panel_begin, panel_end);
    return;
  }
  const uint32_t r_begin = panel_begin * kPanelRows;
  const uint32_t r_end = panel_end * kPanelRows < w.rows ? panel_end * kPanelRows : w.rows;
  if (r_begin >= r_end) return;
  switch (w.dtype) {
    case fb::DType::F32: matmul_float<fb::DType::F32>(w, x, n_tokens, x_stride, y, y_stride, r_begin, r_end); break;
    case fb::DType::F16: matmul_float<fb::DType::F16>(w, x, n_tokens, x_stride, y, y_stride, r_begin, r_end); break;
    case fb::DType::BF16: matmul_float<fb::DType::BF16>(w, x, n_tokens, x_stride, y, y_stride, r_begin, r_end); break;
    default: break;
  }
}

constexpr MatmulKernels kAvx512 = {"avx512vnni", quantize_act_avx512, matmul_avx512, matmul_f_avx512};

}  // namespace

const MatmulKernels& matmul_avx512_table() { return kAvx512; }

}  // namespace keel::x86
