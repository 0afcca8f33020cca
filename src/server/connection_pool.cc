// ConnectionPool: a task queue that grows while every thread is busy.
#include "server/connection_pool.h"

#include <algorithm>
#include <system_error>
#include <thread>

namespace petrel::server {

ConnectionPool::ConnectionPool(size_t min_threads, size_t max_threads,
                               std::chrono::milliseconds idle_exit)
    : min_threads_(min_threads),
      max_threads_(std::max(min_threads, max_threads)),
      idle_exit_(idle_exit) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < min_threads_; ++i) StartThread();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::StartThread() {
  ++threads_;
  ++idle_;  // until it takes a job
  // Detached: a thread that idles out cannot join itself. shutdown() waits for the count.
  try {
    std::thread([this] { Work(); }).detach();
  } catch (const std::system_error&) {
    // Out of threads (a process limit): the queued connection waits for a running one.
    --threads_;
    --idle_;
  }
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.push_back(std::move(fn));
  if (jobs_.size() > idle_ && threads_ < max_threads_) StartThread();
  work_.notify_one();
}

void ConnectionPool::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  work_.notify_all();
  ended_.wait(lock, [this] { return threads_ == 0; });
}

size_t ConnectionPool::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_;
}

void ConnectionPool::Work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {  // idle_ counts this thread while it waits
    const bool woken =
        work_.wait_for(lock, idle_exit_, [this] { return !jobs_.empty() || stopping_; });
    if (jobs_.empty()) {
      if (stopping_ || (!woken && threads_ > min_threads_)) break;
      continue;
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    lock.unlock();
    job();
    lock.lock();
    ++idle_;
  }
  --idle_;
  --threads_;
  ended_.notify_all();
}

}  // namespace petrel::server
