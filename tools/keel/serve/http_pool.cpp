#include "keel/serve/http_pool.h"

#include <algorithm>

namespace keel::cli {

void HttpPool::enqueue(std::function<void()> fn) {
  std::vector<std::thread> retired;
  {
    std::lock_guard<std::mutex> lk(m_);
    retired.swap(retired_);
    jobs_.push_back(std::move(fn));
    if (!idle_.empty()) {
      Idle* w = idle_.back();
      idle_.pop_back();
      w->go = true;
      w->cv.notify_one();
    } else if (threads_.size() < max_threads_) {
      threads_.emplace_back([this] { work(); });
    }
  }
  for (std::thread& t : retired) t.join();
}

void HttpPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(m_);
    shutdown_ = true;
    for (Idle* w : idle_) {
      w->go = true;
      w->cv.notify_one();
    }
    idle_.clear();
    threads.swap(threads_);
    for (std::thread& t : retired_) threads.push_back(std::move(t));
    retired_.clear();
  }
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

// Called with m_ held: this thread's handle goes to whoever joins next.
void HttpPool::retire_self() {
  const auto self = std::this_thread::get_id();
  const auto it =
      std::find_if(threads_.begin(), threads_.end(), [&](const std::thread& t) { return t.get_id() == self; });
  if (it == threads_.end()) return;  // shutdown() holds the handle already
  retired_.push_back(std::move(*it));
  *it = std::move(threads_.back());
  threads_.pop_back();
}

void HttpPool::work() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lk(m_);
      // Another worker may take the job this one was woken for: then it waits again.
      while (jobs_.empty() && !shutdown_) {
        Idle me;
        idle_.push_back(&me);
        if (!me.cv.wait_for(lk, retire_after_, [&] { return me.go; })) {
          idle_.erase(std::find(idle_.begin(), idle_.end(), &me));
          retire_self();
          return;
        }
      }
      // Connections already accepted are served before the pool ends.
      if (jobs_.empty()) return;
      fn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    fn();
  }
}

}  // namespace keel::cli
