#include "llm/plan_model.h"

#include "llm/architecture.h"
#include "text/tokenizer.h"

namespace keel {

PlanShape plan_shape(const Model& model) {
  const ModelShape& s = model.shape();
  PlanShape p{s.vocab_size, s.dim,
              s.n_layers,   s.n_heads,
              s.n_kv_heads, s.head_dim,
              s.ffn_dim,    static_cast<uint32_t>(text::Tokenizer::arena_bytes(model.meta()->tokenizer()))};
  // A loaded model's family always has an architecture (Model::load checks the family).
  if (const Architecture* arch = find_architecture(model.meta()->arch()->family())) {
    const AttentionTraits traits = arch->attention(model);
    p.local_layers = local_layer_count(s.n_layers, traits.sliding_window_pattern);
    p.sliding_window = p.local_layers > 0 ? traits.sliding_window : 0;
  }
  return p;
}

}  // namespace keel
