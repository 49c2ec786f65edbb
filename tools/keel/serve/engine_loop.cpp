#include "keel/serve/engine_loop.h"

#include "kv/kv_policy.h"

namespace keel::cli {

EngineLoop::EngineLoop(Runtime& rt, uint32_t queue_capacity, uint32_t max_per_client)
    : rt_(rt), queue_capacity_(queue_capacity), max_per_client_(max_per_client) {
  const Error e = scheduler_.init(rt);
  if (!e.ok()) init_error_ = std::string(to_string(e.status())) + ": " + e.message();
  step_events_.resize(rt.slots() + size_t(rt.config().plan.queue_capacity));
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

SubmitResult EngineLoop::submit(LoopRequest request) {
  SubmitResult r;
  r.error = refusal(request);
  if (!r.error.empty()) return r;
  // Requests beyond the free slots wait; at most queue_capacity of them.
  if (queue_.size() + active() >= size_t(queue_capacity_) + slots()) {
    r.kind = SubmitResult::QueueFull;
    return r;
  }
  r.kind = SubmitResult::Accepted;
  r.id = next_id_++;
  live_.emplace(r.id, Live{std::move(request), 0});
  queue_.push_back(r.id);
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

void EngineLoop::feed(std::vector<LoopEvent>& events) {
  // Only into a free slot, never into the scheduler's own queue: which request goes next is
  // decided here, where the clients are known.
  auto it = queue_.begin();
  while (it != queue_.end() && scheduler_.active() < slots()) {
    const uint64_t id = *it;
    Live& l = live_.at(id);
    const std::string& client = l.request.client;
    if (max_per_client_ > 0 && !client.empty()) {
      const auto r = running_.find(client);
      if (r != running_.end() && r->second >= max_per_client_) {
        ++it;  // this client holds its share; a later request of another one may go first
        continue;
      }
    }
    keel::SchedulerRequest q;
    q.prompt = Span<const int32_t>(l.request.prompt.data(), l.request.prompt.size());
    q.sampling = l.request.sampler;
    q.max_new_tokens = l.request.max_tokens;
    const Result<uint64_t> s = scheduler_.submit(q);
    if (!s.ok() && s.error().status() == Status::QueueFull) return;
    it = queue_.erase(it);
    if (!s.ok()) {
      LoopEvent ev;
      ev.id = id;
      ev.finish = FinishReason::Error;
      ev.error = std::string(to_string(s.error().status())) + ": " + s.error().message();
      events.push_back(std::move(ev));
      live_.erase(id);
      continue;
    }
    l.scheduled = s.value();
    by_scheduled_.emplace(s.value(), id);
    if (!client.empty()) ++running_[client];
  }
}

void EngineLoop::release_client(const std::string& client) {
  const auto r = running_.find(client);
  if (r == running_.end()) return;
  if (--r->second == 0) running_.erase(r);
}

void EngineLoop::translate(const keel::TokenEvent& e, const std::string& pass_error, std::vector<LoopEvent>& events) {
  const auto it = by_scheduled_.find(e.request);
  if (it == by_scheduled_.end()) return;
  const uint64_t id = it->second;
  const bool ends = e.finish != FinishReason::None;
  if (ends) {
    by_scheduled_.erase(it);
    // A cancelled request gave its client's share back when it was cancelled.
    if (cancelled_.count(e.request) == 0) release_client(live_.at(id).request.client);
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
  feed(events);
  // Prompt progress before the pass, to count the prompt tokens it runs.
  prefilling_.clear();
  for (uint32_t i = 0; i < slots(); ++i) {
    const keel::SlotState st = scheduler_.slot_state(i);
    if (st.phase == SlotPhase::Prefilling && cancelled_.count(st.request) == 0)
      prefilling_[st.request] = {st.prompt_done, st.prompt_tokens};
  }
  size_t n = 0;
  const Error pass = scheduler_.step(Span<keel::TokenEvent>(step_events_.data(), step_events_.size()), &n);
  last_prefilling_ = !prefilling_.empty();
  last_prefill_tokens_ = 0;
  for (uint32_t i = 0; i < slots() && last_prefilling_; ++i) {
    const keel::SlotState st = scheduler_.slot_state(i);
    const auto p = prefilling_.find(st.request);
    if (st.phase == SlotPhase::Free || p == prefilling_.end()) continue;
    last_prefill_tokens_ += st.prompt_done - p->second.first;
    prefilling_.erase(p);
  }
  for (size_t i = 0; i < n; ++i) {
    // Gone from its slot in this pass: a request that sampled its first token (and its last)
    // ran the rest of its prompt.
    const keel::TokenEvent& e = step_events_[i];
    const auto p = prefilling_.find(e.request);
    if (p != prefilling_.end() && e.token >= 0) last_prefill_tokens_ += p->second.second - p->second.first;
  }
  const std::string pass_error = pass.ok() ? "" : std::string(to_string(pass.status())) + ": " + pass.message();
  for (size_t i = 0; i < n; ++i) translate(step_events_[i], pass_error, events);
  // Slots this pass freed take waiting requests now, so the next step runs them.
  feed(events);
}

bool EngineLoop::cancel(uint64_t id) {
  const auto it = live_.find(id);
  if (it == live_.end()) return false;
  if (it->second.scheduled == 0) {
    for (auto q = queue_.begin(); q != queue_.end(); ++q) {
      if (*q == id) {
        queue_.erase(q);
        break;
      }
    }
    live_.erase(it);
    return true;
  }
  const uint64_t scheduled = it->second.scheduled;
  if (cancelled_.count(scheduled)) return false;
  if (!scheduler_.cancel(scheduled).ok()) return false;
  cancelled_.insert(scheduled);
  release_client(it->second.request.client);
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
