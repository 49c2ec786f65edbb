#include "llm/runtime.h"

#include <cinttypes>
#include <cstring>
#include <new>

#include "core/check.h"
#include "llm/plan_model.h"

namespace keel {

MemoryPlan Runtime::plan(const Model& model, const PlanConfig& config) {
  return plan_memory(plan_shape(model), config);
}

Error Runtime::init(const Model& model, const RuntimeConfig& config, Span<uint8_t> persistent, Span<uint8_t> scratch,
                   const ThreadPool* pool) {
  model_ = nullptr;
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  const PlanConfig& pc = config.plan;
  KEEL_ENSURE(pc.slots >= 1 && pc.chunk_tokens >= 1 && pc.kv_budget_tokens >= 1 && pc.threads >= 1,
              Status::InvalidArgument,
              "slots %" PRIu32 ", chunk %" PRIu32 ", budget %" PRIu32 ", threads %" PRIu32 "; each must be at least 1",
              pc.slots, pc.chunk_tokens, pc.kv_budget_tokens, pc.threads);
  KEEL_ENSURE(pool == nullptr || pool->threads <= pc.threads, Status::InvalidArgument,
              "thread pool has %zu threads but the plan was made for %" PRIu32, pool ? pool->threads : 0, pc.threads);
  KEEL_ENSURE(reinterpret_cast<uintptr_t>(persistent.data()) % kPlanAlign == 0 &&
                  reinterpret_cast<uintptr_t>(scratch.data()) % kPlanAlign == 0,
              Status::InvalidArgument, "arenas must be %llu-byte aligned", (unsigned long long)kPlanAlign);
  const MemoryPlan p = plan(model, pc);
  KEEL_ENSURE(persistent.size() >= p.persistent_bytes, Status::ArenaTooSmall,
              "persistent arena is %zu bytes; the plan needs %llu", persistent.size(),
              (unsigned long long)p.persistent_bytes);
  KEEL_ENSURE(scratch.size() >= p.scratch_bytes, Status::ArenaTooSmall,
              "scratch arena is %zu bytes; the plan needs %llu", scratch.size(), (unsigned long long)p.scratch_bytes);
  KEEL_TRY(validate_kv_policy(config.kv, pc.kv_budget_tokens, pc.chunk_tokens));
  KEEL_ENSURE(!kv_policy_uses_snapkv(config.kv.kind) || (pc.obs_window >= config.kv.obs_window),
              Status::InvalidArgument,
              "policy %s needs a plan with a SnapKV observation window of %" PRIu32 " (plan has %" PRIu32 ")",
              kv_policy_name(config.kv.kind), config.kv.obs_window, pc.obs_window);
  Result<Backend> b = select_backend(config.backend);
  if (!b.ok()) return b.error();

  persistent_.reset(persistent.data(), persistent.size());
  scratch_.reset(scratch.data(), scratch.size());
  // The tokenizer's tables take at most its planned bytes; the rest of that block stays unused
  // so the arena's layout is exactly the plan's.
  const size_t tok_mark = persistent_.used();
  KEEL_TRY(tokenizer_.init(model.meta()->tokenizer(), persistent_));
  const size_t tok_used = persistent_.used() - tok_mark;
  KEEL_ENSURE(tok_used <= p.tokenizer_bytes, Status::Internal, "tokenizer took %zu bytes, planned %llu", tok_used,
              (unsigned long long)p.tokenizer_bytes);
  persistent_.allocate(p.tokenizer_bytes - tok_used, 1);
  KEEL_ENSURE(text::Tokenizer::scratch_bytes() <= kTextScratchBytes, Status::Internal,
              "tokenizer scratch %zu exceeds the planned %llu", text::Tokenizer::scratch_bytes(),
              (unsigned long long)kTextScratchBytes);
  KEEL_TRY(transformer_.init(model, b.value(), pc, persistent_, scratch_, pool));
  KEEL_ENSURE(text::Sampler::arena_bytes(model.shape().vocab_size) <= p.sampler_bytes, Status::Internal,
              "sampler needs %zu bytes, planned %llu", text::Sampler::arena_bytes(model.shape().vocab_size),
              (unsigned long long)p.sampler_bytes);
  sampler_mem_ = static_cast<uint8_t*>(scratch_.allocate(p.sampler_bytes));
  text_mem_ = static_cast<uint8_t*>(scratch_.allocate(p.text_bytes));
  KEEL_ENSURE(sampler_mem_ && text_mem_, Status::ArenaTooSmall, "scratch arena too small for sampler and text");
  KEEL_ENSURE(scratch_.used() == p.scratch_bytes, Status::Internal, "scratch arena use %zu differs from the plan %llu",
              scratch_.used(), (unsigned long long)p.scratch_bytes);

  const KvShape kvs{model.shape().n_layers,        model.shape().n_kv_heads,
                    model.shape().head_dim,        uint32_t(p.kv_capacity_tokens),
                    pc.kv_budget_tokens,           model.shape().n_heads * model.shape().head_dim,
                    pc.obs_window};
  // Slot records: one block of kSlotStateBytes per slot, then each slot's cache and logits.
  static_assert(sizeof(Slot) <= kSlotStateBytes, "slot record exceeds its planned bytes");
  uint8_t* records = static_cast<uint8_t*>(persistent_.allocate(uint64_t(pc.slots) * kSlotStateBytes));
  KEEL_ENSURE(records, Status::ArenaTooSmall, "persistent arena too small for %" PRIu32 " slot records", pc.slots);
  slot_stride_ = kSlotStateBytes;
  slots_ = records;
  for (uint32_t i = 0; i < pc.slots; ++i) {
    Slot* s = new (records + uint64_t(i) * kSlotStateBytes) Slot();
    KEEL_TRY(s->kv.init(kvs, persistent_));
    s->logits = persistent_.allocate_array<float>(model.shape().vocab_size);
    KEEL_ENSURE(s->logits, Status::ArenaTooSmall, "persistent arena too small for the logits of slot %" PRIu32, i);
    Arena sampler_arena(sampler_mem_, p.sampler_bytes);
    KEEL_TRY(s->sampler.init(text::SamplerConfig{}, model.shape().vocab_size, sampler_arena));
  }
  KEEL_ENSURE(persistent_.used() == p.persistent_bytes, Status::Internal,
              "persistent arena use %zu differs from the plan %llu", persistent_.used(),
              (unsigned long long)p.persistent_bytes);
  model_ = &model;
  config_ = config;
  plan_ = p;
  backend_ = b.value();
  return Error();
}

Error Runtime::check_slot(uint32_t slot) const {
  KEEL_ENSURE(model_ != nullptr, Status::InvalidArgument, "engine is not initialized");
  KEEL_ENSURE(slot < config_.plan.slots, Status::InvalidArgument, "slot %" PRIu32 "; the engine has %" PRIu32, slot,
              config_.plan.slots);
  return Error();
}

Runtime::Slot& Runtime::slot_at(uint32_t i) const {
  return *reinterpret_cast<Slot*>(slots_ + uint64_t(i) * slot_stride_);
}

Error Runtime::make_room(Slot& s, uint32_t n) {
  // Only `full` refuses: it may grow to the budget, never past it. The others evict or compress.
  if (config_.kv.kind != KvPolicyKind::Full) return Error();
  const uint64_t budget = config_.plan.kv_budget_tokens;
  KEEL_ENSURE(s.kv.visible() + uint64_t(n) <= budget, Status::KvFull,
              "sequence of %" PRIu32 " tokens + %" PRIu32 " new exceeds the KV budget of %llu tokens (policy full)",
              s.kv.visible(), n, (unsigned long long)budget);
  return Error();
}

Error Runtime::settle(Slot& s, uint32_t n, bool prefill, bool lookahead) {
  const KvPolicyConfig& p = config_.kv;
  const uint32_t budget = config_.plan.kv_budget_tokens;
  KvCache& kv = s.kv;
  const bool overflow = kv.visible() + n > budget;
  switch (p.kind) {
    case KvPolicyKind::Full:
    case KvPolicyKind::Window:
      kv.append_ring(n);
      return Error();
    case KvPolicyKind::Streaming:
      if (overflow && kv.prefix() == 0 && kv.evicted() == 0) kv.pin_sinks(p.sinks);
      kv.append_ring(n);
      return Error();
    case KvPolicyKind::SnapKV:
      if (!overflow) {
        kv.append_ring(n);
        return Error();
      }
      return transformer_.compress_snapkv(kv, n, prefill ? budget : snapkv_decode_target(budget, config_.plan.chunk_tokens),
                                          0, p.obs_window, snap_kernel_of(p), lookahead);
    case KvPolicyKind::SnapStream: {
      const uint32_t ring = snapstream_window(p, budget);
      // Prompt chunks (and a first overflow while decoding) are compressed by SnapKV: the newest
      // `ring` tokens stay whole in the recent ring, the older ones compete for the prefix.
      // Afterwards generated tokens cycle through the ring, pushing out the prompt's tail.
      if (overflow && (prefill || kv.prefix() == 0)) {
        return transformer_.compress_snapkv(kv, n, budget, p.sinks, p.obs_window, snap_kernel_of(p), lookahead, ring);
      }
      kv.append_ring(n);
      return Error();
    }
  }
  return Error(Status::Internal, "unknown KV policy");
}

Error Runtime::prefill(uint32_t slot, Span<const int32_t> tokens) {
  KEEL_TRY(check_slot(slot));
  KEEL_ENSURE(!tokens.empty(), Status::InvalidArgument, "prefill of 0 tokens");
  Slot& s = slot_at(slot);
  const uint32_t vocab = model_->shape().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    KEEL_ENSURE(tokens[i] >= 0 && uint32_t(tokens[i]) < vocab, Status::InvalidArgument,
                "token id %" PRId32 " at %zu; expected 0..%" PRIu32, tokens[i], i, vocab - 1);
  }
  KEEL_ENSURE(tokens.size() <= 0xffffffffu, Status::PromptTooLong, "prompt of %zu tokens", tokens.size());
  KEEL_TRY(make_room(s, uint32_t(tokens.size())));
  const uint32_t chunk = config_.plan.chunk_tokens;
  // SnapKV scores each chunk's compression also by the prompt's last queries, computed first:
  // otherwise a chunk is judged only by its own end, before the question at the prompt's end
  // exists, and what the question asks for may already be gone (docs/kv.md).
  const bool ahead = kv_policy_uses_snapkv(config_.kv.kind) &&
                     uint64_t(s.kv.visible()) + tokens.size() > config_.plan.kv_budget_tokens &&
                     tokens.size() > chunk;
  if (ahead) KEEL_TRY(capture_lookahead(s, tokens));
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = uint32_t(tokens.size() - done < chunk ? tokens.size() - done : chunk);
    const bool last = done + n == tokens.size();
    Error e = transformer_.forward(s.kv, tokens.data() + done, n, last ? s.logits : nullptr, last ? 1 : 0);
    // The last chunk holds the real end of the prompt: its own queries are the lookahead.
    if (e.ok()) e = settle(s, n, true, ahead && !last);
    if (!e.ok()) {
      // A prompt refused half-way leaves no half of it behind: the slot starts over.
      clear_slot(s);
      return e;
    }
    done += n;
  }
  s.kv.drop_lookahead();
  s.prefilled += tokens.size();
  remember(s, tokens.data(), tokens.size());
  return Error();
}

