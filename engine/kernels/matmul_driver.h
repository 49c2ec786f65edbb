// The loops every SIMD tier's matmul shares (x86 AVX2, AVX-512 VNNI; arm64 NEON, dotprod, i8mm):
// which panels or rows, tokens in tiles, the format chosen once per call. A tier supplies only
// microkernels: one panel against a tile of T tokens, or its f32 vector operations.
//
// Quantized weights (Panel16x4, docs/format.md): a tier's microkernel set is a type M with
//   static constexpr bool handles(fb::DType)   the formats it multiplies
//   static constexpr int tile(fb::DType)       tokens per pass over a panel (registers decide)
//   template <fb::DType DT, int T>
//   static void panel(const PanelView&, const ActBlock* x, float* y, uint32_t y_stride)
//       x: token t's blocks at x + t * nb; y: token t's 16 rows at y + t * y_stride, of which
//       the first n_rows exist.
// Each panel is read once per tile of tokens, front to back; a panel (~10 KB at 576 columns)
// stays in L1/L2 across the tiles of a prefill.
//
// Float weights (F32, F16, BF16, row-major): a tier's f32 vector is a type V with
//   V::Vec, kLanes, zero(), load_x(const float*), load_w<DT>(row, c), fma(w, x, acc), add(a, b),
//   hsum(v), and kMaskedTail: true if load_w_tail<DT>(row, c, n) / load_x_tail(p, n) read the
//   last n < kLanes columns (AVX-512 masks); otherwise the tail is added in scalar after hsum.
// Everything has internal linkage (see unrolled.h): each tier compiles its own copy.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/f16.h"
#include "kernels/kernels.h"
#include "kernels/unrolled.h"
#include "model/weight_format.h"

namespace keel {

// One panel of a Panel16x4 matrix as a microkernel reads it.
struct PanelView {
  const uint8_t* header;  // f16 scales [nb][16], then mins or sub-block scales (docs/format.md)
  const uint8_t* quants;  // [nb][quant_block_bytes]
  uint32_t nb;            // 32-column blocks per row
  uint32_t n_rows;        // rows of this panel that exist, 1..16 (the last panel may be short)

