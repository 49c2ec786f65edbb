#include "keel/serve/engine_thread.h"

#include <chrono>

#include "keel/cli/session.h"

namespace keel::cli {

void Ticket::push(LoopEvent ev) {
  {
    std::lock_guard<std::mutex> lk(m);
    events.push_back(std::move(ev));
  }
  cv.notify_all();
}

bool Ticket::wait(std::deque<LoopEvent>& out, double seconds) {
  std::unique_lock<std::mutex> lk(m);
  if (!cv.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return !events.empty(); })) return false;
  while (!events.empty()) {
    out.push_back(std::move(events.front()));
    events.pop_front();
  }
  return true;
}

EngineThread::EngineThread(Runtime& rt, uint32_t queue_capacity, uint32_t max_per_client)
    : loop_(rt, queue_capacity, max_per_client) {
  metrics_.prefill_tokens_per_second = kInitialPrefillRate;
}

void EngineThread::find_gone_clients(std::vector<uint64_t>& gone) {
  polls_.clear();
  poll_ids_.clear();
  for (const auto& [id, t] : live_) {
    if (t->client_fd < 0 || t->cancelled.load()) continue;
    // POLLRDHUP: the peer closed its end (a half-close counts: HTTP clients do not half-close a
    // connection they still wait on). Pipelined bytes alone are POLLIN, not asked for.
    polls_.push_back(pollfd{t->client_fd, POLLRDHUP, 0});
    poll_ids_.push_back(id);
  }
  if (polls_.empty()) return;
  if (poll(polls_.data(), polls_.size(), 0) <= 0) return;
  for (size_t i = 0; i < polls_.size(); ++i)
    if (polls_[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) gone.push_back(poll_ids_[i]);
}

void EngineThread::measure_prefill(double seconds) {
  // Decayed sums over the prefilling steps: about the last 30 weigh, and a step's weight is its
  // time, so short steps do not swing the rate.
  constexpr double kDecay = 0.97;
  prefill_tokens_w_ = prefill_tokens_w_ * kDecay + double(loop_.last_prefill_tokens());
  prefill_seconds_w_ = prefill_seconds_w_ * kDecay + seconds;
  if (prefill_seconds_w_ > 0 && prefill_tokens_w_ > 0) prefill_rate_ = prefill_tokens_w_ / prefill_seconds_w_;
}

EngineThread::~EngineThread() {
  if (thread_.joinable()) {
    stop_accepting();
    join();
  }
}

EngineThread::Admit EngineThread::submit(std::shared_ptr<Ticket> t) {
  {
    std::lock_guard<std::mutex> lk(m_);
    if (stopping_) return Admit::Stopping;
    if (in_flight_ >= capacity()) return Admit::QueueFull;
    ++in_flight_;
    inbox_.push_back(std::move(t));
  }
  cv_.notify_one();
  return Admit::Accepted;
}

void EngineThread::start() {
  thread_ = std::thread([this] { run(); });
}

void EngineThread::stop_accepting() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
  }
  cv_.notify_one();
}

void EngineThread::join() {
  if (thread_.joinable()) thread_.join();
}

EngineMetrics EngineThread::metrics() const {
  std::lock_guard<std::mutex> lk(metrics_m_);
  return metrics_;
}

void EngineThread::end(uint64_t id, FinishReason why, bool timed_out, bool shutdown) {
  const auto it = live_.find(id);
  if (it == live_.end()) return;
  loop_.cancel(id);
  {
    std::lock_guard<std::mutex> lk(it->second->m);
    it->second->timed_out = timed_out;
    it->second->shutdown = shutdown;
  }
  LoopEvent ev;
  ev.id = id;
  ev.finish = why;
  it->second->push(std::move(ev));
  live_.erase(it);
  --in_flight_;
}

void EngineThread::run() {
  std::vector<LoopEvent> events;
  std::vector<std::shared_ptr<Ticket>> incoming;
  std::vector<SlotState> states;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_.wait(lk, [&] { return !inbox_.empty() || !loop_.idle() || stopping_; });
      stopping = stopping_;
      incoming.swap(inbox_);
    }
    uint64_t cancelled = 0, timed_out = 0, failed = 0, finished = 0, generated = 0, prompt = 0, disconnects = 0;
    for (std::shared_ptr<Ticket>& t : incoming) {
      const SubmitResult s = loop_.submit(t->request);
      if (s.kind != SubmitResult::Accepted) {
        // The handler checked the refusals and in_flight_ bounds the queue: not expected.
        LoopEvent ev;
        ev.finish = FinishReason::Error;
        ev.error = s.kind == SubmitResult::QueueFull ? "the queue is full" : s.error;
        t->push(std::move(ev));
        --in_flight_;
        ++failed;
        continue;
      }
      prompt += t->request.prompt.size();
      live_.emplace(s.id, std::move(t));
    }
    incoming.clear();
    const double now = now_seconds();
    std::vector<std::pair<uint64_t, bool>> drop;
    for (const auto& [id, t] : live_) {
      if (t->cancelled.load())
        drop.emplace_back(id, false);
      else if (t->deadline > 0 && now > t->deadline)
        drop.emplace_back(id, true);
    }
    for (const auto& [id, late] : drop) {
      end(id, FinishReason::Cancelled, late, false);
      late ? ++timed_out : ++cancelled;
    }
    gone_.clear();
    find_gone_clients(gone_);
    for (uint64_t id : gone_) {
      const auto it = live_.find(id);
      if (it == live_.end()) continue;
      if (!it->second->client_gone.exchange(true)) ++disconnects;
      end(id, FinishReason::Cancelled, false, false);
      ++cancelled;
    }
    events.clear();
    if (!loop_.idle()) {
      const double t0 = now_seconds();
      loop_.step(events);
      if (loop_.last_step_prefilled()) measure_prefill(now_seconds() - t0);
    }
    for (LoopEvent& ev : events) {
      const auto it = live_.find(ev.id);
      if (it == live_.end()) continue;
      if (ev.token >= 0) ++generated;
      const FinishReason f = ev.finish;
      it->second->push(std::move(ev));
      if (f != FinishReason::None) {
        f == FinishReason::Error ? ++failed : ++finished;
        live_.erase(it);
        --in_flight_;
      }
    }
    if (stopping) {
      // Requests still waiting for a slot after this step's admissions are cancelled; running
      // ones go on to their end.
      loop_.slot_states(states);
      std::vector<uint64_t> waiting;
      for (const auto& [id, t] : live_) {
        bool running = false;
        for (const SlotState& s : states) running |= s.phase != SlotPhase::Free && s.id == id;
        if (!running) waiting.push_back(id);
      }
      for (uint64_t id : waiting) end(id, FinishReason::Cancelled, false, true), ++cancelled;
    }
    loop_.slot_states(states);
    {
      std::lock_guard<std::mutex> lk(metrics_m_);
      metrics_.prompt_tokens += prompt;
      metrics_.generated_tokens += generated;
      metrics_.requests_finished += finished;
      metrics_.requests_cancelled += cancelled;
      metrics_.requests_failed += failed;
      metrics_.requests_timed_out += timed_out;
      metrics_.client_disconnects += disconnects;
      metrics_.prefill_tokens_per_second = prefill_rate_.load();
      metrics_.steps += events.empty() ? 0 : 1;
      metrics_.slots_busy = loop_.active();
      metrics_.queue_length = loop_.queued();
      metrics_.slots = states;
    }
    if (stopping && loop_.idle()) {
      std::lock_guard<std::mutex> lk(m_);
      if (inbox_.empty()) break;
    }
  }
}

}  // namespace keel::cli
