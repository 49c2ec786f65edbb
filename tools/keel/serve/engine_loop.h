// The engine loop `keel serve` and `keel batch` drive: requests go into a free slot or a bounded
// queue, step() advances every active slot by one token, cancel() frees a slot at once.
//
// This is the one place the tools touch the runtime's generation calls. Today it drives the
// per-slot Runtime API (prefill / decode / sample on one slot at a time): a step runs at most one
// prompt chunk (the plan's chunk_tokens) of one prefilling slot, then one decode of every slot
// that is generating, so a long prompt delays the others by one chunk per step, never by its
// whole length. When the engine gains a batched scheduler (one pass for the tokens of all
// slots), only engine_loop.cpp changes: its interface is the scheduler's (submit, step, cancel,
// slot states), and nothing above it sees how a step is computed.
//
// Admission: first come, first served. A request takes the lowest free slot; with every slot
// busy it waits in the queue (at most `queue_capacity`); beyond that submit() says QueueFull and
// the request is not taken. Prefill is round-robin over the prefilling slots, one chunk a step.
// Under the `full` KV policy a prompt that cannot fit the budget with one generated token is
// refused at submit() with both numbers; generation stops at the budget (FinishReason::Budget).
// Under SnapKV policies a prompt longer than the budget is prefilled in one call (the policy
// reads the prompt's end first to decide what to keep), which is the one step longer than a chunk.
//
// Not thread-safe: one thread owns the loop and the runtime.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "llm/runtime.h"
#include "text/sampler.h"

namespace keel::cli {

enum class FinishReason : uint8_t {
  None,       // still running
  EndToken,   // the model produced an end token (EOS, <|im_end|>)
  MaxTokens,  // max_tokens generated
  Budget,     // policy full: the sequence filled the KV budget
  Cancelled,  // cancel()
  Failed,     // the runtime returned an error (LoopEvent::error)
};
const char* finish_reason_name(FinishReason r);

struct LoopRequest {
  std::vector<int32_t> prompt;  // at least one token
  text::SamplerConfig sampler;
  uint32_t max_tokens = 16;  // at least 1
};

// What one step did for one request: a generated token, its end, or both (the last token).
struct LoopEvent {
  uint64_t id = 0;
  int32_t token = -1;  // -1: no token this event (an end token is not reported as a token)
  FinishReason finish = FinishReason::None;
  std::string error;  // FinishReason::Failed
};

enum class SlotPhase : uint8_t { Free, Prefill, Decode };

struct SlotState {
  SlotPhase phase = SlotPhase::Free;
  uint64_t id = 0;
  uint32_t prompt_tokens = 0;
  uint32_t prefilled_tokens = 0;
  uint32_t generated_tokens = 0;
  uint32_t kv_tokens = 0;  // cache entries in use
  uint32_t kv_budget = 0;
};

struct SubmitResult {
  enum Kind { Accepted, QueueFull, Refused } kind = Refused;
  uint64_t id = 0;    // Accepted
  std::string error;  // Refused: why (the numbers included)
};

class EngineLoop {
 public:
  EngineLoop(Runtime& rt, uint32_t queue_capacity);

  SubmitResult submit(LoopRequest request);
  // Why submit() would refuse `request` whatever the load ("" if it would not): an empty prompt,
  // max_tokens 0, a prompt the `full` budget cannot hold.
  std::string refusal(const LoopRequest& request) const;
  // Admits queued requests into free slots, then one prefill chunk and one token per generating
  // slot. Appends what happened to `events` (not cleared).
  void step(std::vector<LoopEvent>& events);
  // Frees the request's slot (or drops it from the queue). False for an unknown or finished id.
  bool cancel(uint64_t id);

  void slot_states(std::vector<SlotState>& out) const;
  uint32_t slots() const { return uint32_t(slots_.size()); }
  uint32_t active() const;
  size_t queued() const { return queue_.size(); }
  bool idle() const { return queue_.empty() && active() == 0; }
  uint32_t queue_capacity() const { return queue_capacity_; }

 private:
  struct Slot {
    SlotPhase phase = SlotPhase::Free;
    uint64_t id = 0;
    LoopRequest request;
    uint32_t prefilled = 0;
    uint32_t generated = 0;
    int32_t pending = -1;  // sampled, not yet fed back
  };
  struct Queued {
    uint64_t id;
    LoopRequest request;
  };
  void admit(std::vector<LoopEvent>& events);
  void prefill_one(std::vector<LoopEvent>& events);
  // Samples the slot's next token and reports it; frees the slot when the request ends.
  void sample_next(uint32_t slot, std::vector<LoopEvent>& events);
  void fail(uint32_t slot, const Error& e, std::vector<LoopEvent>& events);
  void release(uint32_t slot);

  Runtime& rt_;
  uint32_t queue_capacity_;
  std::vector<Slot> slots_;
  std::deque<Queued> queue_;
  uint64_t next_id_ = 1;
  uint32_t prefill_cursor_ = 0;
};

}  // namespace keel::cli
