// The engine loop `keel serve` and `keel batch` drive: requests go into a free slot or a bounded
// queue, step() is one batched forward pass of keel::Scheduler (llm/scheduler.h) that reads the
// weights once for the next token of every decoding slot and a prompt chunk of the prefilling
// ones, cancel() takes a request out at once.
//
// What this adds to the scheduler is what a host tool wants around it: the request owns its
// prompt (the scheduler borrows it), a `full` budget the prompt cannot fit is refused at
// submit() with both numbers, end tokens are reported as the end rather than as text, clients
// are mapped to the scheduler's groups, and a cancelled request is never heard of again (a
// queued one leaves the scheduler's queue at once, a running one's slot is freed at the next
// step).
//
// Admission: first come, first served, but for the per-client share, all in the scheduler and
// its queue (the plan's, which the runtime must be planned with: plan_queue_capacity). A request
// takes the lowest free slot; with every slot busy it waits in the queue (at most
// `queue_capacity`); beyond that submit() says QueueFull and the request is not taken. With
// `max_per_client` set, a client (LoopRequest::client, e.g. the peer address) holds at most that
// many slots: its further requests wait in the queue and a later request of another client takes
// a free slot before them, so that one client cannot hold every slot. Requests without a client
// are not limited. Prefill and decode share
// each pass as the scheduler decides (decode rows first, then whole prompt chunks oldest first), so a long prompt
// delays the others by at most one chunk per step. Under the `full` KV policy generation stops when the next token
// would not fit (FinishReason::KvFull, reported by the step after the last token).
//
// Not thread-safe: one thread owns the loop and the runtime.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "llm/finish.h"
#include "llm/runtime.h"
#include "llm/scheduler.h"
#include "text/sampler.h"

namespace keel::cli {

struct LoopRequest {
  std::vector<int32_t> prompt;  // at least one token
  text::SamplerConfig sampler;
  uint32_t max_tokens = 16;  // at least 1
  std::string client;        // who sent it, for the per-client share; "" = no limit
};

// What one step did for one request: a generated token, its end, or both (the last token).
struct LoopEvent {
  uint64_t id = 0;
  int32_t token = -1;  // -1: no token this event (an end token is not reported as a token)
  // StopToken (the end token itself is not reported), MaxTokens, KvFull, Cancelled, Error.
  FinishReason finish = FinishReason::None;
  std::string error;  // FinishReason::Error
};

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
  // The scheduler queue a loop of `queue_capacity` over `slots` needs in the plan
  // (PlanConfig::queue_capacity): its own bound, and a place for each slot whose cancelled
  // request a step has not freed yet, since cancel() gives that request's place back at once.
  static uint32_t plan_queue_capacity(uint32_t slots, uint32_t queue_capacity) { return slots + queue_capacity; }

  // max_per_client: slots one client may hold at once (0 = no limit). The runtime's plan must
  // hold plan_queue_capacity(slots, queue_capacity) queued requests; else every submit() is
  // refused with both numbers.
  EngineLoop(Runtime& rt, uint32_t queue_capacity, uint32_t max_per_client = 0);

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
  size_t queued() const { return scheduler_.queued(); }
  // A cancelled request still holds its slot until a step frees it: not idle until then.
  bool idle() const { return failed_.empty() && scheduler_.queued() == 0 && scheduler_.active() == 0; }
  uint32_t queue_capacity() const { return queue_capacity_; }
  uint32_t max_per_client() const { return max_per_client_; }
  // What the last step did for prompts: whether any slot was prefilling when it ran, and how
  // many prompt tokens went through the model in it (a lookahead pass may run none). A request
  // cancelled before the step is not counted; one that finished in it ran the rest of its prompt.
  bool last_step_prefilled() const { return scheduler_.last_step_prefilling() > 0; }
  uint64_t last_prefill_tokens() const { return scheduler_.last_step_prompt_tokens(); }

 private:
  struct Live {
    LoopRequest request;     // the scheduler borrows its prompt
    uint64_t scheduled = 0;  // the scheduler's id
    uint64_t group = 0;      // its client's group (0: no client)
  };
  struct Client {
    uint64_t group = 0;     // the scheduler's group of the client's requests
    uint32_t requests = 0;  // of them the scheduler holds (queued, running, or cancelled and not yet freed)
  };
  uint64_t client_group(const std::string& client);  // 0 for no client; counts one more request
  void release_group(uint64_t group);                // the scheduler no longer holds one of its requests
  void translate(const keel::TokenEvent& e, const std::string& pass_error, std::vector<LoopEvent>& events);

  Runtime& rt_;
  uint32_t queue_capacity_;
  uint32_t max_per_client_;
  keel::Scheduler scheduler_;
  std::string init_error_;                     // why the scheduler could not start ("" when it did)
  std::map<uint64_t, Live> live_;              // in the scheduler (cancelled ones until a step frees them), by id
  std::map<uint64_t, uint64_t> by_scheduled_;  // scheduler id -> id
  std::set<uint64_t> cancelled_;               // scheduler ids cancelled, not yet freed by a step
  std::map<std::string, Client> clients_;      // clients with requests in the scheduler
  std::vector<LoopEvent> failed_;              // refused by the scheduler at submit, reported by the next step
  std::vector<keel::TokenEvent> step_events_;
  uint64_t next_id_ = 1;
  uint64_t next_group_ = 1;
};

}  // namespace keel::cli
