#include "backend/kernel_backend.h"

#include <cmath>
#include <cstring>

#include "kernels/rope.h"

namespace keel {
namespace {

struct MatmulJob {
  const MatmulKernels* k;
  WeightView w;
  const ActBlock* xq;
  const float* xf;
  uint32_t x_stride;
  uint32_t n;
  float* y;
  uint32_t y_stride;
  uint32_t panels;
  uint32_t tasks;
};

void matmul_task(void* ctx, size_t i) {
  const MatmulJob& j = *static_cast<const MatmulJob*>(ctx);
  const uint32_t begin = uint32_t(uint64_t(j.panels) * i / j.tasks);
  const uint32_t end = uint32_t(uint64_t(j.panels) * (i + 1) / j.tasks);
  if (begin == end) return;
  if (j.xq) {
    j.k->matmul(j.w, j.xq, j.n, j.y, j.y_stride, begin, end);
  } else {
    j.k->matmul_f(j.w, j.xf, j.n, j.x_stride, j.y, j.y_stride, begin, end);
  }
}

struct AttentionJob {
  KernelBackend* backend;
  const AttentionKernels* ak;
  const AttentionArgs* a;
  uint32_t tasks;
};

void attention_task(void* ctx, size_t task) {
  const AttentionJob& job = *static_cast<const AttentionJob*>(ctx);
  const AttentionArgs& j = *job.a;
  const uint32_t total = j.n * j.n_heads;
  const uint32_t begin = uint32_t(uint64_t(total) * task / job.tasks);
  const uint32_t end = uint32_t(uint64_t(total) * (task + 1) / job.tasks);
  float* scores = j.rows + uint64_t(task) * j.row_capacity;
  float* qc = j.qrot + uint64_t(task) * j.head_dim;
  const float scale = j.attn_scale > 0.0f ? j.attn_scale : 1.0f / std::sqrt(float(j.head_dim));
  const uint32_t q_dim = j.n_heads * j.head_dim;
  const uint32_t group = j.n_heads / j.n_kv_heads;
  const uint64_t hd = j.head_dim;
  const uint64_t row = kv_row_halves(j.kv_type, j.head_dim);
  const KvScoresFn scores_fn = job.ak->scores_of(j.kv_type);
  const KvWeightedSumFn sum_fn = job.ak->weighted_sum_of(j.kv_type);
  for (uint32_t item = begin; item < end; ++item) {
    const uint32_t t = item / j.n_heads, h = item % j.n_heads;
    const uint32_t kvh = h / group;
    // Causal: token t of the chunk sees the visible entries and chunk tokens <= t.
    const uint32_t len = j.visible + t + 1;
    const float* qh = j.q + uint64_t(t) * q_dim + uint64_t(h) * j.head_dim;
    const uint16_t* keys = j.keys + kvh * j.head_stride;
    if (j.prefix > 0) {
      // Moves the query from its position to its cache index for the prefix keys (docs/kv.md).
      memcpy(qc, qh, hd * sizeof(float));
      rope_rotate(qc, j.rope_pairs, j.rope_halves, j.shift_cos, j.shift_sin);
      scores_fn(qc, keys, j.prefix, j.head_dim, scale, scores);
    }
    scores_fn(qh, keys + j.prefix * row, len - j.prefix, j.head_dim, scale, scores + j.prefix);
    if (j.window > 0) {
      const int32_t* pos = j.positions + kvh * j.positions_stride;
      const int64_t oldest_seen = int64_t(pos[j.visible + t]) - int64_t(j.window);
      for (uint32_t e = 0; e < len; ++e) {
        if (pos[e] <= oldest_seen) scores[e] = -INFINITY;
      }
    }
    job.backend->softmax(uint32_t(task), scores, len);
    sum_fn(scores, j.values + kvh * j.head_stride, len, j.head_dim,
           j.out + uint64_t(t) * q_dim + uint64_t(h) * j.head_dim);
  }
}

}  // namespace

void KernelBackend::quantize_rows(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride, ActBlock* xq) {
  const uint32_t nb = act_blocks(cols);
  for (uint32_t t = 0; t < n; ++t) mk_.quantize_act(x + uint64_t(t) * x_stride, cols, xq + uint64_t(t) * nb);
}

void KernelBackend::matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized,
                           uint32_t n, float* y, uint32_t y_stride) {
  MatmulJob j{};
  j.k = &mk_;
  j.w = WeightView{w.dtype, w.rows, w.cols, w.data};
  const bool quant = is_quantized(w.dtype);
  if (quant && !x_quantized) quantize_rows(x, n, w.cols, x_stride, xq);
  j.xq = quant ? xq : nullptr;
  j.xf = x;
  j.x_stride = x_stride;
  j.n = n;
  j.y = y;
  j.y_stride = y_stride;
  j.panels = panel_count(w.rows);
  // A few items per thread, so a worker that gets descheduled mid-matmul leaves work the
  // others can take instead of a tail everyone waits on.
  const uint32_t items = threads() > 1 ? threads() * 4 : 1;
  j.tasks = j.panels < items ? j.panels : items;
  if (j.tasks == 0) return;
  parallel_for(pool_, j.tasks, matmul_task, &j);
}

void KernelBackend::attention(const AttentionArgs& a) {
  AttentionJob j{this, &ak_, &a, 0};
  const uint32_t items = a.n * a.n_heads;
  j.tasks = items < threads() ? items : threads();
  parallel_for(pool_, j.tasks, attention_task, &j);
}

}  // namespace keel
