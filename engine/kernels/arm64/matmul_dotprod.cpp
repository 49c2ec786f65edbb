// Placeholder: the portable kernels under this tier's name, until the tier's own land.
#include "kernels/arm64/arm64_tables.h"

namespace keel::arm64 {

const MatmulKernels& matmul_dotprod_table() {
  static const MatmulKernels table = [] {
    MatmulKernels t = kernels_ref();
    t.name = "neon-dotprod";
    return t;
  }();
  return table;
}

}  // namespace keel::arm64
