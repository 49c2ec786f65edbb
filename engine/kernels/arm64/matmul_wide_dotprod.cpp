// Placeholder: the portable kernel, until this tier's own lands.
#include "kernels/kquant_kernels.h"

namespace keel::arm64 {

void matmul_wide_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                         uint32_t panel_begin, uint32_t panel_end) {
  matmul_wide_ref(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::arm64
