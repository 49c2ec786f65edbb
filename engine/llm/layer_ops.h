// The operations an architecture's blocks are written in (llm/models/*.cpp). Each works on every
// row R of the current pass at once (one or more segments, each a run of one slot's tokens), so
// a matmul reads its weights once per pass. Buffers, as in the plan (llm/plan.h):
//   x  [R][dim]      the residual stream          xb  [R][dim]     a block's input or output
//   q  [R][q_dim]    k, v [R][kv_dim]             att [R][q_dim]   attention output
//   hb, hb2 [R][ffn] the FFN's gate and up rows   q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim
#pragma once

#include <cstdint>

#include "llm/transformer.h"

namespace keel {

enum class FfnGate : uint8_t { Silu, GeluTanh };

class LayerOps {
 public:
  explicit LayerOps(Transformer& t) : t_(t) {}

  uint32_t layers() const { return t_.shape_.n_layers; }
  uint32_t dim() const { return t_.shape_.dim; }
  LayerWeights weights(uint32_t layer) const { return layer_weights(*t_.model_, layer); }
  float* x() const { return t_.x_; }
  float* xb() const { return t_.xb_; }
  float* att() const { return t_.att_; }

  // out[t] = RMSNorm(in[t]) * weight over dim, for every row; in may be out.
  void rmsnorm(const float* in, const TensorView& weight, float* out) { t_.rmsnorm_rows(in, weight, out); }
  // rows[t] *= s over dim (in f32).
  void scale(float* rows, float s) { t_.scale_rows(rows, s); }
  // q, k, v from xb (the input quantized once for the three), plus the biases where the model has them.
  void project_qkv(const LayerWeights& w) { t_.project_qkv(w); }
  // Each query and key head RMS-normalized by q_norm / k_norm, before RoPE.
  void norm_qk_heads(const LayerWeights& w) { t_.norm_qk_heads(w); }
  // Attention of `layer`: the unrotated queries kept for SnapKV's observation window, RoPE on q
  // and k (a local layer's own base), k and v appended to each segment's cache (a local layer's
  // to its ring) and every row attending to its own slot's cache (a local layer's to the last
  // sliding_window positions) into att.
  void attend(uint32_t layer) { t_.attend(layer); }
  // out[t] = w . in[t]: in [R][w.cols], out [R][w.rows].
  void project(const TensorView& w, const float* in, float* out) { t_.project(w, in, out); }
  // x[t] += delta[t].
  void residual(const float* delta) { t_.residual(delta); }
  // xb = down(gate_fn(gate . xb) * (up . xb)), through hb and hb2.
  void gated_ffn(const LayerWeights& w, FfnGate gate) { t_.gated_ffn(w, gate == FfnGate::GeluTanh); }

 private:
  Transformer& t_;
};

}  // namespace keel
