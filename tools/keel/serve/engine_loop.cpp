#include "keel/serve/engine_loop.h"

#include "kv/kv_policy.h"

namespace keel::cli {

EngineLoop::EngineLoop(Runtime& rt, uint32_t queue_capacity, uint32_t max_per_client)
    : rt_(rt), queue_capacity_(queue_capacity), max_per_client_(max_per_client) {
  const Error e = scheduler_.init(rt);
  if (!e.ok()) init_error_ = std::string(to_string(e.status())) + ": " + e.message();
  const uint32_t need = plan_queue_capacity(rt.slots(), queue_capacity);
  if (init_error_.empty() && scheduler_.queue_capacity() < need) {
    init_error_ = "the plan's scheduler queue holds " + std::to_string(scheduler_.queue_capacity()) +
                  " requests; a queue of " + std::to_string(queue_capacity) + " over " + std::to_string(rt.slots()) +
                  " slots needs " + std::to_string(need);
  }
  scheduler_.set_max_per_group(max_per_client);
  step_events_.resize(scheduler_.max_events());
}

std::string EngineLoop::refusal(const LoopRequest& request) const {
  if (!init_error_.empty()) return "the engine did not start: " + init_error_;
  if (request.prompt.empty()) return "empty prompt: a request needs at least one token";
  if (request.max_tokens == 0) return "max_tokens 0: a request generates at least one token";
  const RuntimeConfig& cfg = rt_.config();
  const uint64_t budget = cfg.plan.kv_budget_tokens;
  if (cfg.kv.kind == KvPolicyKind::Full && request.prompt.size() + 1 > budget) {
    return "the prompt is " + std::to_string(request.prompt.size()) + " tokens; the KV budget (policy full) holds " +
           std::to_string(budget) + " tokens, prompt and generated tokens together";
  }
  return "";
}

uint64_t EngineLoop::client_group(const std::string& client) {
  if (client.empty()) return 0;
  Client& c = clients_[client];
  if (c.requests++ == 0) c.group = next_group_++;
  return c.group;
}

void EngineLoop::release_group(uint64_t group) {
  if (group == 0) return;
  for (auto it = clients_.begin(); it != clients_.end(); ++it) {
    if (it->second.group != group) continue;
    if (--it->second.requests == 0) clients_.erase(it);
    return;
  }
}

SubmitResult EngineLoop::submit(LoopRequest request) {
  SubmitResult r;
  r.error = refusal(request);
  if (!r.error.empty()) return r;
  // Requests beyond the free slots wait; at most queue_capacity of them. A cancelled request
  // still in a slot is not counted: its place was given back when it was cancelled.
  if (queued() + active() >= size_t(queue_capacity_) + slots()) {
    r.kind = SubmitResult::QueueFull;
    return r;
  }
  r.kind = SubmitResult::Accepted;
  r.id = next_id_++;
  // Placed before the scheduler sees the prompt: the map's node does not move.
  Live& l = live_.emplace(r.id, Live{std::move(request), 0, 0}).first->second;
  keel::SchedulerRequest q;
  q.prompt = Span<const int32_t>(l.request.prompt.data(), l.request.prompt.size());
  q.sampling = l.request.sampler;
  q.max_new_tokens = l.request.max_tokens;
  q.group = max_per_client_ > 0 ? client_group(l.request.client) : 0;
  const Result<uint64_t> s = scheduler_.submit(q);
  if (!s.ok()) {
    // The bound above leaves the scheduler's queue room (plan_queue_capacity), so this is a
    // request the scheduler refuses (a token or sampler setting it rejects): reported as failed.
    release_group(q.group);
    live_.erase(r.id);
    LoopEvent ev;
    ev.id = r.id;
    ev.finish = FinishReason::Error;
    ev.error = std::string(to_string(s.error().status())) + ": " + s.error().message();
    failed_.push_back(std::move(ev));
    return r;
  }
  l.scheduled = s.value();
  l.group = q.group;
  by_scheduled_.emplace(s.value(), r.id);
  return r;
}

uint32_t EngineLoop::active() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < slots(); ++i) {
    const keel::SlotState st = scheduler_.slot_state(i);
    n += st.phase != SlotPhase::Free && cancelled_.count(st.request) == 0 ? 1 : 0;
  }
  return n;
}

void EngineLoop::translate(const keel::TokenEvent& e, const std::string& pass_error, std::vector<LoopEvent>& events) {
  const auto it = by_scheduled_.find(e.request);
  if (it == by_scheduled_.end()) return;
  const uint64_t id = it->second;
  const bool ends = e.finish != FinishReason::None;
  if (ends) {
    by_scheduled_.erase(it);
    release_group(live_.at(id).group);
    live_.erase(id);
  }
  if (cancelled_.count(e.request)) {
    // Cancelled here before this step freed it: already forgotten by the caller.
    if (ends) cancelled_.erase(e.request);
    return;
  }
  LoopEvent ev;
  ev.id = id;
  ev.token = e.token;
  ev.finish = e.finish;
  // Only the tokenizer's end tokens stop a request here; they are the end, not text.
  if (e.finish == FinishReason::StopToken) ev.token = -1;
  if (e.finish == FinishReason::Error)
    ev.error = pass_error.empty() ? std::string("the forward pass refused this request") : pass_error;
  if (ev.token < 0 && ev.finish == FinishReason::None) return;
  events.push_back(std::move(ev));
}

void EngineLoop::step(std::vector<LoopEvent>& events) {
  for (LoopEvent& ev : failed_) events.push_back(std::move(ev));
  failed_.clear();
  size_t n = 0;
  const Error pass = scheduler_.step(Span<keel::TokenEvent>(step_events_.data(), step_events_.size()), &n);
  const std::string pass_error = pass.ok() ? "" : std::string(to_string(pass.status())) + ": " + pass.message();
  for (size_t i = 0; i < n; ++i) translate(step_events_[i], pass_error, events);
}

bool EngineLoop::cancel(uint64_t id) {
  const auto it = live_.find(id);
  if (it == live_.end()) return false;
  const uint64_t scheduled = it->second.scheduled;
  if (cancelled_.count(scheduled)) return false;
  // A queued request leaves the queue now; a running one's slot is freed by the next step.
  if (scheduler_.withdraw(scheduled).ok()) {
    by_scheduled_.erase(scheduled);
    release_group(it->second.group);
    live_.erase(it);
    return true;
  }
  if (!scheduler_.cancel(scheduled).ok()) return false;
  cancelled_.insert(scheduled);
  return true;
}

void EngineLoop::slot_states(std::vector<SlotState>& out) const {
  out.clear();
  for (uint32_t i = 0; i < slots(); ++i) {
    const keel::SlotState s = scheduler_.slot_state(i);
    SlotState st;
    st.kv_tokens = s.kv_tokens;
    st.kv_budget = s.kv_budget;
    const auto it = by_scheduled_.find(s.request);
    if (s.phase != SlotPhase::Free && it != by_scheduled_.end() && cancelled_.count(s.request) == 0) {
      st.phase = s.phase;
      st.id = it->second;
      st.prompt_tokens = uint32_t(s.prompt_tokens);
      st.prefilled_tokens = uint32_t(s.prompt_done);
      st.generated_tokens = s.generated;
    }
    out.push_back(st);
  }
}

}  // namespace keel::cli
