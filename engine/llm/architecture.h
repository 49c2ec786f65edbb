// An architecture: what sets one model family's forward pass apart. Each family is one file in
// llm/models/ that composes the shared layer operations (llm/layer_ops.h) into its blocks, the
// way a reader follows a model card; the pass's machinery (segments, caches, RoPE tables,
// attention batching, logits) is the Transformer's and the same for every family.
//
// Adding one (Qwen3, Phi-3, ...): its enum value in schema/keel.fbs, its tensors' checks in
// model/model.cpp, a file in llm/models/ defining its Architecture, a line in the table of
// llm/architecture.cpp, and the converter's mapping (tools/convert).
#pragma once

#include <cstdint>

#include "kv/kv_policy.h"
#include "model/model.h"

namespace keel {

class LayerOps;

// The attention geometry a family takes from its model file; the plan sizes the local ring from
// it and the pass masks and scales by it.
struct AttentionTraits {
  float query_scale = 0.0f;             // 0 = 1/sqrt(head_dim)
  uint32_t sliding_window = 0;          // positions a local layer sees; 0 = no local layers
  uint32_t sliding_window_pattern = 0;  // every pattern-th layer is global, the others local; 0 = all global
};

struct Architecture {
  const char* name;
  fb::ArchFamily family;
  AttentionTraits (*attention)(const Model& model);
  // The blocks of one pass: from the token embeddings in x to the last block's residual stream
  // in x (the final norm and the LM head follow, the same for every family).
  void (*forward)(LayerOps& op);
  // How sparse decode attention ranks pages when the caller does not say (--rocket-select):
  // the ranking that finds this family's keys (docs/notes/rocketkv.md, measured per family).
  RocketSelect sparse_ranking;
  // rocketkv's stage-1 pooling kernel when the caller does not say (--snap-kernel).
  uint32_t rocketkv_kernel;
  // snapkv's pooling kernel when the caller does not say: Keel's snapkv compresses after every
  // chunk once a prompt is past the budget, where a small pool keeps a many-token fact in pieces.
  uint32_t snapkv_kernel;
};

extern const Architecture kLlamaArchitecture;   // llm/models/llama.cpp
extern const Architecture kGemma3Architecture;  // llm/models/gemma3.cpp

// The architecture of `family`, or null for one Keel does not run.
const Architecture* find_architecture(fb::ArchFamily family);

}  // namespace keel
