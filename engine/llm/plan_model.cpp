#include "llm/plan_model.h"

#include "text/tokenizer.h"

namespace keel {

PlanShape plan_shape(const Model& model) {
  const ModelShape& s = model.shape();
  PlanShape p{s.vocab_size, s.dim,
              s.n_layers,   s.n_heads,
              s.n_kv_heads, s.head_dim,
              s.ffn_dim,    static_cast<uint32_t>(text::Tokenizer::arena_bytes(model.meta()->tokenizer()))};
  if (model.meta()->arch()->family() == fb::ArchFamily::Gemma3) {
    const fb::Hyper* h = model.meta()->hyper();
    p.local_layers = local_layer_count(s.n_layers, h->sliding_window_pattern());
    p.sliding_window = h->sliding_window();
  }
  return p;
}

}  // namespace keel
