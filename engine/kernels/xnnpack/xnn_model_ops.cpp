#include "kernels/xnnpack/xnn_model_ops.h"

#include <cmath>
#include <new>

#include "core/check.h"
#include "kernels/xnnpack/xnn_memory.h"

namespace keel::xnn {
namespace {

using fb::TensorRole;

// The matrices of a layer that the forward pass multiplies with a float input.
constexpr TensorRole kLayerMatrices[] = {TensorRole::Wq,      TensorRole::Wk,    TensorRole::Wv,     TensorRole::Wo,
                                         TensorRole::FfnGate, TensorRole::FfnUp, TensorRole::FfnDown};

template <typename Fn>
void for_each_f32_matrix(const Model& model, Fn&& fn) {
  for (uint32_t l = 0; l < model.shape().n_layers; ++l) {
    for (TensorRole role : kLayerMatrices) {
      const TensorView t = model.tensor(role, int(l));
      if (t.present() && t.dtype == fb::DType::F32) fn(t);
    }
  }
  const TensorView head =
      model.meta()->arch()->tied_output() ? model.tensor(TensorRole::TokenEmbedding) : model.tensor(TensorRole::Output);
  if (head.present() && head.dtype == fb::DType::F32) fn(head);
}

WeightView as_weight(const TensorView& t) { return WeightView{t.dtype, t.rows, t.cols, t.data}; }

// Softmax lengths come in steps of at least 64 and at most ~1/32 of the capacity, so padding
// costs at most a few percent of a long row and the operator count stays near 32 per worker.
uint32_t softmax_step(uint32_t capacity) {
  uint32_t s = (capacity + 31) / 32;
  s = (s + 15) / 16 * 16;
  return s < 64 ? 64 : s;
}

uint64_t granules(uint64_t bytes) { return (bytes + Region::kGranule - 1) / Region::kGranule * Region::kGranule; }

struct Counts {
  uint32_t fc = 0, workers = 0, steps = 0, step = 0, capacity = 0;
  uint64_t table_bytes = 0;
};

Counts counts(const Model& model, const ModelOpsConfig& c) {
  Counts k;
  if (c.fully_connected_f32) for_each_f32_matrix(model, [&](const TensorView&) { ++k.fc; });
  if (c.softmax && c.capacity_tokens > 0) {
    k.capacity = c.capacity_tokens;
    k.step = softmax_step(c.capacity_tokens);
    k.steps = (c.capacity_tokens + k.step - 1) / k.step;
    k.workers = c.workers ? c.workers : 1;
  }
  k.table_bytes = granules(sizeof(ModelOps)) + granules(uint64_t(k.fc) * sizeof(FullyConnectedF32)) +
                  granules(uint64_t(k.workers) * k.steps * sizeof(SoftmaxF32));
  return k;
}

}  // namespace

uint32_t ModelOps::f32_matrix_count(const Model& model) {
  uint32_t n = 0;
  for_each_f32_matrix(model, [&](const TensorView&) { ++n; });
  return n;
}

uint64_t ModelOps::work_bytes(const Model& model, const ModelOpsConfig& config) {
  const Counts k = counts(model, config);
  // An operator is its record (about 2 KiB) plus, for a fully-connected one, W padded to the
  // micro-kernel tile (rows to <= 64, cols to <= 16) with one bias per row.
  uint64_t largest = 0;
  if (config.fully_connected_f32) {
    for_each_f32_matrix(model, [&](const TensorView& t) {
      const uint64_t rows = (uint64_t(t.rows) + 63) / 64 * 64, cols = (uint64_t(t.cols) + 15) / 16 * 16;
      const uint64_t b = rows * (cols + 1) * sizeof(float);
      if (b > largest) largest = b;
    });
  }
  return k.table_bytes + largest + (64u << 10);
}

Error ModelOps::build(const Model& model, const ModelOpsConfig& config, Span<uint8_t> memory, bool measuring,
                      pthreadpool* pool, ModelOps** out, uint64_t* bytes) {
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  KEEL_ENSURE(reinterpret_cast<uintptr_t>(memory.data()) % Region::kGranule == 0, Status::InvalidArgument,
              "the XNNPACK block must be %zu-byte aligned", Region::kGranule);
  KEEL_TRY(initialize());
  const Counts k = counts(model, config);
  Region region;
  region.reset(memory.data(), memory.size());
  void* self = region.allocate(sizeof(ModelOps), alignof(ModelOps), false);
  void* fc = region.allocate(uint64_t(k.fc) * sizeof(FullyConnectedF32), alignof(FullyConnectedF32), false);
  void* sm = region.allocate(uint64_t(k.workers) * k.steps * sizeof(SoftmaxF32), alignof(SoftmaxF32), false);
  KEEL_ENSURE(self && fc && sm, Status::ArenaTooSmall,
              "XNNPACK block of %zu bytes cannot hold its tables (%llu bytes)%s", memory.size(),
              (unsigned long long)k.table_bytes, measuring ? " (measurement work memory)" : "");
  ModelOps* ops = new (self) ModelOps();
  ops->fc_ = static_cast<FullyConnectedF32*>(fc);
  ops->sm_ = static_cast<SoftmaxF32*>(sm);
  for (uint32_t i = 0; i < k.fc; ++i) new (ops->fc_ + i) FullyConnectedF32();
  for (uint32_t i = 0; i < k.workers * k.steps; ++i) new (ops->sm_ + i) SoftmaxF32();
  ops->n_fc_ = k.fc;
  ops->workers_ = k.workers;
  ops->steps_ = k.steps;
  ops->step_ = k.step;
  ops->capacity_ = k.capacity;
  ops->pool_ = pool;

  // While measuring, each operator is created at the same place and only its size is kept.
  uint64_t measured = region.used;
  Error err;
  auto created = [&](size_t mark, Error e) {
    if (!e.ok() && e.status() == Status::ArenaTooSmall) {
      e = Error(Status::ArenaTooSmall,
                measuring ? "XNNPACK measurement work memory of %zu bytes is too small (an operator asked for %zu)"
                          : "XNNPACK block of %zu bytes is too small (an operator asked for %zu more); plan it with "
                            "backend_state_bytes()",
                memory.size(), region.largest_refused);
    }
    if (err.ok() && !e.ok()) err = e;
    if (measuring) {
      measured += region.used - mark;
      region.used = mark;
    }
  };
  open_region(&region, measuring);
  uint32_t i = 0;
  for_each_f32_matrix(model, [&](const TensorView& t) {
    if (i >= k.fc || !err.ok()) return;
    const size_t mark = region.used;
    created(mark, ops->fc_[i++].create(as_weight(t)));
  });
  for (uint32_t w = 0; w < k.workers && err.ok(); ++w) {
    for (uint32_t s = 0; s < k.steps && err.ok(); ++s) {
      const uint32_t end = (s + 1) * k.step;
      const size_t mark = region.used;
      created(mark, ops->sm_[w * k.steps + s].create(end < k.capacity ? end : k.capacity));
    }
  }
  close_region();
  if (!err.ok()) return err;

  // Sorted by weight address for the lookup in fully_connected() (insertion sort: init only,
  // a few hundred entries at most).
  for (uint32_t a = 1; a < k.fc; ++a) {
    for (uint32_t b = a; b > 0 && ops->fc_[b].weights() < ops->fc_[b - 1].weights(); --b) {
      FullyConnectedF32 tmp = ops->fc_[b];
      ops->fc_[b] = ops->fc_[b - 1];
      ops->fc_[b - 1] = tmp;
    }
  }
  ops->used_ = measuring ? measured : region.used;
  *bytes = ops->used_;
  *out = measuring ? nullptr : ops;
  return Error();
}

Result<uint64_t> ModelOps::measure(const Model& model, const ModelOpsConfig& config, Span<uint8_t> work) {
  ModelOps* ops = nullptr;
  uint64_t bytes = 0;
  KEEL_TRY(build(model, config, work, true, nullptr, &ops, &bytes));
  return bytes;
}

Result<ModelOps*> ModelOps::create(const Model& model, const ModelOpsConfig& config, Span<uint8_t> block,
                                   pthreadpool* pool) {
  ModelOps* ops = nullptr;
  uint64_t bytes = 0;
  KEEL_TRY(build(model, config, block, false, pool, &ops, &bytes));
  return ops;
}

bool ModelOps::fully_connected(const uint8_t* weights, const float* x, uint32_t x_stride, uint32_t n, float* y,
                               uint32_t y_stride) {
  uint32_t lo = 0, hi = n_fc_;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (fc_[mid].weights() < weights) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == n_fc_ || fc_[lo].weights() != weights) return false;
  FullyConnectedF32& op = fc_[lo];
  if (x_stride != op.cols() || y_stride != op.rows()) return false;
  return op.run(x, n, y, pool_);
}

uint64_t ModelOps::fully_connected_runs() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < n_fc_; ++i) n += fc_[i].runs();
  return n;
}

uint64_t ModelOps::softmax_runs() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < workers_ * steps_; ++i) n += sm_[i].runs();
  return n;
}

uint32_t ModelOps::padded_length(uint32_t n) const {
  if (n == 0 || step_ == 0) return n;
  const uint32_t end = ((n - 1) / step_ + 1) * step_;
  return end < capacity_ ? end : capacity_;
}

bool ModelOps::softmax(uint32_t worker, float* x, uint32_t n) {
  if (n == 0 || n > capacity_ || worker >= workers_) return false;
  SoftmaxF32& op = sm_[worker * steps_ + (n - 1) / step_];
  for (uint32_t i = n; i < op.channels(); ++i) x[i] = -INFINITY;
  return op.run(x);
}

}  // namespace keel::xnn
