// The llama-family forward pass over a static plan: token embedding, per layer RMSNorm ->
// q/k/v (+bias) -> RoPE -> grouped-query attention over the KV cache -> output projection ->
// residual -> RMSNorm -> SwiGLU FFN -> residual, then the final norm and the LM head. It runs a
// chunk of up to `chunk_tokens` tokens at a time (prefill) or a single token (decode); every
// buffer comes from the arenas at init, in the order of plan.h.
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "core/result.h"
#include "core/threads.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "llm/backend.h"
#include "llm/plan.h"
#include "model/model.h"

namespace keel {

namespace xnn {
class ModelOps;
}

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, gate, up, down;
};

class Transformer {
 public:
  // Takes the RoPE table from `persistent` and the chunk buffers from `scratch`.
  Error init(const Model& model, const Backend& backend, const PlanConfig& config, Arena& persistent,
             Arena& scratch, const ThreadPool* pool);

  // Runs tokens[0..n) (n <= chunk_tokens) at positions kv.next_position() + t, appending their
  // keys and values to `kv` (the caller made room). If `logits` is non-null, writes the logits
  // of the last `n_logits` tokens there, [n_logits][vocab] (n_logits <= logit_rows).
  Error forward(KvCache& kv, const int32_t* tokens, uint32_t n, float* logits, uint32_t n_logits);

  // SnapKV: keeps `target` entries of prefix + ring + `staged` per (layer, KV head): the first
  // `sinks`, the last `window` (the observation window) and the best-scored others (docs/kv.md).
  // `kernel` 0 = adaptive pooling. With `lookahead` the cache's lookahead queries (the end of
  // the prompt being prefilled) score the entries as well. The newest `recent` entries stay
  // whole as the ring (snapstream's recent window); the rest of the target is the prefix.
  Error compress_snapkv(KvCache& kv, uint32_t staged, uint32_t target, uint32_t sinks, uint32_t window,
                        uint32_t kernel, bool lookahead = false, uint32_t recent = 0);
  // Re-rotates a half key from rotation position `from` to `to` (RoPE composes by addition).
  void rotate_key(uint16_t* key, int64_t from, int64_t to) const;

  const ModelShape& shape() const { return shape_; }
  const PlanConfig& config() const { return config_; }
  float* logit_rows() const { return logit_rows_; }
  // The XNNPACK operators in use, nullptr when the backend runs none.
  const xnn::ModelOps* xnnpack_ops() const { return xnn_; }

 private:
  void embed(const int32_t* tokens, uint32_t n);
  void rope_tables(int64_t pos0, uint32_t n);
  void apply_rope(float* rows, uint32_t n, uint32_t n_heads, uint32_t row_stride);
  // y[n][w.rows] (stride y_stride) = x[n][w.cols] * W^T; `xq` holds x quantized when w is.
  void matmul(const TensorView& w, const float* x, uint32_t x_stride, bool x_quantized, uint32_t n, float* y,
              uint32_t y_stride);
  bool quantize_input(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride);
  void attention(KvCache& kv, uint32_t layer, uint32_t n);
  struct SnapJob;
  static void snap_task(void* ctx, size_t worker);
  void snap_head(const SnapJob& job, uint32_t worker, uint32_t layer, uint32_t head);

  ModelShape shape_;
  PlanConfig config_;
  Backend backend_;
  const ThreadPool* pool_ = nullptr;
  float norm_eps_ = 1e-5f;
  uint32_t rope_dim_ = 0;
  bool rope_halves_ = false;
  bool qkv_bias_ = false;
  TensorView token_embd_, output_norm_, output_;
  const Model* model_ = nullptr;
  uint32_t capacity_ = 0;

  double* inv_freq_ = nullptr;  // [rope_dim / 2]
  float *x_ = nullptr, *xb_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *att_ = nullptr,
        *hb_ = nullptr, *hb2_ = nullptr;
  ActBlock* xq_ = nullptr;
  float *cos_ = nullptr, *sin_ = nullptr;
  float* att_rows_ = nullptr;     // [threads][capacity]
  float* qrot_ = nullptr;         // [threads][head_dim]
  float *shift_cos_ = nullptr, *shift_sin_ = nullptr;  // [rope_dim / 2]
  float *snap_row_ = nullptr, *snap_acc_ = nullptr, *snap_pool_ = nullptr;  // [threads][capacity]
  uint32_t *snap_order_ = nullptr, *snap_keep_ = nullptr;                    // [threads][capacity]
  void* snap_compact_ = nullptr;                                             // [threads][compact bytes]
  float* snap_rope_ = nullptr;  // [2 * obs_window][cos t, sin t, cos c, sin c][rope_dim / 2]
  float* logit_rows_ = nullptr;   // [logit_rows][vocab]
  xnn::ModelOps* xnn_ = nullptr;  // XNNPACK operators (backend.xnnpack_ops), in the backend block
};

LayerWeights layer_weights(const Model& model, uint32_t layer);

// The XNNPACK block of the plan: bytes the operators that backend `kind` uses for this model
// take in the persistent arena (their records and XNNPACK's packed copy of the F32 weights).
// Set PlanConfig::backend_bytes to it before planning the arenas. XNNPACK sizes its packing
// only when an operator is created, so this creates every operator once in `work`: host
// memory, 64-byte aligned, of at least xnnpack_work_bytes() bytes (reused operator after
// operator, free again on return). 0 when `kind` uses no XNNPACK operator for this model:
// ref, native, or auto on a model without F32 matrices.
Result<uint64_t> xnnpack_persistent_bytes(const Model& model, const PlanConfig& config, BackendKind kind,
                                          Span<uint8_t> work);
uint64_t xnnpack_work_bytes(const Model& model, const PlanConfig& config, BackendKind kind);

}  // namespace keel
