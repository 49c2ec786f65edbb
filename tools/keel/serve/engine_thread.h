// `keel serve`'s engine side: one thread owns the runtime and its EngineLoop; HTTP handler
// threads hand requests over as Tickets through a bounded inbox and wait on the Ticket for the
// tokens. A handler that loses its client (or finds a stop string) sets `cancelled`, and the
// engine frees the slot before its next step; a request past its deadline is cancelled the same
// way.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "keel/serve/engine_loop.h"

namespace keel::cli {

struct Ticket {
  LoopRequest request;
  double deadline = 0;  // now_seconds() past which the request is cancelled; 0 = none
  std::atomic<bool> cancelled{false};

  // Engine -> handler. A Cancelled event with `timed_out` ends a request past its deadline.
  std::mutex m;
  std::condition_variable cv;
  std::deque<LoopEvent> events;
  bool timed_out = false;
  bool shutdown = false;  // cancelled because the server stops

  void push(LoopEvent ev);
  // Waits up to `seconds` for events; moves them into `out`. False on timeout.
  bool wait(std::deque<LoopEvent>& out, double seconds);
};

struct EngineMetrics {
  uint64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  uint64_t requests_finished = 0, requests_cancelled = 0, requests_failed = 0, requests_timed_out = 0;
  uint32_t slots_busy = 0;
  size_t queue_length = 0;
  std::vector<SlotState> slots;
};

class EngineThread {
 public:
  EngineThread(Runtime& rt, uint32_t queue_capacity);
  ~EngineThread();

  enum class Admit { Accepted, QueueFull, Stopping };
  // Bounded: at most slots + queue_capacity requests in flight.
  Admit submit(std::shared_ptr<Ticket> t);
  // The same refusal the loop would give (prompt too long for a full budget), for a status
  // before the response starts.
  std::string refusal(const LoopRequest& r) const { return loop_.refusal(r); }

  void start();
  // Refuses new requests and cancels queued ones (their handlers answer 503); running ones
  // finish. join() returns when none is left.
  void stop_accepting();
  void join();

  EngineMetrics metrics() const;
  uint32_t slots() const { return loop_.slots(); }
  uint32_t capacity() const { return loop_.slots() + loop_.queue_capacity(); }

 private:
  void run();
  void end(uint64_t id, FinishReason why, bool timed_out, bool shutdown);

  EngineLoop loop_;
  std::thread thread_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Ticket>> inbox_;
  bool stopping_ = false;
  std::atomic<uint32_t> in_flight_{0};
  std::map<uint64_t, std::shared_ptr<Ticket>> live_;  // engine thread only
  mutable std::mutex metrics_m_;
  EngineMetrics metrics_;
};

}  // namespace keel::cli
