// A backend executes the ops of the forward pass. The transformer (llm/) sees only this
// interface; which kernels, libraries or devices stand behind it is the backend's business.
//
//   per model, before the first token (optional; XNNPACK uses it):
//     state_work_bytes() -> host memory for measuring
//     measure_state()    -> bytes of per-model state; the plan reserves them in the persistent arena
//     create_state()     -> builds that state inside its block of the persistent arena
//   per forward pass: matmul, quantize_rows, attention and the row ops below
//
// Backends are registered in backend/registry.cpp; nothing else names a concrete backend.
// Objects live in caller storage (BackendStorage): no allocation, no destructor to run.
#pragma once

#include <cstdint>

#include "backend/backend_plan.h"
#include "core/kv_type.h"
#include "core/snap_compression.h"
#include "core/sparse_selection.h"
#include "core/result.h"
#include "core/span.h"
#include "core/threads.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "model/model.h"

namespace keel {

enum class BackendKind : uint8_t { Auto, Ref, Native, Xnnpack, Dataflow };
const char* backend_name(BackendKind k);

// One layer's attention for a chunk of n tokens against one slot's cache (docs/kv.md):
// token t (0-based in the chunk) attends to the `visible` cached entries and chunk tokens <= t.
// Keys [0, prefix) were rotated at their cache index, so the query is re-rotated by
// (cache index - position) for them; the others were rotated at their original position.
struct AttentionArgs {
  const float* q;          // [n][n_heads * head_dim], rotated at each token's position
  float* out;              // [n][n_heads * head_dim]
  const uint16_t* keys;    // KV head 0 of the layer, [capacity] rows of kv_type (core/kv_type.h)
  const uint16_t* values;  // same layout
  uint64_t head_stride;    // 16-bit units from one KV head's keys (values) to the next
  KvType kv_type;          // row format of keys and values; f16 when value-initialized
  uint32_t n, n_heads, n_kv_heads, head_dim;
  uint32_t visible;        // entries before the chunk
  uint32_t prefix;         // of which the first `prefix` are rotated at their cache index
  uint32_t rope_pairs;     // rotated pairs per head
  bool rope_halves;        // pair (i, i + pairs) instead of (2i, 2i + 1)
  const float* shift_cos;  // [rope_pairs] rotation by (cache index - position)
  const float* shift_sin;
  float attn_scale;  // multiplies q . k; 0 = 1/sqrt(head_dim)
  // Sliding window (0 = none): a token at position p sees only entries whose position is above
  // p - window. `positions` is KV head 0's [capacity] positions, the next head's positions_stride
  // further.
  uint32_t window;
  const int32_t* positions;
  uint64_t positions_stride;
  // Per worker, `query_rows` score rows of row_capacity entries and as many re-rotated queries:
  // rows [threads][query_rows][row_capacity], qrot [threads][query_rows][head_dim]. A backend may
  // take up to query_rows query heads of one KV head together.
  float* rows;
  float* qrot;
  uint32_t row_capacity;
  uint32_t query_rows;
};

class Backend {
 public:
  BackendKind kind() const { return kind_; }
  // The matmul kernel table in use ("avx512-vnni", "ref", ...).
  virtual const char* kernel_name() const = 0;

  // Per-model state. Default: none.
  virtual uint64_t state_work_bytes(const Model& model, const BackendPlan& plan) const { return 0; }
  virtual Result<uint64_t> measure_state(const Model& model, const BackendPlan& plan, Span<uint8_t> work) const {
    return uint64_t(0);
  }
  // `block` is the plan's backend region (64-byte aligned, measure_state() bytes; may be empty).
  virtual Error create_state(const Model& model, const BackendPlan& plan, Span<uint8_t> block) { return Error(); }

  // y[n][w.rows] (row stride y_stride) = x[n][w.cols] (row stride x_stride) * W^T. A quantized
  // W multiplies x quantized into xq ([n][act_blocks(w.cols)]); with `x_quantized` xq already
  // holds it (several matrices reading the same input quantize it once).
  virtual void matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized,
                      uint32_t n, float* y, uint32_t y_stride) = 0;
  // xq[t] = quantized x[t][0..cols) for t < n.
  virtual void quantize_rows(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride, ActBlock* xq) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // Several attentions of one pass (each segment's own cache, q and out rows; the same per-worker
  // rows), in any order or at once. Default: one after the other.
  virtual void attention_many(const AttentionArgs* a, uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) attention(a[i]);
  }

  // Row ops, one row of `n` floats each.
  virtual void rmsnorm(const float* x, const float* w, uint32_t n, float eps, float* out) = 0;
  virtual void add(const float* a, const float* b, uint32_t n, float* out) = 0;
  virtual void silu_mul(const float* gate, const float* up, uint32_t n, float* out) = 0;
  virtual void gelu_mul(const float* gate, const float* up, uint32_t n, float* out) = 0;
  // In place; `worker` is the calling attention worker (backends may keep per-worker state).
  virtual void softmax(uint32_t worker, float* x, uint32_t n) = 0;
  // scores[j] = scale * dot(q, k_j) over n key rows of `type` (core/kv_type.h).
  virtual void scores(KvType type, const float* q, const uint16_t* keys, uint32_t n, uint32_t head_dim, float scale,
                      float* out) = 0;
  virtual void to_half(const float* x, uint32_t n, uint16_t* out) = 0;
  // Turns n consecutive key rows of `type` (head_dim numbers each) in place by one set of RoPE
  // angles, bit for bit as rope_rotate_rows (kernels/rope.h): keys a compaction moved alike.
  // Part of the compaction, which the dataflow backend counts from snap_compacted, not here.
  virtual void rotate_keys(KvType type, uint16_t* rows, uint32_t n, uint32_t head_dim, uint32_t pairs, bool halves,
                           const float* cos, const float* sin) {
    float row[kMaxHeadDim];
    rope_rotate_rows(type, rows, n, head_dim, pairs, halves, cos, sin, row);
  }
  // A SnapKV compression of this shape ran its selection and compaction in the slot's memory (its
  // scoring came through scores() and softmax()). Only a backend that counts work does anything.
  virtual void snap_compacted(const SnapCompression&) {}
  // A decode step's RocketKV page selection of this shape ran for one KV head of one layer, in
  // the transformer; the attention over its pages follows as an attention() call.
  virtual void sparse_selected(const SparseSelection&) {}

 protected:
  Backend(BackendKind kind, const ThreadPool* pool) : kind_(kind), pool_(pool) {}
  ~Backend() = default;
  uint32_t threads() const { return pool_ ? uint32_t(pool_->threads) : 1; }

  BackendKind kind_;
  const ThreadPool* pool_;
};

}  // namespace keel
