// Gemma 3 (270M and up). The llama block with four changes: the embedding scaled by sqrt(dim);
// each query and key head RMS-normalized before RoPE; a second RMSNorm on the attention and the
// FFN outputs before each residual add (the "sandwich"); a GELU(tanh)-gated FFN. Five layers in
// six are local: they see the last `sliding_window` positions under their own RoPE base (the
// plan gives their keys a ring of that length); every sliding_window_pattern-th layer is
// global. Queries are scaled by the model's query_scale rather than 1/sqrt(head_dim).
#include <cmath>

#include "llm/architecture.h"
#include "llm/layer_ops.h"

namespace keel {
namespace {

AttentionTraits gemma3_attention(const Model& model) {
  const fb::Hyper* h = model.meta()->hyper();
  return AttentionTraits{h->query_scale(), h->sliding_window(), h->sliding_window_pattern()};
}

void gemma3_forward(LayerOps& op) {
  op.scale(op.x(), std::sqrt(float(op.dim())));  // in f32, as llama.cpp does
  for (uint32_t l = 0; l < op.layers(); ++l) {
    const LayerWeights w = op.weights(l);
    op.rmsnorm(op.x(), w.attn_norm, op.xb());
    op.project_qkv(w);
    op.norm_qk_heads(w);
    op.attend(l);
    op.project(w.wo, op.att(), op.xb());
    op.rmsnorm(op.xb(), w.post_attn_norm, op.xb());
    op.residual(op.xb());

    op.rmsnorm(op.x(), w.ffn_norm, op.xb());
    op.gated_ffn(w, FfnGate::GeluTanh);
    op.rmsnorm(op.xb(), w.post_ffn_norm, op.xb());
    op.residual(op.xb());
  }
}

}  // namespace

// Page ranking by each head's own estimate on spread-weighted dimensions: Gemma 3's normalized
// keys carry near-constant dimensions that |q| alone picks, and its one KV head serves query
// heads that look for different tokens (RULER-style 4k prompts at capacity 1024: 8 of 10
// needles against 0 of 10 with the group's summed bound). Its stage 1 pools with snapstream's
// kernel: with RocketKV's 63 after every chunk the same prompts lost 8 of 10 single needles.
// snapkv pools with 31 too: Gemma 3 spells a number digit by digit, and with SnapKV's 7 after
// every chunk the 8k prompts at budget 2048 kept numbers with digits missing (single 3 of 5,
// multikey 1 of 5, against 5 and 3 with 31; docs/notes/kvpress.md).
const Architecture kGemma3Architecture{"gemma3",           fb::ArchFamily::Gemma3, gemma3_attention,     gemma3_forward,
                                       RocketSelect::Head, kSnapKernelSnapStream,  kSnapKernelSnapStream};

}  // namespace keel
