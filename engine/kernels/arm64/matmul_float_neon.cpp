// F32 / F16 / BF16 row-major weights in Armv8.0 NEON: FMLA, FCVTL for f16 (base Armv8), bf16
// widened by a 16-bit left shift (its bits are the top half of an f32). One row is streamed at
// a time and feeds up to kTileTokens tokens (the x86 kernels measured interleaved rows slower
// from DRAM); with one token, U independent accumulators hide the FMA latency.
#include <cstring>

#include "core/f16.h"
#include "kernels/arm64/neon_util.h"

namespace keel::arm64 {

namespace {

constexpr uint32_t kTileTokens = 4;

template <fb::DType DT>
inline float32x4_t load_w4(const uint8_t* row, uint32_t c) {
  if constexpr (DT == fb::DType::F32) {
    return vld1q_f32(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (DT == fb::DType::F16) {
    return load_f16x4(row + 2 * c);
  } else {
    const uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(row + 2 * c));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
  }
}

template <fb::DType DT>
inline float load_w1(const uint8_t* row, uint32_t c) {
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

template <fb::DType DT, int T>
void float_row(const uint8_t* row, uint32_t cols, const float* x, uint32_t x_stride, float* y, uint32_t y_stride) {
  constexpr int U = T == 1 ? 4 : T == 2 ? 2 : 1;
  float32x4_t acc[T][U];
  for (int t = 0; t < T; ++t)
    for (int u = 0; u < U; ++u) acc[t][u] = vdupq_n_f32(0.0f);
  uint32_t c = 0;
  for (; c + 4 * U <= cols; c += 4 * U) {
    for (int u = 0; u < U; ++u) {
      const float32x4_t wv = load_w4<DT>(row, c + 4 * u);
      for (int t = 0; t < T; ++t)
        acc[t][u] = vfmaq_f32(acc[t][u], wv, vld1q_f32(x + uint64_t(t) * x_stride + c + 4 * u));
    }
  }
  for (; c + 4 <= cols; c += 4) {
    const float32x4_t wv = load_w4<DT>(row, c);
    for (int t = 0; t < T; ++t) acc[t][0] = vfmaq_f32(acc[t][0], wv, vld1q_f32(x + uint64_t(t) * x_stride + c));
  }
  for (int t = 0; t < T; ++t) {
    for (int u = 1; u < U; ++u) acc[t][0] = vaddq_f32(acc[t][0], acc[t][u]);
    float s = vaddvq_f32(acc[t][0]);
    const float* xt = x + uint64_t(t) * x_stride;
    for (uint32_t k = c; k < cols; ++k) s += load_w1<DT>(row, k) * xt[k];
    y[uint64_t(t) * y_stride] = s;
  }
}

template <fb::DType DT>
void matmul_float(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                  uint32_t y_stride, uint32_t r_begin, uint32_t r_end) {
  const uint64_t row_bytes = uint64_t(w.cols) * float_elem_bytes(DT);
  for (uint32_t r = r_begin; r < r_end; ++r) {
    const uint8_t* row = w.data + r * row_bytes;
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
      const uint32_t nt = n_tokens - t0 < kTileTokens ? n_tokens - t0 : kTileTokens;
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

}  // namespace

void matmul_f_neon(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                   uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end) {
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

}  // namespace keel::arm64