Error Runtime::capture_lookahead(Slot& s, Span<const int32_t> tokens) {
  uint32_t n = s.kv.shape().obs_window;
  if (n > config_.plan.chunk_tokens) n = config_.plan.chunk_tokens;
  if (n > config_.kv.obs_window) n = config_.kv.obs_window;
  if (n > tokens.size()) n = uint32_t(tokens.size());
  if (n == 0) return Error();
  s.kv.begin_lookahead();
  const Error e = transformer_.forward(s.kv, tokens.data() + (tokens.size() - n), n, nullptr, 0);
  s.kv.end_lookahead(e.ok() ? n : 0);
  return e;
}

Error Runtime::decode(uint32_t slot, int32_t token) {
  KEEL_TRY(check_slot(slot));
  Slot& s = slot_at(slot);
  KEEL_ENSURE(token >= 0 && uint32_t(token) < model_->shape().vocab_size, Status::InvalidArgument,
              "token id %" PRId32 "; expected 0..%" PRIu32, token, model_->shape().vocab_size - 1);
  KEEL_TRY(make_room(s, 1));
  KEEL_TRY(transformer_.forward(s.kv, &token, 1, s.logits, 1));
  KEEL_TRY(settle(s, 1, false));
  s.decoded += 1;
  remember(s, &token, 1);
  return Error();
}

