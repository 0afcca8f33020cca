// ThreadPool: spin-then-park workers, one state word to start jobs, let workers join and end them.
#include "cpu/threading/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <system_error>

#include "core/base/status.h"  // PETREL_CHECK

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // _mm_pause
#endif

namespace petrel::cpu {
namespace {

// Spin iterations before a worker parks: ~11 us of 22 ns pauses (Zen 5), longer than the
// longest gap between the parallel ops of a decode step (~7 us before attention: RoPE and the
// K/V row writes run on the caller alone), so a step wakes no parked worker. Not much longer:
// when the caller is descheduled on a shared host, a spinning worker holds a CPU it may need
// (small Q4_0 decode with one CPU busy elsewhere: 4000 spins 176 t/s, 1000 218, 500 and 250
// ~235, alternated runs).
constexpr int kWorkerSpins = 500;
// Spin iterations before the caller starts yielding while it waits for the workers.
constexpr int kCallerSpins = 1000;

constexpr int kJobShift = 32;
constexpr uint64_t kJobClosed = uint64_t{1} << 31;
constexpr uint64_t kJobWorkersMask = kJobClosed - 1;

inline uint64_t JobNumber(uint64_t state) { return state >> kJobShift; }

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(size_t n_threads) : n_threads_(n_threads) {
  PETREL_CHECK(n_threads >= 1);
  workers_.reserve(n_threads - 1);
  // std::thread reports a refused thread (EAGAIN under a process or memory limit) only by
  // throwing; the pool turns it into start_error() so that its owner can fail with a message.
  try {
    for (size_t i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  } catch (const std::system_error& e) {
    start_error_ = "cannot start " + std::to_string(n_threads) + " threads (" +
                   std::to_string(workers_.size() + 1) + " started): " + e.what();
    StopWorkers();
    workers_.clear();
    n_threads_ = 1;
  }
}

ThreadPool::~ThreadPool() { StopWorkers(); }

void ThreadPool::StopWorkers() {
  if (workers_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_relaxed);  // published by the job bump below
    state_.fetch_add(uint64_t{1} << kJobShift, std::memory_order_seq_cst);
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const size_t begin = next_chunk_.fetch_add(1, std::memory_order_relaxed) * job_chunk_;
    if (begin >= job_n_) return;
    job_fn_(job_ctx_, begin, std::min(job_n_, begin + job_chunk_));
  }
}

size_t ThreadPool::MaxChunk(size_t n, size_t grain, size_t chunks_per_thread) const {
  if (n_threads_ == 1 || n <= 1) return n;  // ParallelFor runs it inline, whole
  // Several chunks per thread (four by default): small enough to rebalance around a preempted
  // thread, large enough that claiming costs nothing next to the work.
  grain = std::max<size_t>(grain, 1);
  const size_t chunks = std::max<size_t>(chunks_per_thread, 1) * n_threads_;
  const size_t target = (n + chunks - 1) / chunks;
  return std::min(n, std::max(grain, (target + grain - 1) / grain * grain));
}

void ThreadPool::Run(size_t n, size_t grain, size_t chunks_per_thread, const void* ctx,
                     ChunkFn fn) {
  // The previous job is closed and empty: no worker reads the job fields written here.
  PETREL_DCHECK((state_.load(std::memory_order_relaxed) & kJobWorkersMask) == 0);
  job_chunk_ = std::max<size_t>(MaxChunk(n, grain, chunks_per_thread), 1);
  next_chunk_.store(0, std::memory_order_relaxed);
  job_n_ = n;
  job_ctx_ = ctx;
  job_fn_ = fn;
  // Opens the next job (open, no workers inside). Only this thread changes the job number.
  // seq_cst pairs with the worker's seq_cst `sleepers_` increment: either the worker sees the
  // new job before it waits, or we see it parked and wake it.
  const uint64_t job = JobNumber(state_.load(std::memory_order_relaxed)) + 1;
  state_.store(job << kJobShift, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) {
    // Taking the mutex orders this notify after a parking worker's predicate check.
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  RunChunks();
  // Every chunk is claimed. Closing the job keeps out the workers that have not joined yet (a
  // worker still waking, or descheduled before it saw the job: it would only find no chunk
  // left, and waiting for it cost the whole time it was off the CPU); wait for those inside.
  uint64_t state = state_.fetch_or(kJobClosed, std::memory_order_acq_rel);
  for (int spin = 0; (state & kJobWorkersMask) != 0; ++spin) {
    if (spin < kCallerSpins) {
      Pause();
    } else {
      std::this_thread::yield();
    }
    state = state_.load(std::memory_order_acquire);
  }
}

namespace {
thread_local size_t t_thread_index = 0;
}  // namespace

size_t ThreadPool::ThreadIndex() { return t_thread_index; }

void ThreadPool::WorkerLoop(size_t thread_index) {
  t_thread_index = thread_index;
  uint64_t seen = 0;  // the last job number this worker saw
  for (;;) {
    uint64_t state = state_.load(std::memory_order_acquire);
    for (int spin = 0; JobNumber(state) == seen && spin < kWorkerSpins; ++spin) {
      Pause();
      state = state_.load(std::memory_order_acquire);
    }
    if (JobNumber(state) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (JobNumber(state = state_.load(std::memory_order_seq_cst)) == seen) wake_.wait(lock);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = JobNumber(state);
    if (stop_.load(std::memory_order_relaxed)) return;
    // Join the job unless Run has closed it (then every chunk is taken) or opened a newer one
    // (the outer loop picks that up).
    while (JobNumber(state) == seen && (state & kJobClosed) == 0) {
      if (state_.compare_exchange_weak(state, state + 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        RunChunks();
        state_.fetch_sub(1, std::memory_order_release);
        break;
      }
    }
  }
}

bool ThreadPool::PinThreads() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < n_threads_) return false;
  for (size_t i = 0; i < n_threads_; ++i) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[i], &one);
    const pthread_t thread = i == 0 ? pthread_self() : workers_[i - 1].native_handle();
    if (pthread_setaffinity_np(thread, sizeof(one), &one) != 0) return false;
  }
  return true;
}

}  // namespace petrel::cpu
