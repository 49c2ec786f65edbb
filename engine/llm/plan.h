// The memory plan: every byte the engine uses, computed once from (model shape, KV budget,
// slots, chunk size, threads) before the first token. It is constexpr, so firmware sizes static
// arenas at compile time from the header `keel convert --header` emits. The engine takes its
// buffers from the arenas in exactly the order and sizes listed here, and a test checks that
// the arenas' use equals the plan to the byte.
#pragma once

#include <cstdint>

namespace keel {

struct PlanShape {
  uint32_t vocab_size;
  uint32_t dim;
  uint32_t n_layers;
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  uint32_t ffn_dim;
  uint32_t tokenizer_bytes;   // tokenizer lookup tables (engine/text), from the model file
};

struct PlanConfig {
  uint32_t kv_budget_tokens = 1024;
  uint32_t slots = 1;
  uint32_t chunk_tokens = 64;
  uint32_t threads = 1;
  uint32_t logit_rows = 1;    // tokens of a chunk whose logits are computed together (ppl: more)
  uint32_t obs_window = 32;  // SnapKV observation window; 0 when the policy does not use SnapKV
  // Persistent bytes of backend state that exists only at run time: XNNPACK's operators and its
  // packed copy of the F32 weights, measured by xnnpack_persistent_bytes() (llm/transformer.h).
  // 0 for the ref and native backends, and in firmware plans (no XNNPACK on bare metal).
  uint64_t backend_bytes = 0;
};

constexpr uint64_t kPlanAlign = 64;
constexpr uint64_t plan_align(uint64_t n) { return (n + kPlanAlign - 1) / kPlanAlign * kPlanAlign; }
constexpr uint64_t kActBlockBytes = 40;   // keel::ActBlock: f32 scale, i32 sum, 32 x i8
constexpr uint64_t act_block_count(uint64_t cols) { return (cols + 31) / 32; }
constexpr uint64_t kSlotStateBytes = 1024;  // slot record: cache view, sampler state, recent tokens
// Scratch one tokenizer encode() call may take (text::Tokenizer::scratch_bytes() fits in it).
constexpr uint64_t kTextScratchBytes = 64 * 1024;

struct MemoryPlan {
  // Persistent arena
  uint64_t kv_capacity_tokens = 0;  // per slot: budget + one prefill chunk before compression
  uint64_t kv_bytes = 0;            // all slots: K, V [layers][kv_heads][capacity][head_dim] f16 + positions
  uint64_t logits_bytes = 0;        // all slots: [vocab] f32
  uint64_t tokenizer_bytes = 0;
  uint64_t rope_bytes = 0;          // inverse frequencies, f64
  uint64_t backend_bytes = 0;       // XNNPACK block (PlanConfig::backend_bytes)
  uint64_t persistent_bytes = 0;
  // Scratch arena (one chunk, reused layer after layer)
  uint64_t activation_bytes = 0;
  uint64_t attention_bytes = 0;
  uint64_t logit_rows_bytes = 0;
  uint64_t sampler_bytes = 0;
  uint64_t text_bytes = 0;
  uint64_t scratch_bytes = 0;
};

constexpr uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

// Bytes of one slot's KV cache: keys+values, positions, and twice the unrotated queries of
// `obs_window` tokens: SnapKV's observation window and the lookahead (the prompt's end).
constexpr uint64_t plan_kv_slot_bytes(const PlanShape& s, uint64_t capacity, uint64_t obs_window) {
  const uint64_t heads = uint64_t(s.n_layers) * s.n_kv_heads;
  return plan_align(heads * capacity * s.head_dim * 2 * 2) + plan_align(heads * capacity * 4) +
         plan_align(uint64_t(s.n_layers) * obs_window * s.n_heads * s.head_dim * 4) * 2;
}

constexpr MemoryPlan plan_memory(const PlanShape& s, const PlanConfig& c) {
  MemoryPlan p{};
  const uint64_t chunk = c.chunk_tokens ? c.chunk_tokens : 1;
  const uint64_t threads = c.threads ? c.threads : 1;
  const uint64_t slots = c.slots ? c.slots : 1;
  const uint64_t logit_rows = c.logit_rows ? c.logit_rows : 1;
  const uint64_t q_dim = uint64_t(s.n_heads) * s.head_dim;
  const uint64_t kv_dim = uint64_t(s.n_kv_heads) * s.head_dim;

  // Persistent, in allocation order: tokenizer, rope table, backend block, then per slot KV
  // cache, logits, state.
  p.kv_capacity_tokens = uint64_t(c.kv_budget_tokens) + chunk;
  p.tokenizer_bytes = plan_align(s.tokenizer_bytes);
  p.rope_bytes = plan_align(uint64_t(s.head_dim / 2) * 8);
  p.backend_bytes = plan_align(c.backend_bytes);
  p.kv_bytes = slots * plan_kv_slot_bytes(s, p.kv_capacity_tokens, c.obs_window);
  p.logits_bytes = slots * (plan_align(uint64_t(s.vocab_size) * 4) + plan_align(kSlotStateBytes));
  p.persistent_bytes = p.tokenizer_bytes + p.rope_bytes + p.backend_bytes + p.kv_bytes + p.logits_bytes;

  // Scratch, in allocation order: x, xb, q, k, v, att, hb, hb2 (f32 [chunk][width]), the
  // quantized copy of the widest matmul input, RoPE cos and sin per token.
  const uint64_t widest_in = max_u64(max_u64(s.dim, q_dim), s.ffn_dim);
  p.activation_bytes = plan_align(chunk * s.dim * 4) * 2 + plan_align(chunk * q_dim * 4) +
                       plan_align(chunk * kv_dim * 4) * 2 + plan_align(chunk * q_dim * 4) +
                       plan_align(chunk * uint64_t(s.ffn_dim) * 4) * 2 +
                       plan_align(chunk * act_block_count(widest_in) * kActBlockBytes) +
                       plan_align(chunk * uint64_t(s.head_dim / 2) * 4) * 2;
  // One probability row over the whole cache and one re-rotated query per worker, the RoPE
  // table of the chunk's cache-position shift; with SnapKV, per worker: a score row, the summed
  // scores, their pooled copy, the selection order and kept indices, and the compaction buffer.
  const uint64_t cap = p.kv_capacity_tokens;
  p.attention_bytes = plan_align(threads * cap * 4) + plan_align(threads * uint64_t(s.head_dim) * 4) +
                      plan_align(uint64_t(s.head_dim / 2) * 4) * 2;
  if (c.obs_window > 0) {
    // Per worker; and the cos/sin of the observation and lookahead queries.
    p.attention_bytes += plan_align(threads * cap * 4) * 5 + plan_align(threads * cap * (uint64_t(s.head_dim) * 4 + 4)) +
                         plan_align(uint64_t(c.obs_window) * 2 * 4 * (s.head_dim / 2) * 4);
  }
  p.logit_rows_bytes = plan_align(logit_rows * s.vocab_size * 4);
  // Sampler: (logit, id) candidates over the vocabulary and a bitmap of seen tokens.
  p.sampler_bytes = plan_align(uint64_t(s.vocab_size) * 8 + (uint64_t(s.vocab_size) + 31) / 32 * 4 + 16);
  p.text_bytes = kTextScratchBytes;
  p.scratch_bytes = p.activation_bytes + p.attention_bytes + p.logit_rows_bytes + p.sampler_bytes + p.text_bytes;
  return p;
}

}  // namespace keel