Error Runtime::score(uint32_t slot, Span<const int32_t> tokens, void (*fn)(void*, size_t, const float*), void* ctx) {
  KEEL_TRY(check_slot(slot));
  Slot& s = slot_at(slot);
  const uint32_t vocab = model_->shape().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    KEEL_ENSURE(tokens[i] >= 0 && uint32_t(tokens[i]) < vocab, Status::InvalidArgument,
                "token id %" PRId32 " at %zu; expected 0..%" PRIu32, tokens[i], i, vocab - 1);
  }
  KEEL_TRY(make_room(s, uint32_t(tokens.size() > 0xffffffffu ? 0xffffffffu : tokens.size())));
  const uint32_t step = config_.plan.logit_rows < config_.plan.chunk_tokens ? config_.plan.logit_rows
                                                                            : config_.plan.chunk_tokens;
  float* rows = transformer_.logit_rows();
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = uint32_t(tokens.size() - done < step ? tokens.size() - done : step);
    KEEL_TRY(transformer_.forward(s.kv, tokens.data() + done, n, rows, n));
    KEEL_TRY(settle(s, n, true));
    for (uint32_t t = 0; t < n; ++t) fn(ctx, done + t, rows + uint64_t(t) * vocab);
    done += n;
  }
  s.prefilled += tokens.size();
  remember(s, tokens.data(), tokens.size());
  return Error();
}

