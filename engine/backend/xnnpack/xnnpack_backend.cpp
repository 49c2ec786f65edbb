#include "backend/xnnpack/xnnpack_backend.h"

#include "core/check.h"
#include "kernels/xnnpack/xnn_memory.h"

namespace keel {

XnnpackBackend::XnnpackBackend(BackendKind kind, const ThreadPool* pool)
    : KernelBackend(kind, pool, kernels_best(), vector_kernels_best(),
                    attention_kernels_native() ? *attention_kernels_native() : attention_kernels_ref()) {}

xnn::ModelOpsConfig XnnpackBackend::ops_config(const Model& model, const BackendPlan& plan) const {
  xnn::ModelOpsConfig c;
  c.fully_connected_f32 = xnn::ModelOps::f32_matrix_count(model) > 0;
  // XNNPACK's softmax is slower than the native one (docs/performance.md): only `xnnpack` asks.
  c.softmax = kind_ == BackendKind::Xnnpack;
  c.workers = plan.threads;
  c.capacity_tokens = plan.capacity_tokens;
  return c;
}

uint64_t XnnpackBackend::state_work_bytes(const Model& model, const BackendPlan& plan) const {
  if (!model.loaded()) return 0;
  return xnn::ModelOps::work_bytes(model, ops_config(model, plan));
}

Result<uint64_t> XnnpackBackend::measure_state(const Model& model, const BackendPlan& plan, Span<uint8_t> work) const {
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  const xnn::ModelOpsConfig c = ops_config(model, plan);
  if (!c.fully_connected_f32 && !c.softmax) return uint64_t(0);
  // Auto runs natively where XNNPACK cannot start (xnnpack itself fails when it is made).
  if (kind_ == BackendKind::Auto && !xnn::initialize().ok()) return uint64_t(0);
  return xnn::ModelOps::measure(model, c, work);
}

Error XnnpackBackend::create_state(const Model& model, const BackendPlan& plan, Span<uint8_t> block) {
  ops_ = nullptr;
  const xnn::ModelOpsConfig c = ops_config(model, plan);
  if (!block.empty() && (c.fully_connected_f32 || c.softmax)) {
    Result<xnn::ModelOps*> ops =
        xnn::ModelOps::create(model, c, block, pool_ ? static_cast<pthreadpool*>(pool_->native) : nullptr);
    if (!ops.ok()) return ops.error();
    ops_ = ops.value();
  }
  KEEL_ENSURE(kind_ != BackendKind::Xnnpack || ops_ != nullptr, Status::ArenaTooSmall,
              "backend 'xnnpack' keeps its operators in the persistent arena, but the plan reserved no bytes for "
              "them: set PlanConfig::backend_bytes from backend_state_bytes()");
  return Error();
}

void XnnpackBackend::matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized,
                            uint32_t n, float* y, uint32_t y_stride) {
  if (ops_ && w.dtype == fb::DType::F32 && ops_->fully_connected(w.data, x, x_stride, n, y, y_stride)) return;
  KernelBackend::matmul(w, x, x_stride, xq, x_quantized, n, y, y_stride);
}

void XnnpackBackend::softmax(uint32_t worker, float* x, uint32_t n) {
  if (ops_ && ops_->softmax(worker, x, n)) return;
  KernelBackend::softmax(worker, x, n);
}

}  // namespace keel
