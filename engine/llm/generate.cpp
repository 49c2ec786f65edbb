#include "llm/generate.h"

#include <cinttypes>

#include "core/check.h"
#include "llm/sequence.h"

namespace keel {

// The scheduler's step with one slot and nothing beside it: each pass holds this sequence's
// entry alone (a whole prompt chunk, as Runtime::prefill runs it, or its one decode token), and
// the sequence samples and judges its tokens as it does in a scheduler. Around that step:
// streaming the text, the callback, feed_last, the `full` budget, timing, and keeping the slot's
// sequence for the next call.
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

  Sequence seq;
  seq.start(prompt, o.max_tokens, o.default_stops, Span<const int32_t>(o.stop_tokens, o.n_stop_tokens));
  const uint32_t chunk = rt.config().plan.chunk_tokens;
  if (!prompt.empty()) {
    const double t0 = o.now ? o.now() : 0;
    for (bool end = false; !end;) {
      SlotWork w;
      KEEL_TRY(seq.plan(rt, slot, chunk, w));
      const uint64_t done = seq.prompt_done;
      KEEL_TRY(rt.run(&w, 1));
      KEEL_ENSURE(w.status == Status::Ok, w.status, "prompt chunk at token %llu of %zu refused (%s)",
                  (unsigned long long)done, prompt.size(), to_string(w.status));
      end = seq.advance(w);
    }
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
  for (;;) {
    const SequenceToken t = seq.next(rt, slot);
    if (t.finish == FinishReason::Error) return t.error;
    if (t.token < 0) {  // max_tokens 0: the prompt only
      r.finish = t.finish;
      break;
    }
    bool last = t.finish != FinishReason::None;
    if (t.finish == FinishReason::StopToken) {
      r.stop_token = t.token;
      r.finish = FinishReason::StopToken;
    } else {
      ++r.tokens_generated;
      size_t n = 0;
      const Error e = dec.push(t.token, out, &n);
      KEEL_ENSURE(e.ok(), Status::InvalidArgument,
                  "token %" PRId32
                  " streams more text than generate()'s %zu-byte buffer (longest token: %zu bytes): %s",
                  t.token, sizeof buf, tok.max_token_bytes(), e.message());
      if (callback && !callback(ctx, t.token, buf, n)) {
        r.finish = FinishReason::Cancelled;
        last = true;
      } else if (t.finish == FinishReason::MaxTokens) {
        r.finish = FinishReason::MaxTokens;
      }
    }
    if (last && !o.feed_last) break;
    if (bounded_by_budget && rt.sequence_length(slot) >= budget) {
      r.finish = FinishReason::KvFull;
      break;
    }
    SlotWork w;
    KEEL_TRY(seq.plan(rt, slot, 1, w));
    const double t0 = o.now ? o.now() : 0;
    KEEL_TRY(rt.run(&w, 1));
    KEEL_ENSURE(w.status == Status::Ok, w.status, "decode on slot %" PRIu32 " refused (%s)", slot, to_string(w.status));
    seq.advance(w);
    if (o.now) r.decode_seconds += o.now() - t0;
    ++r.tokens_decoded;
    if (last) break;
  }
  const size_t n = dec.flush(out);
  if (callback && n > 0) callback(ctx, -1, buf, n);
  return Error();
}

}  // namespace keel
