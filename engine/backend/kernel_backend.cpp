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

// Attention work of up to kMaxAttentionArgs calls (a pass's slots) split as one list of items.
constexpr uint32_t kMaxAttentionArgs = 16;

struct AttentionJob {
  KernelBackend* backend;
  const AttentionKernels* ak;
  const AttentionArgs* a;
  uint32_t count;
  // Items of a[i]: [first[i], first[i + 1]), each (token, KV head, run of take[i] query heads);
  // take 1 is one query head, more are heads of one KV head together.
  uint32_t take[kMaxAttentionArgs];
  uint32_t first[kMaxAttentionArgs + 1];
  uint32_t tasks;
};

void attend(const AttentionJob& job, const AttentionArgs& j, uint32_t take, uint32_t item, uint32_t worker) {
  const uint32_t query_rows = j.query_rows ? j.query_rows : 1;
  float* scores = j.rows + uint64_t(worker) * query_rows * j.row_capacity;
  float* qc = j.qrot + uint64_t(worker) * query_rows * j.head_dim;
  const float scale = j.attn_scale > 0.0f ? j.attn_scale : 1.0f / std::sqrt(float(j.head_dim));
  const uint32_t q_dim = j.n_heads * j.head_dim;
  const uint32_t group = j.n_heads / j.n_kv_heads;
  const uint32_t runs = (group + take - 1) / take;  // items per (token, KV head)
  const uint64_t hd = j.head_dim, stride = j.row_capacity;
  const uint64_t row = kv_row_halves(j.kv_type, j.head_dim);
  const uint32_t t = item / (j.n_kv_heads * runs), kvh = item / runs % j.n_kv_heads, run = item % runs;
  const uint32_t h0 = kvh * group + run * take;  // query heads [h0, h0 + g)
  const uint32_t g = group - run * take < take ? group - run * take : take;
  // Causal: token t of the chunk sees the visible entries and chunk tokens <= t.
  const uint32_t len = j.visible + t + 1;
  const float* qh = j.q + uint64_t(t) * q_dim + uint64_t(h0) * hd;
  float* out = j.out + uint64_t(t) * q_dim + uint64_t(h0) * hd;
  const uint16_t* keys = j.keys + kvh * j.head_stride;
  const uint16_t* values = j.values + kvh * j.head_stride;
  // A query's scores and output are the same bits whether its heads go together or one by one.
  auto scores_of = [&](const float* q, const uint16_t* k, uint32_t n, float* s) {
    if (take > 1) return job.ak->scores_group_of(j.kv_type)(q, g, k, n, j.head_dim, scale, s, stride);
    job.ak->scores_of(j.kv_type)(q, k, n, j.head_dim, scale, s);
  };
  if (j.prefix > 0) {
    // Moves the queries from their position to their cache index for the prefix keys (docs/kv.md).
    memcpy(qc, qh, g * hd * sizeof(float));
    for (uint32_t i = 0; i < g; ++i) rope_rotate(qc + i * hd, j.rope_pairs, j.rope_halves, j.shift_cos, j.shift_sin);
    scores_of(qc, keys, j.prefix, scores);
  }
  scores_of(qh, keys + j.prefix * row, len - j.prefix, scores + j.prefix);
  for (uint32_t i = 0; i < g; ++i) {
    float* s = scores + i * stride;
    if (j.window > 0) {
      const int32_t* pos = j.positions + kvh * j.positions_stride;
      const int64_t oldest_seen = int64_t(pos[j.visible + t]) - int64_t(j.window);
      for (uint32_t e = 0; e < len; ++e) {
        if (pos[e] <= oldest_seen) s[e] = -INFINITY;
      }
    }
    job.backend->softmax(worker, s, len);
  }
  if (take > 1) {
    job.ak->weighted_sum_group_of(j.kv_type)(scores, stride, g, values, len, j.head_dim, out);
  } else {
    job.ak->weighted_sum_of(j.kv_type)(scores, values, len, j.head_dim, out);
  }
}

void attention_task(void* ctx, size_t task) {
  const AttentionJob& job = *static_cast<const AttentionJob*>(ctx);
  const uint32_t total = job.first[job.count];
  const uint32_t begin = uint32_t(uint64_t(total) * task / job.tasks);
  const uint32_t end = uint32_t(uint64_t(total) * (task + 1) / job.tasks);
  uint32_t i = 0;
  for (uint32_t item = begin; item < end; ++item) {
    while (item >= job.first[i + 1]) ++i;
    attend(job, job.a[i], job.take[i], item - job.first[i], uint32_t(task));
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

void KernelBackend::attention(const AttentionArgs& a) { attention_many(&a, 1); }

void KernelBackend::attention_many(const AttentionArgs* a, uint32_t count) {
  for (; count > kMaxAttentionArgs; a += kMaxAttentionArgs, count -= kMaxAttentionArgs)
    attention_many(a, kMaxAttentionArgs);
  AttentionJob j{this, &ak_, a, count, {}, {}, 0};
  // The query heads of a KV head go together where the table has grouped entries for the rows'
  // type (each row is then loaded, and f16 converted, once for all of them), unless that leaves
  // a worker without an item.
  auto can_group = [&](KvType t) { return ak_.scores_group_of(t) && ak_.weighted_sum_group_of(t); };
  for (int grouped = 1; grouped >= 0; --grouped) {
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t group = a[i].n_heads / a[i].n_kv_heads;
      uint32_t take = 1;
      if (grouped && group > 1 && a[i].query_rows > 1 && can_group(a[i].kv_type))
        take = group < a[i].query_rows ? group : a[i].query_rows;
      j.take[i] = take;
      j.first[i + 1] = j.first[i] + a[i].n * a[i].n_kv_heads * ((group + take - 1) / take);
    }
    if (j.first[count] >= threads()) break;
  }
  const uint32_t items = j.first[count];
  if (items == 0) return;
  j.tasks = items < threads() ? items : threads();
  parallel_for(pool_, j.tasks, attention_task, &j);
}

}  // namespace keel
