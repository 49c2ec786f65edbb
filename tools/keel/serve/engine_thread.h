// `keel serve`'s engine side: one thread owns the runtime and its EngineLoop; HTTP handler
// threads hand requests over as Tickets through a bounded inbox and wait on the Ticket for the
// tokens. A handler that loses its client (or finds a stop string) sets `cancelled`, and the
// engine frees the slot before its next step; a request past its deadline is cancelled the same
// way. The engine also watches each request's connection itself (Ticket::client_fd): a peer
// that closed or reset it is noticed before every step, while the request waits for a slot,
// prefills or generates, streamed or not, and its slot is freed at that step.
//
// The engine measures its own prefill rate (prompt tokens through the model per second of the
// steps that ran prompt chunks), so that a handler can refuse up front a prompt that could not
// finish prefill before its deadline.
#pragma once

#include <poll.h>

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
  // The client's socket, polled by the engine while the request is live (-1: none). Valid while
  // the request is live and `cancelled` is false: the handler sets `cancelled` before its
  // connection can close.
  int client_fd = -1;
  // Set once by whoever first sees the client gone (the engine's poll or a failed write), who
  // alone counts the disconnect.
  std::atomic<bool> client_gone{false};

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
  uint64_t client_disconnects = 0;  // noticed by the engine's poll
  double prefill_tokens_per_second = 0;
  uint32_t slots_busy = 0;
  size_t queue_length = 0;
  std::vector<SlotState> slots;
};

class EngineThread {
 public:
  // The prefill rate assumed before the engine has measured one: low, so that while nothing is
  // known a long prompt is refused rather than left holding a slot until its deadline.
  static constexpr double kInitialPrefillRate = 100;

  // max_per_client: slots one client may hold (0 = no limit; EngineLoop).
  EngineThread(Runtime& rt, uint32_t queue_capacity, uint32_t max_per_client = 0);
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
  // Prompt tokens per second through the model over the recent steps that prefilled (weighted
  // toward the latest); kInitialPrefillRate until the first such step.
  double prefill_rate() const { return prefill_rate_.load(); }
  uint32_t slots() const { return loop_.slots(); }
  uint32_t capacity() const { return loop_.slots() + loop_.queue_capacity(); }

 private:
  void run();
  void end(uint64_t id, FinishReason why, bool timed_out, bool shutdown);
  // Live requests whose client closed or reset its connection.
  void find_gone_clients(std::vector<uint64_t>& gone);
  void measure_prefill(double seconds);

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
  std::atomic<double> prefill_rate_{kInitialPrefillRate};
  double prefill_tokens_w_ = 0, prefill_seconds_w_ = 0;  // decayed sums, engine thread only
  std::vector<pollfd> polls_;
  std::vector<uint64_t> poll_ids_;
  std::vector<uint64_t> gone_;
};

}  // namespace keel::cli
