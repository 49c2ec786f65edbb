// The forward pass over a static plan, the same machinery for every architecture: one pass runs
// the rows of one or more segments, each a run of tokens of one slot (a prompt chunk of up to
// `chunk_tokens` tokens or a single decode token). It embeds the tokens, hands the rows to the
// model family's blocks (llm/architecture.h: one file per family in llm/models/, written in the
// layer operations of llm/layer_ops.h), then takes the final norm and the LM head. Every matmul
// takes all rows at once (the weights are read once per pass); RoPE and attention run per row at
// its own slot's position and against its own slot's cache. Every buffer is a region of the plan
// (llm/plan.h); matmuls, attention and the row ops go to the backend (the embedding lookup and
// RoPE rotation run here).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/result.h"
#include "core/threads.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "kv/rocketkv_split.h"
#include "llm/architecture.h"
#include "llm/model_kv_hooks.h"
#include "llm/plan.h"
#include "model/model.h"

namespace keel {

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, gate, up, down;
  TensorView q_norm, k_norm, post_attn_norm, post_ffn_norm;  // Gemma 3 only
};

// One slot's rows of a forward pass.
struct ForwardSegment {
  KvCache* kv = nullptr;            // the slot's cache of global layers; room made for n more entries
  const int32_t* tokens = nullptr;  // [n], at positions kv->next_position() + t
  uint32_t n = 0;                   // 1..chunk_tokens (the cache stages one chunk)
  float* logits = nullptr;          // [n_logits][vocab]: the logits of the last n_logits tokens
  uint32_t n_logits = 0;            // or 0 (and logits null) for none
  // The slot's ring of local layers (Gemma 3), at the same position as kv; null without them.
  KvCache* local_kv = nullptr;
};
static_assert(record_planned<sizeof(ForwardSegment), kForwardSegmentBytes>());

class Transformer final {
 public:
  // Takes its buffers from the plan's regions; `backend` must outlive it.
  Error init(const Model& model, Backend& backend, const PlanConfig& config, const RegionMap& regions);

  // One pass over the rows of `count` segments, each of a different slot (count <= slots,
  // rows <= plan_step_rows). Appends each segment's keys and values to its cache and advances
  // its positions. Logits: one segment may ask for up to logit_rows of them; several segments
  // for one each. A row's result does not depend on the other rows of the pass.
  Error forward(const ForwardSegment* segments, uint32_t count);

  // What the KV policy's view of the model (llm/model_kv_hooks.h) shares with the pass: the
  // backend, the global layers' RoPE and the attention scale.
  ModelKvHooksConfig kv_hooks_config() const;

  // Sparse decode attention (llm/sparse_attention.cpp, docs/kv.md): from now on a decode row of a
  // global layer attends to the top-k pages of its cache when the cache holds more than k
  // tokens. Buffers: the plan's sparse_* regions; caches must keep page summaries of split.page.
  Error enable_sparse(const SparseSplit& split, const RegionMap& regions, const ThreadPool* pool);

  const ModelShape& shape() const { return shape_; }
  const PlanConfig& config() const { return config_; }
  float* logit_rows() const { return logit_rows_; }

 private:
  Error check_segments(const ForwardSegment* segments, uint32_t count, uint32_t* rows) const;
  void embed(const int32_t* tokens, uint32_t n, uint32_t row0);
  // cos/sin of rows [row0, row0 + n) at positions pos0.. under the global (local = false) or
  // local RoPE base; segment_rope_tables: every segment's rows.
  void rope_tables(int64_t pos0, uint32_t n, uint32_t row0, bool local);
  void segment_rope_tables(const ForwardSegment* segments, uint32_t count, bool local);
  bool layer_is_local(uint32_t layer) const { return keel::layer_is_local(layer, sliding_window_pattern_); }
  // The cache that holds `layer` for segment `g`, and the layer's index in it.
  KvCache& layer_cache(const ForwardSegment& g, uint32_t layer) const {
    return layer_is_local(layer) ? *g.local_kv : *g.kv;
  }
  uint32_t cache_layer(uint32_t layer) const { return layer_index_in_kind(layer, sliding_window_pattern_); }
  // The layer operations, over the pass's rows; LayerOps (llm/layer_ops.h) documents them.
  friend class LayerOps;
  void rmsnorm_rows(const float* in, const TensorView& weight, float* out);
  void scale_rows(float* rows, float s);
  void project_qkv(const LayerWeights& w);
  void norm_qk_heads(const LayerWeights& w);
  void attend(uint32_t layer);
  void project(const TensorView& w, const float* in, float* out);
  void residual(const float* delta);
  void gated_ffn(const LayerWeights& w, bool gelu);

