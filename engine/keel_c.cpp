// The C API over keel::Model and keel::Runtime, living entirely inside the caller's block.
#include <cinttypes>
#include <cstring>
#include <new>
#include <type_traits>

#include "core/check.h"
#include "core/format.h"
#include "keel.h"
#include "llm/generate.h"
#include "llm/run_config.h"
#include "llm/runtime.h"
#include "llm/scheduler.h"

struct keel_engine {
  keel::Model model;
  keel::Runtime runtime;
  keel::Scheduler scheduler;
  char last_error[keel::Error::kMessageCapacity + 64];  // "<status>: <message>"
};

namespace {

keel_status to_c(keel::Status s) {
  if (s == keel::Status::QueueFull) return KEEL_ERR_QUEUE_FULL;
  switch (keel::status_kind(s)) {
    case keel::StatusKind::Ok: return KEEL_OK;
    case keel::StatusKind::BadArgument: return KEEL_ERR_BAD_ARGUMENT;
    case keel::StatusKind::BadModel: return KEEL_ERR_BAD_MODEL;
    case keel::StatusKind::OutOfMemory: return KEEL_ERR_OUT_OF_MEMORY;
    case keel::StatusKind::Unsupported: return KEEL_ERR_UNSUPPORTED;
    case keel::StatusKind::Internal: return KEEL_ERR_INTERNAL;
  }
  return KEEL_ERR_INTERNAL;
}

keel_status record(keel_engine* e, const keel::Error& err) {
  if (e) {
    if (err.ok()) {
      e->last_error[0] = '\0';
    } else {
      keel::format(e->last_error, sizeof e->last_error, "%s: %s", keel::to_string(err.status()), err.message());
    }
  }
  return to_c(err.status());
}

static_assert(int(keel::KvPolicyKind::Full) == KEEL_KV_FULL - 1 &&
                  int(keel::KvPolicyKind::SnapStream) == KEEL_KV_SNAPSTREAM - 1 &&
                  int(keel::fb::KvPolicy::SnapStream) == int(keel::KvPolicyKind::SnapStream),
              "keel_kv_policy, KvPolicyKind and the file's KvPolicy name the policies in one order");

// The runtime configuration a keel_config asks for: its fields are keel::RunOverrides' one to
// one (zero = the model's default, else the engine's: llm/run_config.h).
keel::Error runtime_config(const keel::Model& m, const keel_config* c, keel::RuntimeConfig& rc) {
  keel::RunOverrides o;
  if (c) {
    o.kv_budget_tokens = c->kv_budget_tokens;
    o.slots = c->slots;
    o.chunk_tokens = c->chunk_tokens;
    o.threads = c->threads;
    o.kv_policy = c->kv_policy;
    o.sinks = c->kv_sinks;
    o.window = c->kv_window;
    o.obs_window = c->obs_window;
    o.snap_kernel = c->snap_kernel;
    o.queue_capacity = c->queue_capacity;
    o.kv_type = c->kv_type;
    o.sparse_budget = c->sparse_budget;
    o.kv_positions = c->kv_positions;
    o.rocket_select = c->rocket_select;
    // A C caller may store any integer in an enum field; in C++ reading one outside the
    // enumerators is undefined, so the bytes are read as the integer they are.
    // (Its size is the ABI's: an int on x86-64, one byte with ARM EABI's short enums.)
    std::underlying_type_t<keel_backend> raw = KEEL_BACKEND_AUTO;
    static_assert(sizeof raw == sizeof(keel_backend), "the enum's bytes are its underlying type's");
    memcpy(&raw, &c->backend, sizeof raw);
    const int backend = int(raw);
    KEEL_ENSURE(backend >= KEEL_BACKEND_AUTO && backend <= KEEL_BACKEND_XNNPACK, keel::Status::InvalidArgument,
                "backend %d; expected 0..3", backend);
    o.backend = static_cast<keel::BackendKind>(backend);
  }
  return keel::make_runtime_config(m, o, &rc);
}

static_assert(KEEL_KV_ROCKETKV == keel::kRunPolicyMax && KEEL_KV_SNAPKV == keel::run_policy(keel::KvPolicyKind::SnapKV),
              "keel_kv_policy numbers are RunOverrides::kv_policy's");
static_assert(KEEL_KV_POSITIONS_ORIGINAL == 2 && KEEL_ROCKET_SELECT_HEAD == 2,
              "keel_kv_positions and keel_rocket_select numbers are RunOverrides'");
static_assert(int(KEEL_BACKEND_XNNPACK) == int(keel::BackendKind::Xnnpack), "keel_backend is BackendKind");
static_assert(KEEL_KV_TYPE_Q8 == int(keel::KvType::Q8) && KEEL_KV_TYPE_Q4 == int(keel::KvType::Q4),
              "keel_kv_type numbers are KvType's");

constexpr uint64_t engine_block_bytes() { return keel::plan_align(sizeof(keel_engine)); }

}  // namespace

