// The pool of connection threads: cpp-httplib serves each connection start to end on one thread
// of its task queue, and an idle keep-alive connection holds its thread until the keep-alive
// timeout. Its own pool has a fixed size, so a thousand idle connections would queue every real
// request behind them; this one starts another thread whenever every thread is busy (up to
// `max_threads`) and lets the extra threads end after they idle.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

namespace petrel::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  // `min_threads` are started at once and stay; more start on demand.
  ConnectionPool(size_t min_threads, size_t max_threads,
                 std::chrono::milliseconds idle_exit = std::chrono::seconds(10));
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then waits for every thread to end.
  void shutdown() override;

  size_t threads() const;

 private:
  void StartThread();  // mutex_ held
  void Work();

  const size_t min_threads_, max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable ended_;
  std::deque<std::function<void()>> jobs_;
  size_t threads_ = 0;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace petrel::server
