// The HTTP server's worker threads: started on demand up to a fixed maximum, so that idle
// connections (each holds a worker until the idle timeout) do not starve the next request while
// the count of threads stays bounded. Connections beyond the maximum wait for a worker.
//
// The allocator keeps freed memory per thread (a request body's buffers, up to --max-body-bytes
// several times over), so every thread that has served a large request holds that much. Hence
// the most recently idle worker takes the next connection (a steady load keeps reusing the same
// few threads instead of cycling through all of them), and a worker left without work for
// `retire_after` ends, returning its memory after a burst.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace keel::cli {

class HttpPool : public httplib::TaskQueue {
 public:
  explicit HttpPool(size_t max_threads, std::chrono::milliseconds retire_after = std::chrono::seconds(2))
      : max_threads_(max_threads), retire_after_(retire_after) {}
  ~HttpPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;
  size_t threads() const;
  size_t waiting() const;

 private:
  // An idle worker, on its own stack while it waits; `go` once it is handed work or the pool ends.
  struct Idle {
    std::condition_variable cv;
    bool go = false;
  };
  void work();
  void retire_self();

  const size_t max_threads_;
  const std::chrono::milliseconds retire_after_;
  mutable std::mutex m_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  std::vector<std::thread> retired_;  // ended or ending; joined by the next enqueue or shutdown
  std::vector<Idle*> idle_;           // the most recently idle last
  bool shutdown_ = false;
};

}  // namespace keel::cli
