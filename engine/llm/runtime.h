// The runtime: a verified model, a backend, and per-slot KV caches, all in caller-provided
// arenas laid out once by the plan. After init() nothing allocates: prefill, decode, sampling
// and tokenization only do checked pointer math inside the arenas.
#pragma once

#include <cstdint>

#include "backend/registry.h"
#include "core/arena.h"
#include "core/result.h"
#include "core/span.h"
#include "core/threads.h"
#include "kv/kv_cache.h"
#include "kv/kv_manager.h"
#include "kv/kv_policy.h"
#include "kv/slot_memory.h"
#include "llm/plan.h"
#include "llm/model_kv_hooks.h"
#include "llm/transformer.h"
#include "model/model.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace keel {

struct RuntimeConfig {
  PlanConfig plan;
  KvPolicyConfig kv;
  BackendKind backend = BackendKind::Auto;
};

struct RuntimeStats {
  uint64_t persistent_used_bytes = 0;
  uint64_t persistent_planned_bytes = 0;
  uint64_t tokenizer_used_bytes = 0;  // of the tokenizer region
  uint64_t scratch_high_water_bytes = 0;
  uint64_t scratch_planned_bytes = 0;
  uint64_t tokens_prefilled = 0;
  uint64_t tokens_decoded = 0;
};

// One slot's share of a batched pass (Runtime::run): a chunk of the prompt that
// begin_prompt started, or the one token to decode.
struct SlotWork {
  uint32_t slot = 0;
  const int32_t* tokens = nullptr;  // [n]
  uint32_t n = 0;                   // prompt: 1..chunk_tokens; decode: 1
  bool prompt = false;              // a prompt chunk (else a decode token, which gets logits)
  bool prompt_end = false;          // the prompt's last chunk: its last token's logits are kept
  Status status = Status::Ok;       // out: KvFull (nothing appended) or the slot's own failure
};
static_assert(record_planned<sizeof(SlotWork), kSlotWorkBytes>());

class Runtime {
 public:
  // The plan for this model and configuration (what init() will take from the arenas).
  static MemoryPlan plan(const Model& model, const RuntimeConfig& config);

  // Lays out the arenas. `persistent` and `scratch` must be 64-byte aligned and at least the
  // planned sizes (ArenaTooSmall names both numbers otherwise). The model must stay loaded.
  Error init(const Model& model, const RuntimeConfig& config, Span<uint8_t> persistent, Span<uint8_t> scratch,
             const ThreadPool* pool);
  bool initialized() const { return model_ != nullptr; }

  // Appends tokens to the slot's sequence in chunks; afterwards logits(slot) holds the logits
  // of the last token. Fails with KvFull (nothing appended) when the sequence would not fit.
  Error prefill(uint32_t slot, Span<const int32_t> tokens);
  // One token: prefill of length 1.
  Error decode(uint32_t slot, int32_t token);

  // The batched path (prefill and decode above are its one-slot case). begin_prompt checks a
  // prompt, makes room for all of it (KvFull under `full` when it does not fit, the slot
  // unchanged) and, when the policy wants the prompt's end first (SnapKV), runs that lookahead
  // pass; the prompt then goes through run() in chunks of chunk_tokens (the last may be
  // shorter), in order, the last marked prompt_end.
  Error begin_prompt(uint32_t slot, Span<const int32_t> tokens);
  // One forward pass over every entry (distinct slots, rows <= plan_step_rows), then each
  // slot's KV policy settles its new entries. A slot's failure (a decode that does not fit a
  // `full` budget, an invalid token, a chunk out of order) is its entry's status and leaves the
  // others running; a refused prompt chunk clears its slot. The returned error is the pass's.
  Error run(SlotWork* work, uint32_t count);
  // Tokens of the prompt begin_prompt started that run() has not taken yet.
  uint64_t prompt_left(uint32_t slot) const;
  // Runs tokens through the model and calls fn(ctx, i, logits[vocab]) with the logits
  // predicting token i + 1, for every i (perplexity).
  Error score(uint32_t slot, Span<const int32_t> tokens, void (*fn)(void* ctx, size_t i, const float* logits),
              void* ctx);

