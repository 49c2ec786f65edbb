// The engine loop `keel serve` and `keel batch` drive: requests go into a free slot or a bounded
// queue, step() is one batched forward pass of keel::Scheduler (llm/scheduler.h) that reads the
// weights once for the next token of every decoding slot and a prompt chunk of the prefilling
// ones, cancel() takes a request out at once.
//
// What this adds to the scheduler is what a host tool wants around it: the request owns its
// prompt (the scheduler borrows it), the queue lives in host memory with its own bound (the
// plan's queue may be empty), a `full` budget the prompt cannot fit is refused at submit() with
// both numbers, end tokens are reported as the end rather than as text, and a cancelled
// request is never heard of again (the scheduler frees its slot at the next step).
//
// Admission: first come, first served. A request takes the lowest free slot; with every slot
// busy it waits in the queue (at most `queue_capacity`); beyond that submit() says QueueFull and
// the request is not taken. Prefill and decode share each pass as the scheduler decides
// (decode rows first, then whole prompt chunks oldest first), so a long prompt delays the
// others by at most one chunk per step. Under the `full` KV policy generation stops when the
// next token would not fit (FinishReason::Budget, reported by the step after the last token).
//
// Not thread-safe: one thread owns the loop and the runtime.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "llm/runtime.h"
#include "llm/scheduler.h"
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
  // Admits queued requests into free slots, then one batched pass. Appends what happened to
  // `events` (not cleared).
  void step(std::vector<LoopEvent>& events);
  // Takes the request out (its slot is free for the next step); no event reports it. False for
  // an unknown, finished or already cancelled id.
  bool cancel(uint64_t id);

  void slot_states(std::vector<SlotState>& out) const;
  uint32_t slots() const { return rt_.slots(); }
  uint32_t active() const;
  size_t queued() const { return queue_.size(); }
  // A cancelled request still holds its slot until a step frees it: not idle until then.
  bool idle() const { return queue_.empty() && scheduler_.active() == 0; }
  uint32_t queue_capacity() const { return queue_capacity_; }

 private:
  struct Live {
    LoopRequest request;     // the scheduler borrows its prompt
    uint64_t scheduled = 0;  // the scheduler's id once submitted there
  };
  // Hands queued requests to the scheduler while it has a free slot.
  void feed(std::vector<LoopEvent>& events);
  void translate(const keel::TokenEvent& e, const std::string& pass_error, std::vector<LoopEvent>& events);

  Runtime& rt_;
  uint32_t queue_capacity_;
  keel::Scheduler scheduler_;
  std::string init_error_;                     // why the scheduler could not start ("" when it did)
  std::deque<uint64_t> queue_;                 // ids waiting for the scheduler, oldest first
  std::map<uint64_t, Live> live_;              // queued or scheduled, by id
  std::map<uint64_t, uint64_t> by_scheduled_;  // scheduler id -> id
  std::set<uint64_t> cancelled_;               // scheduler ids cancelled, not yet freed by a step
  std::vector<keel::TokenEvent> step_events_;
  uint64_t next_id_ = 1;
};

}  // namespace keel::cli
