// Portable kernels of the 5-bit and K-quant formats, the oracle of the SIMD ones. Per row and
// activation block (d_a, q, sum_a), with isum = sum_i u_i * q_i:
//   Q5:        (d * d_a) * (isum - 16 sum_a)
//   Q5M:       (d * d_a) * isum + (m * d_a) * sum_a
//   Q4K, Q5K:  ((d * sc) * d_a) * isum - ((dmin * mn) * d_a) * sum_a
//   Q6K:       (d * d_a) * (sc0 * sum_{i<16} (u_i - 32) q_i + sc1 * sum_{i>=16} (u_i - 32) q_i)
// Integer parts are exact in int32 (|sc * sum| <= 128 * 16 * 32 * 127).
#include "kernels/kquant_kernels.h"
#include "kernels/panel_quants.h"

namespace keel {

void matmul_wide_ref(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                     uint32_t panel_begin, uint32_t panel_end) {
  const fb::DType dt = w.dtype;
  if (!is_wide_quant(dt)) return;
  const uint32_t nb = act_blocks(w.cols);
  const uint64_t pbytes = panel_bytes(dt, w.cols);
  const uint64_t qoff = panel_quants_offset(dt, w.cols);
  const uint32_t qbb = quant_block_bytes(dt);
  for (uint32_t p = panel_begin; p < panel_end; ++p) {
    const uint8_t* panel = w.data + p * pbytes;
    const uint32_t r0 = p * kPanelRows;
    const uint32_t n_rows = w.rows - r0 < kPanelRows ? w.rows - r0 : kPanelRows;
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const ActBlock* xt = x + uint64_t(t) * nb;
      for (uint32_t lane = 0; lane < n_rows; ++lane) {
        float acc = 0.0f;
        for (uint32_t b = 0; b < nb; ++b) {
          const ActBlock& a = xt[b];
          uint8_t u[kQuantBlock];
          unpack_block_u(dt, panel + qoff + uint64_t(b) * qbb, lane, u);
          const BlockParams bp = block_params(dt, panel, w.cols, b, lane);
          if (dt == fb::DType::Q6K) {
            int32_t half[2] = {0, 0};
            for (uint32_t i = 0; i < kQuantBlock; ++i) half[i / 16] += (int32_t(u[i]) - 32) * int32_t(a.q[i]);
            acc = acc + (bp.d * a.d) * float(bp.sc[0] * half[0] + bp.sc[1] * half[1]);
            continue;
          }
          int32_t isum = 0;
          for (uint32_t i = 0; i < kQuantBlock; ++i) isum += int32_t(u[i]) * int32_t(a.q[i]);
          if (dt == fb::DType::Q5) {
            acc = acc + (bp.d * a.d) * float(isum - 16 * a.sum);
          } else if (dt == fb::DType::Q5M) {
            acc = acc + (bp.d * a.d) * float(isum);
            acc = acc + (bp.m * a.d) * float(a.sum);
          } else {
            acc = acc + ((bp.d * float(bp.sc[0])) * a.d) * float(isum);
            acc = acc - ((bp.m * float(bp.mn)) * a.d) * float(a.sum);
          }
        }
        y[uint64_t(t) * y_stride + r0 + lane] = acc;
      }
    }
  }
}

}  // namespace keel