  // RMSNorm of each of `n_heads` heads of every row, in place.
  void norm_heads(float* rows, uint32_t n, uint32_t n_heads, uint32_t row_stride, const TensorView& w);
  void apply_rope(float* rows, uint32_t n, uint32_t n_heads, uint32_t row_stride);
  // Segment `seg`'s rows [row0, row0 + n) against its cache: the backend's arguments for it in
  // `a`, or false when the sparse decode attention already did it.
  bool attention(KvCache& kv, uint32_t layer, uint32_t row0, uint32_t n, uint32_t seg, bool local, AttentionArgs& a);
  void logits(const ForwardSegment* segments, uint32_t count);
  // The decode row `row0` of segment `seg` against the tokens stage 2 selects; false (nothing
  // done) for an empty cache.
  bool sparse_attention(KvCache& kv, uint32_t layer, uint32_t row0, uint32_t seg);
  struct SparseJob;
  static void sparse_task(void* ctx, size_t kv_head);

  // A pass's attention goes to the backend in calls of up to kAttentionBatch segments, so the
  // work of every slot is split across the workers at once.
  static constexpr uint32_t kAttentionBatch = 16;
  AttentionArgs attention_batch_[kAttentionBatch] = {};

  ModelShape shape_;
  PlanConfig config_;
  Backend* backend_ = nullptr;
  float norm_eps_ = 1e-5f;
  uint32_t rope_dim_ = 0;
  bool rope_halves_ = false;
  bool qkv_bias_ = false;
  const Architecture* arch_ = nullptr;
  float query_scale_ = 0.0f;  // 0 = 1/sqrt(head_dim)
  uint32_t sliding_window_ = 0, sliding_window_pattern_ = 0;
  uint32_t local_layers_ = 0;  // layers whose keys go to a segment's local_kv

  // The pass under way: its segments and rows, and which layers' angles cos_/sin_ hold.
  const ForwardSegment* pass_segments_ = nullptr;
  uint32_t pass_count_ = 0, pass_rows_ = 0;
  bool tables_local_ = false;
  TensorView token_embd_, output_norm_, output_;
  const Model* model_ = nullptr;
  uint32_t capacity_ = 0;    // entries of one score row
  uint32_t query_rows_ = 1;  // score rows (re-rotated queries) per worker: plan_query_rows
  uint32_t step_rows_ = 0;   // rows of one pass (plan_step_rows)

  double* inv_freq_ = nullptr;        // [rope_dim / 2] global layers' (every layer's but the local ones)
  double* inv_freq_local_ = nullptr;  // [rope_dim / 2] local layers' (their own base)
  float *x_ = nullptr, *xb_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *att_ = nullptr, *hb_ = nullptr,
        *hb2_ = nullptr;
  ActBlock* xq_ = nullptr;
  float *cos_ = nullptr, *sin_ = nullptr;
  float* att_rows_ = nullptr;                          // [threads][query_rows][capacity]
  float* qrot_ = nullptr;                              // [threads][query_rows][head_dim]
  float *shift_cos_ = nullptr, *shift_sin_ = nullptr;  // [slots][rope_dim / 2], per segment
  float* logit_rows_ = nullptr;                        // [max(logit_rows, slots)][vocab]
  SparseSplit sparse_;                                 // budget 0: exact attention only
  uint16_t* sparse_gather_ = nullptr;
  int32_t* sparse_positions_ = nullptr;
  float* sparse_select_ = nullptr;
  const ThreadPool* pool_ = nullptr;
};

LayerWeights layer_weights(const Model& model, uint32_t layer);

// RoPE inverse frequencies of the model, [rope_dim / 2], in double, with Llama-3 / linear
// scaling folded in; `local`: Gemma 3's local layers (their own base, never scaled).
void rope_inverse_frequencies(const Model& model, uint32_t rope_dim, double* out, bool local = false);

}  // namespace keel
