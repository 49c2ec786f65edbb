#include "keel/serve/http_pool.h"

namespace keel::cli {

void HttpPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(m_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < max_threads_) threads_.emplace_back([this] { work(); });
  }
  cv_.notify_one();
}

void HttpPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(m_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t HttpPool::threads() const {
  std::lock_guard<std::mutex> lk(m_);
  return threads_.size();
}

size_t HttpPool::waiting() const {
  std::lock_guard<std::mutex> lk(m_);
  return jobs_.size();
}

void HttpPool::work() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lk(m_);
      ++idle_;
      cv_.wait(lk, [&] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      // Connections already accepted are served before the pool ends.
      if (jobs_.empty()) return;
      fn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    fn();
  }
}

}  // namespace keel::cli