namespace {

keel::text::SamplerConfig sampler_config(const keel_sampling& s) {
  keel::text::SamplerConfig c;
  c.temperature = s.temperature;
  c.top_k = s.top_k;
  c.top_p = s.top_p;
  c.min_p = s.min_p;
  c.repetition_penalty = s.repetition_penalty;
  c.seed = s.seed;
  return c;
}

struct CallbackBridge {
  keel_token_callback callback;
  void* user;
  static bool call(void* ctx, int32_t token, const char* text, size_t len) {
    const CallbackBridge* b = static_cast<const CallbackBridge*>(ctx);
    return b->callback(b->user, token, text, len) != 0;
  }
};

static_assert(int(keel::FinishReason::None) == KEEL_FINISH_NONE &&
                  int(keel::FinishReason::MaxTokens) == KEEL_FINISH_MAX_TOKENS &&
                  int(keel::FinishReason::StopToken) == KEEL_FINISH_STOP_TOKEN &&
                  int(keel::FinishReason::Cancelled) == KEEL_FINISH_CANCELLED &&
                  int(keel::FinishReason::KvFull) == KEEL_FINISH_KV_FULL &&
                  int(keel::FinishReason::Error) == KEEL_FINISH_ERROR,
              "keel_finish is keel::FinishReason");
static_assert(int(keel::SlotPhase::Free) == KEEL_SLOT_FREE &&
                  int(keel::SlotPhase::Prefilling) == KEEL_SLOT_PREFILLING &&
                  int(keel::SlotPhase::Decoding) == KEEL_SLOT_DECODING,
              "keel_slot_phase is keel::SlotPhase");
static_assert(keel::kMaxStopTokens == KEEL_MAX_STOP_TOKENS && keel::kNoSlot == UINT32_MAX,
              "the C API's limits are the engine's");

// keel_generate's numbering of the finish reasons (keel_stop_reason, kept for the ABI): the one
// place the two C enums meet.
constexpr keel_stop_reason to_stop_reason(keel::FinishReason r) {
  switch (r) {
    case keel::FinishReason::MaxTokens: return KEEL_STOP_MAX_TOKENS;
    case keel::FinishReason::StopToken: return KEEL_STOP_END_TOKEN;
    case keel::FinishReason::Cancelled: return KEEL_STOP_CALLBACK;
    case keel::FinishReason::KvFull: return KEEL_STOP_BUDGET;
    case keel::FinishReason::None:
    case keel::FinishReason::Error: return KEEL_STOP_NONE;
  }
  return KEEL_STOP_NONE;
}
static_assert(to_stop_reason(keel::FinishReason::StopToken) == KEEL_STOP_END_TOKEN &&
                  to_stop_reason(keel::FinishReason::KvFull) == KEEL_STOP_BUDGET &&
                  to_stop_reason(keel::FinishReason::Cancelled) == KEEL_STOP_CALLBACK,
              "keel_stop_reason's names for keel_finish's reasons");

}  // namespace

