// The llama family: Llama 2 and 3, SmolLM2, Qwen2 (biases on q, k and v), llama2.c's stories.
// Pre-norm blocks over RMSNorm; rotary positions on q and k; a SwiGLU FFN.
//   x += Wo . attention(RoPE(q), RoPE(k), v),  q, k, v = Wq, Wk, Wv . RMSNorm(x) (+ b)
//   x += Wdown . (silu(Wgate . h) * (Wup . h)), h = RMSNorm(x)
#include "llm/architecture.h"
#include "llm/layer_ops.h"

namespace keel {
namespace {

AttentionTraits llama_attention(const Model&) { return AttentionTraits{}; }

void llama_forward(LayerOps& op) {
  for (uint32_t l = 0; l < op.layers(); ++l) {
    const LayerWeights w = op.weights(l);
    op.rmsnorm(op.x(), w.attn_norm, op.xb());
    op.project_qkv(w);
    op.attend(l);
    op.project(w.wo, op.att(), op.xb());
    op.residual(op.xb());

    op.rmsnorm(op.x(), w.ffn_norm, op.xb());
    op.gated_ffn(w, FfnGate::Silu);
    op.residual(op.xb());
  }
}

}  // namespace

// RocketKV's own page ranking: the heads of a GQA group look for the same tokens and summing
// their bounds rewards that agreement (SmolLM2 pass keys at 4k: 8 of 10 against 3 with Head).
// RocketKV's kernel of 63: SmolLM2's 8k pass keys, 4 of 10 against 1 with 31. snapkv pools with
// snapstream's 31, not the SnapKV paper's 7: SmolLM2 writes a number digit by digit, and on the
// 4k RULER prompts at budget 1024 (10 per task) 7 found 4 single needles and 1 multikey, 31 found
// 10 and 4, as many as the full cache (docs/notes/kvpress.md, "snapkv at 8k").
const Architecture kLlamaArchitecture{"llama",
                                      fb::ArchFamily::Llama,
                                      llama_attention,
                                      llama_forward,
                                      RocketSelect::Group,
                                      kSnapKernelRocketKV,
                                      kSnapKernelSnapStream};

}  // namespace keel
