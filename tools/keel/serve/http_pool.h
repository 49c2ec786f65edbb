// The HTTP server's worker threads: started on demand up to a fixed maximum, so that idle
// connections (each holds a worker until the idle timeout) do not starve the next request while
// the count of threads stays bounded. Connections beyond the maximum wait for a worker.
#pragma once

#include <httplib.h>

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
  explicit HttpPool(size_t max_threads) : max_threads_(max_threads) {}
  ~HttpPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;
  size_t threads() const;
  size_t waiting() const;

 private:
  void work();

  const size_t max_threads_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace keel::cli