extern "C" {

keel_status keel_plan(const void* model, size_t model_bytes, const keel_config* config, keel_plan_info* out) {
  if (!out) return KEEL_ERR_BAD_ARGUMENT;
  // The Model view is large (its tensor index); keep it off small embedded stacks. Not
  // reentrant: callers plan from one thread at a time.
  static keel::Model m;
  keel::Error e = m.load(keel::Span<const uint8_t>(static_cast<const uint8_t*>(model), model_bytes));
  if (!e.ok()) return to_c(e.status());
  keel::RuntimeConfig rc;
  e = runtime_config(m, config, rc);
  if (!e.ok()) return to_c(e.status());
  const keel::MemoryPlan p = keel::Runtime::plan(m, rc);
  out->weights_bytes = model_bytes;
  out->persistent_bytes = p.persistent_bytes;
  out->scratch_bytes = p.scratch_bytes;
  out->engine_bytes = engine_block_bytes();
  out->total_bytes = engine_block_bytes() + p.persistent_bytes + p.scratch_bytes + keel::kPlanAlign;
  return KEEL_OK;
}

keel_status keel_init(void* memory, size_t memory_bytes, const void* model, size_t model_bytes,
                      const keel_config* config, keel_engine** out, char* error, size_t error_capacity) {
  auto fail = [&](const keel::Error& err) {
    if (error && error_capacity) {
      keel::format(error, error_capacity, "%s: %s", keel::to_string(err.status()), err.message());
    }
    return to_c(err.status());
  };
  if (!out) return fail(keel::Error(keel::Status::InvalidArgument, "out is NULL"));
  *out = nullptr;
  if (!memory) return fail(keel::Error(keel::Status::InvalidArgument, "memory is NULL"));
  uint8_t* base = static_cast<uint8_t*>(memory);
  const size_t pad = (keel::kPlanAlign - reinterpret_cast<uintptr_t>(base) % keel::kPlanAlign) % keel::kPlanAlign;
  if (memory_bytes < pad + engine_block_bytes()) {
    return fail(keel::Error(keel::Status::ArenaTooSmall,
                            "memory block of %zu bytes cannot hold the engine object (%llu)", memory_bytes,
                            (unsigned long long)(pad + engine_block_bytes())));
  }
  keel_engine* e = new (base + pad) keel_engine();
  e->last_error[0] = '\0';
  keel::Error err = e->model.load(keel::Span<const uint8_t>(static_cast<const uint8_t*>(model), model_bytes),
                                  config && config->verify_weights);
  if (!err.ok()) return fail(err);
  keel::RuntimeConfig rc;
  err = runtime_config(e->model, config, rc);
  if (!err.ok()) return fail(err);
  const keel::MemoryPlan p = keel::Runtime::plan(e->model, rc);
  uint8_t* persistent = base + pad + engine_block_bytes();
  const uint64_t need = pad + engine_block_bytes() + p.persistent_bytes + p.scratch_bytes;
  if (memory_bytes < need) {
    return fail(keel::Error(keel::Status::ArenaTooSmall, "memory block is %zu bytes; the plan needs %llu", memory_bytes,
                            (unsigned long long)need));
  }
  err = e->runtime.init(e->model, rc, keel::Span<uint8_t>(persistent, p.persistent_bytes),
                        keel::Span<uint8_t>(persistent + p.persistent_bytes, p.scratch_bytes),
                        config ? static_cast<const keel::ThreadPool*>(config->thread_pool) : nullptr);
  if (!err.ok()) return fail(err);
  err = e->scheduler.init(e->runtime);
  if (!err.ok()) return fail(err);
  *out = e;
  return KEEL_OK;
}

keel_status keel_tokenize(keel_engine* e, const char* text, size_t len, int add_bos, int parse_special, int32_t* tokens,
                          size_t capacity, size_t* n_tokens) {
  if (!e || (!text && len) || !n_tokens) return KEEL_ERR_BAD_ARGUMENT;
  keel::text::EncodeOptions o;
  o.add_bos = add_bos != 0;
  o.parse_special = parse_special != 0;
  return record(
      e, e->runtime.tokenize(text ? text : "", len, o, keel::Span<int32_t>(tokens, tokens ? capacity : 0), n_tokens));
}

keel_status keel_prefill(keel_engine* e, uint32_t slot, const int32_t* tokens, size_t n) {
  if (!e || (!tokens && n)) return KEEL_ERR_BAD_ARGUMENT;
  return record(e, e->runtime.prefill(slot, keel::Span<const int32_t>(tokens, n)));
}

keel_status keel_decode(keel_engine* e, uint32_t slot, int32_t token) {
  if (!e) return KEEL_ERR_BAD_ARGUMENT;
  return record(e, e->runtime.decode(slot, token));
}

const float* keel_logits(keel_engine* e, uint32_t slot, size_t* vocab_size) {
  if (!e) return nullptr;
  const keel::Span<const float> l = e->runtime.logits(slot);
  if (vocab_size) *vocab_size = l.size();
  return l.empty() ? nullptr : l.data();
}

keel_status keel_set_sampling(keel_engine* e, uint32_t slot, const keel_sampling* s) {
  if (!e || !s) return KEEL_ERR_BAD_ARGUMENT;
  return record(e, e->runtime.set_sampler(slot, sampler_config(*s)));
}

keel_status keel_sample(keel_engine* e, uint32_t slot, int32_t* token) {
  if (!e || !token) return KEEL_ERR_BAD_ARGUMENT;
  keel::Result<int32_t> r = e->runtime.sample(slot);
  if (!r.ok()) return record(e, r.error());
  *token = r.value();
  return record(e, keel::Error());
}

keel_status keel_token_bytes(keel_engine* e, int32_t token, char* out, size_t capacity, size_t* n) {
  if (!e || !n) return KEEL_ERR_BAD_ARGUMENT;
  const keel::text::Tokenizer& t = e->runtime.tokenizer();
  if (token < 0 || uint32_t(token) >= t.vocab_size()) {
    return record(e, keel::Error(keel::Status::InvalidArgument, "token id %" PRId32 "; expected 0..%" PRIu32, token,
                                 t.vocab_size() - 1));
  }
  size_t count = 0;
  t.for_each_token_byte(token, [&](uint8_t b) {
    if (out && count < capacity) out[count] = char(b);
    ++count;
  });
  *n = count;
  if (count > capacity) {
    return record(e, keel::Error(keel::Status::InvalidArgument, "token %" PRId32 " has %zu bytes; buffer holds %zu",
                                 token, count, capacity));
  }
  return record(e, keel::Error());
}

keel_status keel_generate(keel_engine* e, uint32_t slot, const int32_t* prompt, size_t n_prompt,
                          const keel_generate_options* options, keel_token_callback callback, void* user,
                          keel_generate_result* out) {
  if (!e || (!prompt && n_prompt)) return KEEL_ERR_BAD_ARGUMENT;
  keel::GenerateOptions o;
  keel::text::SamplerConfig sampler;
  if (options) {
    if (options->n_stop_tokens > KEEL_MAX_STOP_TOKENS) {
      return record(e, keel::Error(keel::Status::InvalidArgument, "n_stop_tokens %" PRIu32 "; at most %d",
                                   options->n_stop_tokens, KEEL_MAX_STOP_TOKENS));
    }
    o.max_tokens = options->max_tokens;
    for (uint32_t i = 0; i < options->n_stop_tokens; ++i) o.stop_tokens[i] = options->stop_tokens[i];
    o.n_stop_tokens = options->n_stop_tokens;
    o.default_stops = options->no_default_stops == 0;
    o.feed_last = options->feed_last != 0;
    if (options->sampling) {
      sampler = sampler_config(*options->sampling);
      o.sampler = &sampler;
    }
    o.now = options->now;
  }
  CallbackBridge bridge{callback, user};
  keel::GenerateResult r;
  const keel::Error err = keel::generate(e->runtime, slot, keel::Span<const int32_t>(prompt, n_prompt), o,
                                         callback ? &CallbackBridge::call : nullptr, &bridge, &r);
  if (out) {
    out->tokens_generated = r.tokens_generated;
    out->tokens_decoded = r.tokens_decoded;
    out->prompt_tokens = r.prompt_tokens;
    out->stop_reason = uint32_t(to_stop_reason(r.finish));
    out->stop_token = r.stop_token;
    out->prefill_seconds = r.prefill_seconds;
    out->decode_seconds = r.decode_seconds;
  }
  return record(e, err);
}

keel_status keel_reset(keel_engine* e, uint32_t slot) {
  if (!e) return KEEL_ERR_BAD_ARGUMENT;
  return record(e, e->runtime.reset(slot));
}

keel_status keel_submit(keel_engine* e, const keel_request* r, uint64_t* id) {
  if (!e || !r || !id || (!r->prompt && r->n_prompt)) return KEEL_ERR_BAD_ARGUMENT;
  keel::SchedulerRequest q;
  q.prompt = keel::Span<const int32_t>(r->prompt, r->n_prompt);
  q.sampling = sampler_config(r->sampling);
  if (r->n_stop_tokens > KEEL_MAX_STOP_TOKENS) {
    return record(e, keel::Error(keel::Status::InvalidArgument, "%" PRIu32 " stop tokens; at most %d", r->n_stop_tokens,
                                 KEEL_MAX_STOP_TOKENS));
  }
  for (uint32_t i = 0; i < r->n_stop_tokens; ++i) q.stop_tokens[i] = r->stop_tokens[i];
  q.n_stop_tokens = r->n_stop_tokens;
  q.default_stops = r->no_default_stops == 0;
  q.max_new_tokens = r->max_new_tokens;
  const keel::Result<uint64_t> got = e->scheduler.submit(q);
  if (!got.ok()) return record(e, got.error());
  *id = got.value();
  return record(e, keel::Error());
}

keel_status keel_step(keel_engine* e, keel_token_event* events, size_t capacity, size_t* n_events) {
  if (!e || !n_events || (!events && capacity)) return KEEL_ERR_BAD_ARGUMENT;
  *n_events = 0;
  // keel_token_event and keel::TokenEvent differ in layout; the step writes the C++ events
  // into the caller's array from the back, then each is rewritten in place from the front.
  static_assert(sizeof(keel::TokenEvent) <= sizeof(keel_token_event), "events convert in place");
  if (capacity < e->scheduler.max_events()) {
    return record(e, keel::Error(keel::Status::InvalidArgument, "room for %zu events; a step may report %zu", capacity,
                                 e->scheduler.max_events()));
  }
  auto* staged = reinterpret_cast<keel::TokenEvent*>(events);
  size_t n = 0;
  const keel::Error err = e->scheduler.step(keel::Span<keel::TokenEvent>(staged, capacity), &n);
  for (size_t i = n; i-- > 0;) {
    const keel::TokenEvent t = staged[i];
    events[i] = keel_token_event{t.request, t.slot, t.token, uint32_t(t.finish)};
  }
  *n_events = n;
  return record(e, err);
}

keel_status keel_cancel(keel_engine* e, uint64_t id) {
  if (!e) return KEEL_ERR_BAD_ARGUMENT;
  return record(e, e->scheduler.cancel(id));
}

keel_status keel_get_slot_state(const keel_engine* e, uint32_t slot, keel_slot_state* out) {
  if (!e || !out || slot >= e->scheduler.slots()) return KEEL_ERR_BAD_ARGUMENT;
  const keel::SlotState s = e->scheduler.slot_state(slot);
  *out = keel_slot_state{uint32_t(s.phase), s.request,   s.prompt_tokens, s.prompt_done,
                         s.generated,       s.kv_tokens, s.kv_budget};
  return KEEL_OK;
}

size_t keel_max_events(const keel_engine* e) { return e ? e->scheduler.max_events() : 0; }
uint32_t keel_queued(const keel_engine* e) { return e ? e->scheduler.queued() : 0; }

keel_status keel_get_stats(const keel_engine* e, keel_stats* out) {
  if (!e || !out) return KEEL_ERR_BAD_ARGUMENT;
  const keel::RuntimeStats s = e->runtime.stats();
  out->persistent_used_bytes = s.persistent_used_bytes;
  out->persistent_planned_bytes = s.persistent_planned_bytes;
  out->scratch_used_bytes = s.scratch_high_water_bytes;
  out->scratch_planned_bytes = s.scratch_planned_bytes;
  out->tokens_prefilled = s.tokens_prefilled;
  out->tokens_decoded = s.tokens_decoded;
  return KEEL_OK;
}

int32_t keel_eos_token(const keel_engine* e) { return e ? e->runtime.tokenizer().eos_id() : -1; }

const char* keel_last_error(const keel_engine* e) { return e ? e->last_error : "engine is NULL"; }

const char* keel_status_string(keel_status s) {
  switch (s) {
    case KEEL_OK: return "ok";
    case KEEL_ERR_BAD_ARGUMENT: return "bad argument";
    case KEEL_ERR_BAD_MODEL: return "bad model";
    case KEEL_ERR_OUT_OF_MEMORY: return "out of memory";
    case KEEL_ERR_UNSUPPORTED: return "unsupported";
    case KEEL_ERR_INTERNAL: return "internal error";
    case KEEL_ERR_QUEUE_FULL: return "queue full";
  }
  return "unknown status";
}

}  // extern "C"
