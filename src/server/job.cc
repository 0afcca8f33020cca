// Job: the event channel between the scheduler thread and a connection thread.
#include "server/job.h"

namespace petrel::server {

uint64_t Job::NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void Job::Push(JobEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

bool Job::Wait(std::chrono::milliseconds timeout, std::vector<JobEvent>* out) {
  out->clear();
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [this] { return !events_.empty(); });
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return !out->empty();
}

}  // namespace petrel::server
