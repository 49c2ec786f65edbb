// Portable matrix-vector kernels: the oracle every SIMD kernel is tested against, and the
// kernels of targets without SIMD. Written for clarity; the loops follow docs/format.md.
#include <cstring>

#include "core/f16.h"
#include "kernels/kernels.h"
#include "kernels/kquant_kernels.h"
#include "kernels/unaligned_load.h"

namespace keel {

namespace {

inline float abs_f(float x) { return x < 0.0f ? -x : x; }

// Round to nearest, ties to even (the SIMD conversion's default mode), for |v| < 2^22.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

void quantize_act_ref(const float* x, uint32_t cols, ActBlock* out) {
  const uint32_t nb = act_blocks(cols);
  for (uint32_t b = 0; b < nb; ++b) {
    const uint32_t c0 = b * kQuantBlock;
    const uint32_t n = cols - c0 < kQuantBlock ? cols - c0 : kQuantBlock;
    float amax = 0.0f;
    bool finite = true;
    for (uint32_t i = 0; i < n; ++i) {
      const float a = abs_f(x[c0 + i]);
      finite = finite && a <= 3.4028235e38f;  // false for inf and NaN
      amax = a > amax ? a : amax;
    }
    ActBlock& blk = out[b];
    float d = 0.0f, id = 0.0f;
    if (!finite) {
      // Non-finite activations (a corrupted model): no integer conversion of them (undefined);
      // a NaN scale carries the damage to the outputs instead.
      d = __builtin_nanf("");
    } else if (amax >= 1e-30f) {
      d = amax / 127.0f;
      id = 1.0f / d;
    }
    int32_t sum = 0;
    for (uint32_t i = 0; i < kQuantBlock; ++i) {
      const int32_t q = i < n ? int32_t(round_even(x[c0 + i] * id)) : 0;
      blk.q[i] = int8_t(q);
      sum += q;
    }
    blk.d = d;
    blk.sum = sum;
  }
}

// Integer dot product of one weight row of block b with one activation block:
// sum_i u_i * q_i (the zero point is applied by the caller).
inline int32_t block_dot_q8(const uint8_t* quants_b, uint32_t lane, const int8_t* q) {
  int32_t s = 0;
  for (uint32_t g = 0; g < 8; ++g)
    for (uint32_t j = 0; j < 4; ++j) s += int32_t(quants_b[g * 64 + lane * 4 + j]) * int32_t(q[4 * g + j]);
  return s;
}

inline int32_t block_dot_q4(const uint8_t* quants_b, uint32_t lane, const int8_t* q) {
  int32_t s = 0;
  for (uint32_t c = 0; c < 4; ++c)
    for (uint32_t j = 0; j < 4; ++j) {
      const uint8_t byte = quants_b[c * 64 + lane * 4 + j];
      s += int32_t(byte & 15) * int32_t(q[8 * c + j]);
      s += int32_t(byte >> 4) * int32_t(q[8 * c + 4 + j]);
    }
  return s;
}

void matmul_ref(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                uint32_t panel_begin, uint32_t panel_end) {
  const fb::DType dt = w.dtype;
  if (!is_quantized(dt)) return;
  if (is_wide_quant(dt)) return matmul_wide_ref(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  const uint32_t nb = act_blocks(w.cols);
  const uint64_t pbytes = panel_bytes(dt, w.cols);
  const uint64_t qoff = panel_quants_offset(dt, w.cols);
  const uint32_t qblock_bytes = dt == fb::DType::Q8 ? 512 : 256;
  for (uint32_t p = panel_begin; p < panel_end; ++p) {
    const uint8_t* panel = w.data + p * pbytes;
    const uint8_t* scales = panel;
    const uint8_t* mins = panel + uint64_t(nb) * kPanelRows * 2;
    const uint8_t* quants = panel + qoff;
    const uint32_t r0 = p * kPanelRows;
    const uint32_t n_rows = w.rows - r0 < kPanelRows ? w.rows - r0 : kPanelRows;
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const ActBlock* xt = x + uint64_t(t) * nb;
      for (uint32_t lane = 0; lane < n_rows; ++lane) {
        float acc = 0.0f;
        for (uint32_t b = 0; b < nb; ++b) {
          const ActBlock& a = xt[b];
          const float dw = f16_to_f32(load_u16(scales + (b * kPanelRows + lane) * 2));
          const uint8_t* qb = quants + uint64_t(b) * qblock_bytes;
          if (dt == fb::DType::Q8) {
            const int32_t isum = block_dot_q8(qb, lane, a.q) - 128 * a.sum;
            acc = acc + (dw * a.d) * float(isum);
          } else if (dt == fb::DType::Q4) {
            const int32_t isum = block_dot_q4(qb, lane, a.q) - 8 * a.sum;
            acc = acc + (dw * a.d) * float(isum);
          } else {
            const float mw = f16_to_f32(load_u16(mins + (b * kPanelRows + lane) * 2));
            const int32_t isum = block_dot_q4(qb, lane, a.q);
            acc = acc + (dw * a.d) * float(isum);
            acc = acc + (mw * a.d) * float(a.sum);
          }
        }
        y[uint64_t(t) * y_stride + r0 + lane] = acc;
      }
    }
  }
}

inline float load_weight(fb::DType dt, const uint8_t* row, uint32_t c) {
  switch (dt) {
    case fb::DType::F16: return f16_to_f32(load_u16(row + 2 * c));
    case fb::DType::BF16: return bf16_to_f32(load_u16(row + 2 * c));
    default: {
      float v;
      memcpy(&v, row + 4 * c, 4);
      return v;
    }
  }
}

void matmul_f_ref(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                  uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end) {
  const fb::DType dt = w.dtype;
  if (is_quantized(dt)) return;
  const uint64_t row_bytes = uint64_t(w.cols) * float_elem_bytes(dt);
  const uint32_t r_end = panel_end * kPanelRows < w.rows ? panel_end * kPanelRows : w.rows;
  for (uint32_t r = panel_begin * kPanelRows; r < r_end; ++r) {
    const uint8_t* row = w.data + r * row_bytes;
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + uint64_t(t) * x_stride;
      float acc = 0.0f;
      for (uint32_t c = 0; c < w.cols; ++c) acc = acc + load_weight(dt, row, c) * xt[c];
      y[uint64_t(t) * y_stride + r] = acc;
    }
  }
}

constexpr MatmulKernels kRef = {"ref", quantize_act_ref, matmul_ref, matmul_f_ref};

}  // namespace

const MatmulKernels& kernels_ref() { return kRef; }

}  // namespace keel