  // Q4M, Q5M: the f16 mins [nb][16], after the scales.
  const uint8_t* mins() const { return header + uint64_t(nb) * kPanelRows * 2; }
};

namespace {  // NOLINT(google-build-namespaces): see unrolled.h

template <class M, fb::DType DT>
void walk_panels(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                 uint32_t panel_begin, uint32_t panel_end) {
  constexpr int kTile = M::tile(DT);
  const uint32_t nb = act_blocks(w.cols);
  const uint64_t pbytes = panel_bytes(DT, w.cols);
  const uint64_t qoff = panel_quants_offset(DT, w.cols);
  for (uint32_t p = panel_begin; p < panel_end; ++p) {
    const uint8_t* panel = w.data + p * pbytes;
    // The kernels read a scale line (and a min line) every few blocks while streaming the quants;
    // interleaved with the quant stream, those few lines near the panel start make the hardware
    // stream prefetcher back off (x86, DRAM-cold Q8 1536x576: ~18 against ~30 GB/s single
    // thread; 49152x576 ~4 against ~19). Fetching the whole header first leaves one clean
    // forward stream.
    for (uint64_t o = 0; o < qoff; o += 64) __builtin_prefetch(panel + o);
    const uint32_t r0 = p * kPanelRows;
    const PanelView pv{panel, panel + qoff, nb, w.rows - r0 < kPanelRows ? w.rows - r0 : kPanelRows};
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += kTile) {
      const ActBlock* xt = x + uint64_t(t0) * nb;
      float* yt = y + uint64_t(t0) * y_stride + r0;
      with_tile_size<kTile>(n_tokens - t0, [&](auto t) { M::template panel<DT, t>(pv, xt, yt, y_stride); });
    }
  }
}

// The quantized matmul of tier M (the MatmulKernels::matmul contract); formats M does not handle
// write nothing.
template <class M>
void matmul_panels(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                   uint32_t panel_begin, uint32_t panel_end) {
  using fb::DType;
  const auto run = [&]<DType DT>() {
    if constexpr (M::handles(DT)) walk_panels<M, DT>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  };
  switch (w.dtype) {
    case DType::Q8: return run.template operator()<DType::Q8>();
    case DType::Q4: return run.template operator()<DType::Q4>();
    case DType::Q4M: return run.template operator()<DType::Q4M>();
    case DType::Q5: return run.template operator()<DType::Q5>();
    case DType::Q5M: return run.template operator()<DType::Q5M>();
    case DType::Q4K: return run.template operator()<DType::Q4K>();
    case DType::Q5K: return run.template operator()<DType::Q5K>();
    case DType::Q6K: return run.template operator()<DType::Q6K>();
    default: return;
  }
}

// ---- float weights, row-major ----

// Tokens per pass over a float row.
constexpr uint32_t kFloatTileTokens = 4;

template <fb::DType DT>
inline float load_w_scalar(const uint8_t* row, uint32_t c) {
  if constexpr (DT == fb::DType::F32) {
    float v;
    memcpy(&v, row + 4 * c, 4);
    return v;
  } else {
    uint16_t h;
    memcpy(&h, row + 2 * c, 2);
    return DT == fb::DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

// One weight row against T tokens: the row is read once and feeds every token. Rows are streamed
// one at a time on purpose: reading 2 or 4 rows side by side (4 interleaved streams) measured 2-3x
// slower from DRAM on x86 (F32 1536x576 cold: 9.5 GB/s with 4 rows, 27.8 with 1). With one token,
// U independent accumulators hide the FMA latency.
template <class V, fb::DType DT, int T>
void float_row(const uint8_t* row, uint32_t cols, const float* x, uint32_t x_stride, float* y, uint32_t y_stride) {
  constexpr uint32_t L = V::kLanes;
  constexpr int U = T == 1 ? 4 : T == 2 ? 2 : 1;
  typename V::Vec acc[T][U];
  for (int t = 0; t < T; ++t)
    for (int u = 0; u < U; ++u) acc[t][u] = V::zero();
  uint32_t c = 0;
  for (; c + L * U <= cols; c += L * U) {
    for (int u = 0; u < U; ++u) {
      const auto wv = V::template load_w<DT>(row, c + L * u);
      for (int t = 0; t < T; ++t) acc[t][u] = V::fma(wv, V::load_x(x + uint64_t(t) * x_stride + c + L * u), acc[t][u]);
    }
  }
  for (; c + L <= cols; c += L) {
    const auto wv = V::template load_w<DT>(row, c);
    for (int t = 0; t < T; ++t) acc[t][0] = V::fma(wv, V::load_x(x + uint64_t(t) * x_stride + c), acc[t][0]);
  }
  if constexpr (V::kMaskedTail) {
    if (c < cols) {
      const auto wv = V::template load_w_tail<DT>(row, c, cols - c);
      for (int t = 0; t < T; ++t)
        acc[t][0] = V::fma(wv, V::load_x_tail(x + uint64_t(t) * x_stride + c, cols - c), acc[t][0]);
      c = cols;
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int u = 1; u < U; ++u) acc[t][0] = V::add(acc[t][0], acc[t][u]);
    float s = V::hsum(acc[t][0]);
    const float* xt = x + uint64_t(t) * x_stride;
    for (uint32_t k = c; k < cols; ++k) s += load_w_scalar<DT>(row, k) * xt[k];
    y[uint64_t(t) * y_stride] = s;
  }
}

template <class V, fb::DType DT>
void float_rows(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y, uint32_t y_stride,
                uint32_t r_begin, uint32_t r_end) {
  const uint64_t row_bytes = uint64_t(w.cols) * float_elem_bytes(DT);
  for (uint32_t r = r_begin; r < r_end; ++r) {
    const uint8_t* row = w.data + r * row_bytes;
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += kFloatTileTokens) {
      const float* xt = x + uint64_t(t0) * x_stride;
      float* yt = y + uint64_t(t0) * y_stride + r;
      with_tile_size<int(kFloatTileTokens)>(
          n_tokens - t0, [&](auto t) { float_row<V, DT, t>(row, w.cols, xt, x_stride, yt, y_stride); });
    }
  }
}

// The float matmul of a tier whose f32 vector is V (the MatmulKernels::matmul_f contract).
template <class V>
void matmul_float_rows(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                       uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end) {
  const uint32_t r_begin = panel_begin * kPanelRows;
  const uint32_t r_end = panel_end * kPanelRows < w.rows ? panel_end * kPanelRows : w.rows;
  if (r_begin >= r_end) return;
  switch (w.dtype) {
    case fb::DType::F32: return float_rows<V, fb::DType::F32>(w, x, n_tokens, x_stride, y, y_stride, r_begin, r_end);
    case fb::DType::F16: return float_rows<V, fb::DType::F16>(w, x, n_tokens, x_stride, y, y_stride, r_begin, r_end);
    case fb::DType::BF16: return float_rows<V, fb::DType::BF16>(w, x, n_tokens, x_stride, y, y_stride, r_begin, r_end);
    default: return;
  }
}

}  // namespace
}  // namespace keel
