// Continuous batching over a Runtime's static slots. Requests are submitted into a free slot or
// a bounded FIFO queue; each step() is one batched forward pass (Runtime::run) that advances
// every active slot and reports the tokens it produced. Everything lives in the plan's
// `requests` region: nothing allocates, and the slot count, queue capacity and rows per pass
// are fixed before the first token.
//
// Admission: submit() puts a request into a free slot when the queue is empty, else at the back
//   of the queue; when the queue is full it fails with QueueFull and nothing changes. At the
//   start of each step, freed slots take queued requests, oldest first. With a group share
//   (set_max_per_group, e.g. a server's per-client share), a request of a group that holds its
//   share of the slots waits, and later requests of other groups pass it.
// A step: every decoding slot contributes its one token (decode latency stays one pass); the
//   prefilling slots, the one served least recently first (entering a slot or running a chunk
//   puts a slot at the back), each add their next whole prompt chunk (chunk_tokens, the last
//   may be shorter) while it fits in the pass's plan_step_rows = chunk + slots - 1 rows. That
//   bound leaves room for at least one chunk beside every other slot's decode token, so some
//   prompt always advances, prompts take their chunks in rotation (one waits at most
//   slots - 1 passes for its next chunk), and a pass never exceeds one chunk plus one row per
//   other slot: decode latency is bounded by the chunk size, which the plan fixes. A prompt runs in the same chunks as
//   Runtime::prefill would run it alone, so its KV policy (SnapKV compression at each chunk, the lookahead) sees
//   exactly the same cache.
// Tokens: a slot's first token is sampled in the step that runs its prompt's last chunk, then
//   one per step. With greedy sampling a request's tokens are the same whether it runs alone
//   or beside others (a row's result does not depend on the other rows of the pass).
// Finish: max_new_tokens sampled (MaxTokens); a stop token sampled (StopToken, the event carries
//   it); cancel() (Cancelled, reported by the next step); a `full` budget reached (KvFull, the
//   prompt did not fit or the next decode would not); anything else (Error). The finishing
//   event frees the slot for the next step.
//
// The scheduler owns all of the runtime's slots: do not drive them directly (prefill, decode,
// generate) while it runs. It is not thread-safe: one thread calls submit, cancel and step.
#pragma once

#include <cstdint>

#include "core/result.h"
#include "core/span.h"
#include "llm/finish.h"
#include "llm/generate.h"
#include "llm/runtime.h"
#include "llm/sequence.h"
#include "text/sampler.h"

namespace keel {

struct SchedulerRequest {
  // Caller-owned (the engine copies nothing it does not need to keep): must stay valid and
  // unchanged until the request's first token is reported or it finishes.
  Span<const int32_t> prompt;
  text::SamplerConfig sampling;              // greedy by default
  int32_t stop_tokens[kMaxStopTokens] = {};  // copied at submit
  uint32_t n_stop_tokens = 0;
  bool default_stops = true;      // also stop at the tokenizer's EOS and <|im_end|>
  uint32_t max_new_tokens = 256;  // >= 1
  uint64_t group = 0;             // requests of one group share set_max_per_group's slots; 0: none
};

constexpr uint32_t kNoSlot = 0xffffffffu;

// What a step reports: a token, or the end of a request, or both.
struct TokenEvent {
  uint64_t request = 0;
  uint32_t slot = kNoSlot;                   // kNoSlot: the request finished while queued
  int32_t token = -1;                        // the sampled token, or -1 when there is none
  FinishReason finish = FinishReason::None;  // None: the request goes on
};

struct SlotState {
  SlotPhase phase = SlotPhase::Free;
  uint64_t request = 0;        // 0 when free
  uint64_t prompt_tokens = 0;  // of the request's prompt
  uint64_t prompt_done = 0;    // of them through the model
  uint32_t generated = 0;      // tokens sampled so far
  uint32_t kv_tokens = 0;      // cache entries in use
  uint32_t kv_budget = 0;      // the slot's budget
};

class Scheduler {
 public:
  // Takes its records from the runtime's `requests` region (slots + queue_capacity of them).
  Error init(Runtime& runtime);

  // A request id (>= 1), or QueueFull when every slot is busy and the queue holds
  // queue_capacity requests; InvalidArgument for an empty prompt, an invalid token, too many
  // stop tokens, max_new_tokens 0 or a bad sampling setting. Runs nothing.
  Result<uint64_t> submit(const SchedulerRequest& request);
  // Marks a queued or running request cancelled; the next step frees its place and reports
  // Cancelled. InvalidArgument when no such request is queued or running.
  Error cancel(uint64_t request);
  // Takes a queued request out at once, for a host that forgets it itself: its place is free for
  // the next submit and no event reports it. InvalidArgument when it is not queued (a running
  // request is cancelled).
  Error withdraw(uint64_t request);
  // Slots the requests of one group (SchedulerRequest::group != 0) hold at most; 0: no limit.
  void set_max_per_group(uint32_t slots) { max_per_group_ = slots; }
  // One batched pass. Writes at most max_events() events to `events` (in slot order, then the
  // queued requests that finished) and their count to `n_events`. With nothing active it runs
  // nothing and reports nothing. An error of the pass itself finishes the requests it ran with
  // Error, reports them, and is returned.
  Error step(Span<TokenEvent> events, size_t* n_events);

  SlotState slot_state(uint32_t slot) const;
  uint32_t slots() const { return slots_; }
  uint32_t queue_capacity() const { return queue_capacity_; }
  uint32_t queued() const { return queue_count_; }
  uint32_t active() const;  // slots not free
  size_t max_events() const { return size_t(slots_) + queue_capacity_; }
  // What the last step did for prompts: slots prefilling when its pass was formed (a lookahead
  // pass may run none of their tokens), and prompt tokens that went through the model in it.
  uint32_t last_step_prefilling() const { return last_prefilling_; }
  uint64_t last_step_prompt_tokens() const { return last_prompt_tokens_; }

 private:
  struct Record;
  Record& slot_record(uint32_t slot) const;
  Record& queue_record(uint32_t i) const;  // i-th oldest queued
  void remove_queued(uint32_t i);          // closes the gap, order kept
  uint32_t group_slots(uint64_t group) const;
  bool over_share(uint64_t group) const;  // the group holds its share of the slots
  void admit();
  void finish(Record& r, uint32_t slot, int32_t token, FinishReason why, Span<TokenEvent> events, size_t* n);

  Runtime* rt_ = nullptr;
  uint8_t* records_ = nullptr;  // [slots + queue_capacity][kRequestRecordBytes]
  SlotWork* work_ = nullptr;    // [slots] entries of one pass
  uint32_t slots_ = 0;
  uint32_t queue_capacity_ = 0;
  uint32_t queue_head_ = 0;
  uint32_t queue_count_ = 0;
  uint32_t max_per_group_ = 0;
  uint64_t next_id_ = 1;
  uint64_t next_prefill_turn_ = 1;
  uint32_t last_prefilling_ = 0;
  uint64_t last_prompt_tokens_ = 0;
};

}  // namespace keel
