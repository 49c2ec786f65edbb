// The XNNPACK backend: Keel's native kernels, with XNNPACK operators for the ops where they
// are used (docs/performance.md). `xnnpack` hands XNNPACK every op it has (F32 fully-connected,
// attention softmax); `auto` only the F32 fully-connected, which beats the native F32 kernels,
// and only when the plan reserved its state. The operators and XNNPACK's packed copy of the F32
// weights are the backend's per-model state, built in the persistent arena.
#pragma once

#include "backend/kernel_backend.h"
#include "kernels/xnnpack/xnn_model_ops.h"

namespace keel {

class XnnpackBackend : public KernelBackend {
 public:
  XnnpackBackend(BackendKind kind, const ThreadPool* pool);

  uint64_t state_work_bytes(const Model& model, const BackendPlan& plan) const override;
  Result<uint64_t> measure_state(const Model& model, const BackendPlan& plan, Span<uint8_t> work) const override;
  Error create_state(const Model& model, const BackendPlan& plan, Span<uint8_t> block) override;

  void matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized, uint32_t n,
              float* y, uint32_t y_stride) override;
  void softmax(uint32_t worker, float* x, uint32_t n) override;

  // The operators in use, nullptr when none were created.
  const xnn::ModelOps* ops() const { return ops_; }

 private:
  xnn::ModelOpsConfig ops_config(const Model& model, const BackendPlan& plan) const;
  xnn::ModelOps* ops_ = nullptr;
};

}  // namespace keel
