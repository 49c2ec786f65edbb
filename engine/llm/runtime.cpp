#include "llm/runtime.h"

#include <cinttypes>
#include <cstring>
#include <new>

#include "core/check.h"
#include "llm/plan_model.h"

namespace keel {

MemoryPlan Runtime::plan(const Model& model, const RuntimeConfig& config) {
  return plan_memory(plan_shape(model), config.plan, config.kv);
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
  plan_ = plan(model, config);
  const MemoryPlan& p = plan_;
  KEEL_ENSURE(persistent.size() >= p.persistent_bytes, Status::ArenaTooSmall,
              "persistent arena is %zu bytes; the plan needs %llu", persistent.size(),
              (unsigned long long)p.persistent_bytes);
  KEEL_ENSURE(scratch.size() >= p.scratch_bytes, Status::ArenaTooSmall,
              "scratch arena is %zu bytes; the plan needs %llu", scratch.size(), (unsigned long long)p.scratch_bytes);
  KEEL_TRY(validate_kv_policy(config.kv, pc.kv_budget_tokens, pc.chunk_tokens));
  Result<Backend*> b = make_backend(config.backend, pool, backend_storage_);
  if (!b.ok()) return b.error();
  backend_ = b.value();
  const RegionMap regions(&plan_, persistent.data(), scratch.data());

  // The tokenizer's tables take at most their planned bytes.
  Arena tokenizer_arena(regions.get<uint8_t>(Region::Tokenizer), regions.bytes(Region::Tokenizer));
  KEEL_TRY(tokenizer_.init(model.meta()->tokenizer(), tokenizer_arena));
  tokenizer_used_bytes_ = tokenizer_arena.used();
  KEEL_TRY(backend_->create_state(
      model, backend_plan(pc, p),
      Span<uint8_t>(regions.get<uint8_t>(Region::BackendState), regions.bytes(Region::BackendState))));
  KEEL_TRY(transformer_.init(model, *backend_, pc, regions));
  KEEL_TRY(transformer_.enable_sparse(p.sparse, regions, pool));
  kv_hooks_.init(transformer_.kv_hooks_config());
  SnapScratch snap;
  snap.rows = regions.get<float>(Region::SnapRows);
  snap.sums = regions.get<float>(Region::SnapSums);
  snap.pooled = regions.get<float>(Region::SnapPooled);
  snap.order = regions.get<uint32_t>(Region::SnapOrder);
  snap.keep = regions.get<uint32_t>(Region::SnapKeep);
  snap.candidates = regions.get<uint32_t>(Region::SnapCandidates);
  snap.row_entries = uint32_t(p.kv_capacity_tokens) + p.kv_hold_tokens;
  snap.compact = regions.get<uint8_t>(Region::SnapCompact);
  snap.rope = regions.get<float>(Region::SnapRope);
  KEEL_TRY(kv_.init(config.kv, pc.kv_budget_tokens, pc.chunk_tokens, uint32_t(p.kv_capacity_tokens), snap, pool,
                    &kv_hooks_));
  KEEL_ENSURE(text::Sampler::arena_bytes(model.shape().vocab_size) <= p.sampler_bytes, Status::Internal,
              "sampler needs %zu bytes, planned %llu", text::Sampler::arena_bytes(model.shape().vocab_size),
              (unsigned long long)p.sampler_bytes);
  sampler_mem_ = regions.get<uint8_t>(Region::Sampler);
  text_mem_ = regions.get<uint8_t>(Region::Text);

  const PlanShape ps = plan_shape(model);
  const uint32_t global_layers = ps.n_layers - ps.local_layers;
  const KvShape kvs{global_layers,
                    ps.n_kv_heads,
                    ps.head_dim,
                    uint32_t(p.kv_capacity_tokens),
                    pc.kv_budget_tokens,
                    ps.n_heads * ps.head_dim,
                    p.obs_window,
                    pc.kv_type,
                    p.sparse.budget ? p.sparse.page : 0,
                    p.sparse.max_pages,
                    p.kv_hold_tokens,
                    config.kv.positions};
  // Local layers keep no observation queries and no page summaries: SnapKV and sparse decode
  // attention act on the global layers only.
  const KvShape local_kvs{ps.local_layers,
                          ps.n_kv_heads,
                          ps.head_dim,
                          uint32_t(p.kv_local_capacity_tokens),
                          p.kv_local_budget_tokens,
                          ps.n_heads * ps.head_dim,
                          0,
                          pc.kv_type};
  static_assert(record_planned<sizeof(Slot), kSlotRecordBytes>());
  slots_ = regions.get<uint8_t>(Region::SlotRecords);
  for (uint32_t i = 0; i < pc.slots; ++i) {
    Slot* s = new (slots_ + uint64_t(i) * kSlotRecordBytes) Slot();
    KvBuffers kb;
    kb.keys_values = regions.get<uint16_t>(Region::KvKeysValues, i);
    kb.positions = regions.get<int32_t>(Region::KvPositions, i);
    kb.observations = regions.get<float>(Region::KvObservations, i);
    kb.lookahead = regions.get<float>(Region::KvLookahead, i);
    kb.pages = regions.get<float>(Region::KvPages, i);
    kb.key_moments = regions.get<double>(Region::KvKeyMoments, i);
    kb.hold_keys_values = regions.get<uint16_t>(Region::KvHoldKeysValues, i);
    kb.hold_positions = regions.get<int32_t>(Region::KvHoldPositions, i);
    KvBuffers lb;
    if (ps.local_layers > 0) {
      lb.keys_values = regions.get<uint16_t>(Region::KvLocalKeysValues, i);
      lb.positions = regions.get<int32_t>(Region::KvLocalPositions, i);
    }
    KEEL_TRY(s->kv.init(kvs, kb, local_kvs, lb, regions.get<int32_t>(Region::KvLookaheadTokens, i), &kv_));
    s->logits = regions.get<float>(Region::Logits, i);
    Arena sampler_arena(sampler_mem_, p.sampler_bytes);
    KEEL_TRY(s->sampler.init(text::SamplerConfig{}, model.shape().vocab_size, sampler_arena));
  }
  segments_ = reinterpret_cast<ForwardSegment*>(regions.get<uint8_t>(Region::StepSegments));
  requests_ = regions.get<uint8_t>(Region::Requests);
  KEEL_ENSURE(segments_ && requests_, Status::Internal, "the plan lacks the step's buffers");
  persistent_used_bytes_ = regions.persistent_reach();
  scratch_used_bytes_ = regions.scratch_reach();
  model_ = &model;
  config_ = config;
  return Error();
}

Error Runtime::check_slot(uint32_t slot) const {
  KEEL_ENSURE(model_ != nullptr, Status::InvalidArgument, "engine is not initialized");
  KEEL_ENSURE(slot < config_.plan.slots, Status::InvalidArgument, "slot %" PRIu32 "; the engine has %" PRIu32, slot,
              config_.plan.slots);
  return Error();
}

Runtime::Slot& Runtime::slot_at(uint32_t i) const {
  return *reinterpret_cast<Slot*>(slots_ + uint64_t(i) * kSlotRecordBytes);
}

Error Runtime::prefill(uint32_t slot, Span<const int32_t> tokens) {
  KEEL_TRY(begin_prompt(slot, tokens));
  const uint32_t chunk = config_.plan.chunk_tokens;
  for (size_t done = 0; done < tokens.size();) {
    SlotWork w;
    w.slot = slot;
    w.tokens = tokens.data() + done;
    w.n = uint32_t(tokens.size() - done < chunk ? tokens.size() - done : chunk);
    w.prompt = true;
    w.prompt_end = done + w.n == tokens.size();
    const Error e = run(&w, 1);
    if (!e.ok()) return e;
    if (w.status != Status::Ok) {
      return Error(w.status, "prompt chunk at token %zu of %zu refused (%s)", done, tokens.size(), to_string(w.status));
    }
    done += w.n;
  }
  return Error();
}

Error Runtime::begin_prompt(uint32_t slot, Span<const int32_t> tokens) {
  KEEL_TRY(check_slot(slot));
  KEEL_ENSURE(!tokens.empty(), Status::InvalidArgument, "prefill of 0 tokens");
  Slot& s = slot_at(slot);
  KEEL_ENSURE(s.prompt_left == 0, Status::InvalidArgument, "slot %" PRIu32 " still has %llu prompt tokens to run", slot,
              (unsigned long long)s.prompt_left);
  KEEL_TRY(model_->check_tokens(tokens));
  KEEL_ENSURE(tokens.size() <= 0xffffffffu, Status::PromptTooLong, "prompt of %zu tokens", tokens.size());
  KEEL_TRY(s.kv.begin_prompt(tokens));
  if (s.kv.lookahead_pending()) {
    const Error e = capture_lookahead(s);
    if (!e.ok()) {
      clear_slot(s);
      return e;
    }
  }
  s.prompt_left = tokens.size();
  return Error();
}

uint64_t Runtime::prompt_left(uint32_t slot) const {
  if (!model_ || slot >= config_.plan.slots) return 0;
  return slot_at(slot).prompt_left;
}

Status Runtime::check_work(const SlotWork& w) const {
  if (w.slot >= config_.plan.slots || w.tokens == nullptr || w.n == 0 || w.n > config_.plan.chunk_tokens) {
    return Status::InvalidArgument;
  }
  const Slot& s = slot_at(w.slot);
  if (w.prompt) {
    // Chunks of the prompt begin_prompt started, in order; the last one says so.
    if (w.n > s.prompt_left || w.prompt_end != (w.n == s.prompt_left)) return Status::InvalidArgument;
  } else {
    if (w.n != 1 || s.prompt_left > 0) return Status::InvalidArgument;
    if (!s.kv.make_room(1).ok()) return Status::KvFull;
  }
  if (!model_->check_tokens(Span<const int32_t>(w.tokens, w.n)).ok()) return Status::InvalidArgument;
  return Status::Ok;
}

Error Runtime::run(SlotWork* work, uint32_t count) {
  KEEL_ENSURE(model_ != nullptr, Status::InvalidArgument, "engine is not initialized");
  KEEL_ENSURE(count <= config_.plan.slots, Status::InvalidArgument,
              "pass of %" PRIu32 " entries; the engine has %" PRIu32 " slots", count, config_.plan.slots);
  uint32_t n_segments = 0;
  for (uint32_t i = 0; i < count; ++i) {
    SlotWork& w = work[i];
    w.status = check_work(w);
    for (uint32_t j = 0; j < i && w.status == Status::Ok; ++j) {
      if (work[j].slot == w.slot) w.status = Status::InvalidArgument;
    }
    if (w.status != Status::Ok) continue;
    Slot& s = slot_at(w.slot);
    const bool logits = !w.prompt || w.prompt_end;
    segments_[n_segments++] =
        ForwardSegment{&s.kv.cache(), w.tokens, w.n, logits ? s.logits : nullptr, logits ? 1u : 0u, s.kv.local()};
  }
  if (n_segments == 0) return Error();
  const Error pass = transformer_.forward(segments_, n_segments);
  for (uint32_t i = 0; i < count; ++i) {
    SlotWork& w = work[i];
    if (w.status != Status::Ok) continue;
    Slot& s = slot_at(w.slot);
    Error e = pass;
    if (e.ok()) e = s.kv.settle(w.n, w.prompt, w.prompt_end);
    if (!e.ok()) {
      w.status = e.status();
      // A prompt refused half-way leaves no half of it behind: the slot starts over.
      if (w.prompt) clear_slot(s);
      continue;
    }
    if (w.prompt) {
      s.prefilled += w.n;
      s.prompt_left -= w.n;
      if (!w.prompt_end && s.kv.lookahead_pending()) {
        e = capture_lookahead(s);
        if (!e.ok()) {
          w.status = e.status();
          clear_slot(s);
          continue;
        }
      }
    } else {
      s.decoded += w.n;
    }
    remember(s, w.tokens, w.n);
  }
  return pass;
}

Error Runtime::capture_lookahead(Slot& s) {
  const Span<const int32_t> look = s.kv.begin_lookahead();
  const ForwardSegment seg{&s.kv.cache(), look.data(), uint32_t(look.size()), nullptr, 0, s.kv.local()};
  const Error e = transformer_.forward(&seg, 1);
  s.kv.end_lookahead(e.ok());
  return e;
}

Error Runtime::decode(uint32_t slot, int32_t token) {
  KEEL_TRY(check_slot(slot));
  Slot& s = slot_at(slot);
  KEEL_TRY(model_->check_tokens(Span<const int32_t>(&token, 1)));
  KEEL_TRY(s.kv.make_room(1));
  SlotWork w;
  w.slot = slot;
  w.tokens = &token;
  w.n = 1;
  KEEL_TRY(run(&w, 1));
  KEEL_ENSURE(w.status == Status::Ok, w.status, "decode on slot %" PRIu32 " refused (%s)", slot, to_string(w.status));
  return Error();
}

Error Runtime::score(uint32_t slot, Span<const int32_t> tokens, void (*fn)(void*, size_t, const float*), void* ctx) {
  KEEL_TRY(check_slot(slot));
  Slot& s = slot_at(slot);
  const uint32_t vocab = model_->shape().vocab_size;
  KEEL_ENSURE(s.prompt_left == 0, Status::InvalidArgument, "slot %" PRIu32 " still has %llu prompt tokens to run", slot,
              (unsigned long long)s.prompt_left);
  KEEL_TRY(model_->check_tokens(tokens));
  KEEL_TRY(s.kv.make_room(tokens.size()));
  const uint32_t step =
      config_.plan.logit_rows < config_.plan.chunk_tokens ? config_.plan.logit_rows : config_.plan.chunk_tokens;
  float* rows = transformer_.logit_rows();
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = uint32_t(tokens.size() - done < step ? tokens.size() - done : step);
    const ForwardSegment seg{&s.kv.cache(), tokens.data() + done, n, rows, n, s.kv.local()};
    KEEL_TRY(transformer_.forward(&seg, 1));
    KEEL_TRY(s.kv.settle(n, true, false));
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
  KEEL_ENSURE(s.prefilled + s.decoded > 0, Status::InvalidArgument, "slot %" PRIu32 " has no logits yet: prefill first",
              slot);
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
  s.prompt_left = 0;
  s.prefilled = 0;
  s.decoded = 0;
  s.recent_count = 0;
}

Span<uint8_t> Runtime::request_records() const {
  if (!model_) return Span<uint8_t>();
  return Span<uint8_t>(requests_, plan_.region_bytes(Region::Requests));
}

uint64_t Runtime::sequence_length(uint32_t slot) const {
  if (!model_ || slot >= config_.plan.slots) return 0;
  return uint64_t(slot_at(slot).kv.next_position());
}

RuntimeStats Runtime::stats() const {
  RuntimeStats st;
  // How far the buffers init took reach into each arena (RegionMap); the tokenizer's tables
  // are measured within their region.
  st.persistent_used_bytes = model_ ? persistent_used_bytes_ : 0;
  st.persistent_planned_bytes = plan_.persistent_bytes;
  st.tokenizer_used_bytes = tokenizer_used_bytes_;
  st.scratch_high_water_bytes = model_ ? scratch_used_bytes_ : 0;
  st.scratch_planned_bytes = plan_.scratch_bytes;
  for (uint32_t i = 0; model_ && i < config_.plan.slots; ++i) {
    st.tokens_prefilled += slot_at(i).prefilled;
    st.tokens_decoded += slot_at(i).decoded;
  }
  return st;
}

}  // namespace keel