  Span<const float> logits(uint32_t slot) const;

  // Text -> ids with the model's tokenizer, using the runtime's text scratch.
  Error tokenize(const char* text, size_t len, const text::EncodeOptions& options, Span<int32_t> out, size_t* n_tokens);
  // Sampling settings of a slot (greedy until set).
  Error set_sampler(uint32_t slot, const text::SamplerConfig& config);
  // Picks the next token from the slot's current logits (the repetition penalty sees the
  // slot's recent tokens and changes the logits in place).
  Result<int32_t> sample(uint32_t slot);
  // The slot's cache of the global layers (every layer's, for models without local layers),
  // which the KV policy governs; and the local layers' ring (empty shape when there are none).
  const KvCache& kv_cache(uint32_t slot) const { return slot_at(slot).kv.cache(); }
  // The KV policy's owner, shared by the slots (what its next compression would be, for the emulator).
  const KvManager& kv_manager() const { return kv_; }
  const KvCache& local_kv_cache(uint32_t slot) const { return slot_at(slot).kv.local_or_empty(); }
  // Forgets the slot's sequence.
  Error reset(uint32_t slot);
  uint64_t sequence_length(uint32_t slot) const;

  const Model& model() const { return *model_; }
  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  const Backend& backend() const { return *backend_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  const RuntimeConfig& config() const { return config_; }
  RuntimeStats stats() const;
  uint32_t slots() const { return config_.plan.slots; }
  // The plan's `requests` region, which a Scheduler over this runtime keeps its records in.
  Span<uint8_t> request_records() const;

 private:
  static constexpr uint32_t kRecentTokens = 64;  // history the repetition penalty sees
  struct Slot {
    SlotMemory kv;
    float* logits = nullptr;
    uint64_t prefilled = 0;
    uint64_t decoded = 0;
    text::Sampler sampler;
    int32_t recent[kRecentTokens] = {};  // the last tokens of the sequence, oldest first
    uint32_t recent_count = 0;
    uint64_t prompt_left = 0;  // of the prompt begin_prompt started
  };
  // Checks one entry before a pass; Ok, or why it cannot run.
  Status check_work(const SlotWork& w) const;
  void remember(Slot& s, const int32_t* tokens, size_t n);
  Error check_slot(uint32_t slot) const;
  // The forward pass of the slot's lookahead (SlotMemory::begin_lookahead), which keeps the
  // queries of the prompt's end and leaves the caches as they were.
  Error capture_lookahead(Slot& s);
  // Empties a slot: cache, counters, recent tokens (reset, and a prefill refused half-way).
  void clear_slot(Slot& s);
  Slot& slot_at(uint32_t i) const;

  const Model* model_ = nullptr;
  RuntimeConfig config_;
  MemoryPlan plan_;
  BackendStorage backend_storage_;
  Backend* backend_ = nullptr;
  text::Tokenizer tokenizer_;
  Transformer transformer_;
  ModelKvHooks kv_hooks_;  // the model as the KV policy sees it
  KvManager kv_;
  uint64_t tokenizer_used_bytes_ = 0;
  uint64_t persistent_used_bytes_ = 0;  // reach of the buffers init placed (RegionMap)
  uint64_t scratch_used_bytes_ = 0;
  uint8_t* sampler_mem_ = nullptr;      // scratch region shared by the slots' samplers
  uint8_t* text_mem_ = nullptr;         // scratch region for tokenize()
  uint8_t* slots_ = nullptr;            // [slots][kSlotRecordBytes] records in the persistent arena
  ForwardSegment* segments_ = nullptr;  // [slots] of one pass (scratch)
  uint8_t* requests_ = nullptr;         // the scheduler's records (plan region `requests`)
};

}  // namespace keel
