#include "llm/plan_model.h"

#include "text/tokenizer.h"

namespace keel {

PlanShape plan_shape(const Model& model) {
  const ModelShape& s = model.shape();
  return PlanShape{s.vocab_size, s.dim,
                   s.n_layers,   s.n_heads,
                   s.n_kv_heads, s.head_dim,
                   s.ffn_dim,    static_cast<uint32_t>(text::Tokenizer::arena_bytes(model.meta()->tokenizer()))};
}

}  // namespace keel
