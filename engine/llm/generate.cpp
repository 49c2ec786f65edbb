#include "llm/generate.h"

#include <cinttypes>

#include "core/check.h"

namespace keel {

Error generate(Runtime& rt, uint32_t slot, Span<const int32_t> prompt, const GenerateOptions& o, TokenCallback callback,
               void* ctx, GenerateResult* result) {
  GenerateResult local;
  GenerateResult& r = result ? *result : local;
  r = GenerateResult{};
  KEEL_ENSURE(rt.initialized(), Status::InvalidArgument, "the runtime is not initialized");
  KEEL_ENSURE(slot < rt.slots(), Status::InvalidArgument, "slot %" PRIu32 "; the runtime has %" PRIu32, slot,
              rt.slots());
  KEEL_ENSURE(o.n_stop_tokens <= kMaxStopTokens, Status::InvalidArgument, "n_stop_tokens %" PRIu32 "; at most %" PRIu32,
              o.n_stop_tokens, kMaxStopTokens);
  KEEL_ENSURE(!prompt.empty() || rt.sequence_length(slot) > 0, Status::InvalidArgument,
              "empty prompt on an empty slot: nothing to continue from");
  if (o.sampler) KEEL_TRY(rt.set_sampler(slot, *o.sampler));

  if (!prompt.empty()) {
    const double t0 = o.now ? o.now() : 0;
    KEEL_TRY(rt.prefill(slot, prompt));
    if (o.now) r.prefill_seconds = o.now() - t0;
    r.prompt_tokens = uint32_t(prompt.size());
  }

  const text::Tokenizer& tok = rt.tokenizer();
  text::StreamDecoder dec(tok, o.decode);
  char buf[kGenerateTextBytes];
  const Span<char> out(buf, sizeof buf);
  // Only the full policy ends at the budget; the others evict or compress and go on.
  const bool bounded_by_budget = rt.config().kv.kind == KvPolicyKind::Full;
  const uint64_t budget = rt.config().plan.kv_budget_tokens;
  for (uint32_t i = 0; i < o.max_tokens; ++i) {
    Result<int32_t> sampled = rt.sample(slot);
    if (!sampled.ok()) return sampled.error();
    const int32_t id = sampled.value();
    bool last = false;
    if (is_stop(tok, o.default_stops, Span<const int32_t>(o.stop_tokens, o.n_stop_tokens), id)) {
      r.stop_token = id;
      r.finish = FinishReason::StopToken;
      last = true;
    } else {
      ++r.tokens_generated;
      size_t n = 0;
      const Error e = dec.push(id, out, &n);
      KEEL_ENSURE(e.ok(), Status::InvalidArgument,
                  "token %" PRId32
                  " streams more text than generate()'s %zu-byte buffer (longest token: %zu bytes): %s",
                  id, sizeof buf, tok.max_token_bytes(), e.message());
      if (callback && !callback(ctx, id, buf, n)) {
        r.finish = FinishReason::Cancelled;
        last = true;
      }
    }
    if (!last && i + 1 == o.max_tokens) {
      r.finish = FinishReason::MaxTokens;
      last = true;
    }
    if (last && !o.feed_last) break;
    if (bounded_by_budget && rt.sequence_length(slot) >= budget) {
      r.finish = FinishReason::KvFull;
      break;
    }
    const double t0 = o.now ? o.now() : 0;
    KEEL_TRY(rt.decode(slot, id));
    if (o.now) r.decode_seconds += o.now() - t0;
    ++r.tokens_decoded;
    if (last) break;
  }
  if (o.max_tokens == 0) r.finish = FinishReason::MaxTokens;
  const size_t n = dec.flush(out);
  if (callback && n > 0) callback(ctx, -1, buf, n);
  return Error();
}

}  // namespace keel
