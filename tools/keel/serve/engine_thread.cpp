#include "keel/serve/engine_thread.h"

#include <chrono>

#include "keel/session.h"

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

EngineThread::EngineThread(Runtime& rt, uint32_t queue_capacity) : loop_(rt, queue_capacity) {}

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
    uint64_t cancelled = 0, timed_out = 0, failed = 0, finished = 0, generated = 0, prompt = 0;
    for (std::shared_ptr<Ticket>& t : incoming) {
      const SubmitResult s = loop_.submit(t->request);
      if (s.kind != SubmitResult::Accepted) {
        // The handler checked the refusals and in_flight_ bounds the queue: not expected.
        LoopEvent ev;
        ev.finish = FinishReason::Failed;
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
    events.clear();
    if (!loop_.idle()) loop_.step(events);
    for (LoopEvent& ev : events) {
      const auto it = live_.find(ev.id);
      if (it == live_.end()) continue;
      if (ev.token >= 0) ++generated;
      const FinishReason f = ev.finish;
      it->second->push(std::move(ev));
      if (f != FinishReason::None) {
        f == FinishReason::Failed ? ++failed : ++finished;
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
