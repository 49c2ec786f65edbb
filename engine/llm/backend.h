// A backend is the set of kernel tables the forward pass calls. `ref` is the portable oracle,
// `native` the x86 SIMD kernels, `xnnpack` uses XNNPACK where it wins; `auto` picks the best
// measured per op (docs/performance.md).
#pragma once

#include "core/result.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"

namespace keel {

enum class BackendKind : uint8_t { Auto, Ref, Native, Xnnpack };

// Ops the forward pass may hand to XNNPACK operators (bits of Backend::xnnpack_ops).
enum XnnpackOp : uint32_t {
  kXnnFullyConnectedF32 = 1u << 0,  // matrices stored as F32
  kXnnSoftmax = 1u << 1,            // attention softmax
};

struct Backend {
  BackendKind kind = BackendKind::Ref;
  const MatmulKernels* matmul = nullptr;
  const VectorKernels* vector = nullptr;
  const AttentionKernels* attention = nullptr;
  // XNNPACK operators are per model, so the transformer creates them at init, in the block of
  // PlanConfig::backend_bytes. `xnnpack` uses them for every op it has; `auto` uses them for
  // the ops where they measured faster (docs/performance.md), and only when the plan reserved
  // their memory: with backend_bytes = 0, auto runs the native kernels alone.
  uint32_t xnnpack_ops = 0;
};

const char* backend_name(BackendKind k);
// Fails with UnsupportedBackend when the CPU or the build lacks what `kind` needs.
Result<Backend> select_backend(BackendKind kind);

}  // namespace keel
