// A backend is the set of kernel tables the forward pass calls. `ref` is the portable oracle,
// `native` the x86 SIMD kernels, `xnnpack` uses XNNPACK where it wins; `auto` picks the best
// measured per op (docs/performance.md).
#pragma once

#include "core/result.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"

namespace keel {

enum class BackendKind : uint8_t { Auto, Ref, Native, Xnnpack };

struct Backend {
  BackendKind kind = BackendKind::Ref;
  const MatmulKernels* matmul = nullptr;
  const VectorKernels* vector = nullptr;
  const AttentionKernels* attention = nullptr;
};

const char* backend_name(BackendKind k);
// Fails with UnsupportedBackend when the CPU or the build lacks what `kind` needs.
Result<Backend> select_backend(BackendKind kind);

}  // namespace keel