void Runtime::remember(Slot& s, const int32_t* tokens, size_t n) {
  // Oldest first; the last kRecentTokens tokens only.
  const size_t take = n < kRecentTokens ? n : kRecentTokens;
  const size_t keep = s.recent_count + take <= kRecentTokens ? size_t(s.recent_count) : kRecentTokens - take;
  if (keep < s.recent_count) memmove(s.recent, s.recent + (s.recent_count - keep), keep * sizeof(int32_t));
  memcpy(s.recent + keep, tokens + (n - take), take * sizeof(int32_t));
  s.recent_count = keep + take;
}

Error Runtime::tokenize(const char* text, size_t len, const text::EncodeOptions& options, Span<int32_t> out,
                        size_t* n_tokens) {
  KEEL_ENSURE(model_ != nullptr, Status::InvalidArgument, "engine is not initialized");
  Arena text_arena(text_mem_, plan_.text_bytes);
  return tokenizer_.encode(text, len, options, out, n_tokens, text_arena);
}

Error Runtime::set_sampler(uint32_t slot, const text::SamplerConfig& config) {
  KEEL_TRY(check_slot(slot));
  Arena sampler_arena(sampler_mem_, plan_.sampler_bytes);
  return slot_at(slot).sampler.init(config, model_->shape().vocab_size, sampler_arena);
}

Result<int32_t> Runtime::sample(uint32_t slot) {
  KEEL_TRY(check_slot(slot));
  Slot& s = slot_at(slot);
  KEEL_ENSURE(s.prefilled + s.decoded > 0, Status::InvalidArgument,
              "slot %" PRIu32 " has no logits yet: prefill first", slot);
  const int32_t id = s.sampler.sample(Span<float>(s.logits, model_->shape().vocab_size),
                                      Span<const int32_t>(s.recent, size_t(s.recent_count)));
  KEEL_ENSURE(id >= 0, Status::Internal, "sampler found no valid logit (all NaN?)");
  return id;
}

Span<const float> Runtime::logits(uint32_t slot) const {
  if (!model_ || slot >= config_.plan.slots) return Span<const float>();
  return Span<const float>(slot_at(slot).logits, model_->shape().vocab_size);
}

Error Runtime::reset(uint32_t slot) {
  KEEL_TRY(check_slot(slot));
  clear_slot(slot_at(slot));
  return Error();
}

void Runtime::clear_slot(Slot& s) {
  s.kv.clear();
  s.prefilled = 0;
  s.decoded = 0;
  s.recent_count = 0;
}

uint64_t Runtime::sequence_length(uint32_t slot) const {
  if (!model_ || slot >= config_.plan.slots) return 0;
  return uint64_t(slot_at(slot).kv.next_position());
}

RuntimeStats Runtime::stats() const {
  RuntimeStats st;
  st.persistent_used_bytes = persistent_.used();
  st.persistent_planned_bytes = plan_.persistent_bytes;
  st.scratch_high_water_bytes = scratch_.high_water();
  st.scratch_planned_bytes = plan_.scratch_bytes;
  for (uint32_t i = 0; model_ && i < config_.plan.slots; ++i) {
    st.tokens_prefilled += slot_at(i).prefilled;
    st.tokens_decoded += slot_at(i).decoded;
  }
  return st;
}

}  // namespace keel
