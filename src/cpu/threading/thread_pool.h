// ThreadPool: the CPU backend's fork-join pool; `ParallelFor` splits [0, n) statically.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace petrel::cpu {

// A pool of `n_threads - 1` workers plus the calling thread. `ParallelFor(n, fn)` cuts [0, n)
// into contiguous chunks (about `chunks_per_thread` per thread, multiples of `grain` except the
// last), and the threads claim chunks from a shared counter until none are left; it returns
// when all are done.
// Claiming instead of a fixed split keeps every core busy when one thread is preempted on a
// shared host: the others take its share, and a worker that has not joined the call by the time
// every chunk is claimed is not waited for. Kernels must therefore not depend on which thread
// runs a chunk (ours do not: a row's result depends only on the row).
//
// Between calls workers spin briefly (a decode step issues many small ParallelFor calls back to
// back) and then park on a condition variable, so an idle pool costs no CPU. A call allocates
// nothing. ParallelFor must not be called from inside `fn` or from two threads at once.
class ThreadPool {
 public:
  // n_threads >= 1; 1 runs everything inline. When the OS refuses a thread (a process or
  // memory limit), the pool runs everything on the calling thread and start_error() says why.
  explicit ThreadPool(size_t n_threads);
  ~ThreadPool();  // joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return n_threads_; }
  // The index of the calling thread in its pool: 0 for the thread that calls ParallelFor (and
  // any thread outside a pool), 1 .. size()-1 for the workers. Lets a caller hand each thread
  // its own slice of scratch it sized beforehand.
  static size_t ThreadIndex();
  // Empty when every requested thread started.
  const std::string& start_error() const { return start_error_; }

  // `fn` is any callable `void(size_t begin, size_t end)`; it is called by reference.
  template <class Fn>
  void ParallelFor(size_t n, const Fn& fn, size_t grain = 1, size_t chunks_per_thread = 4) {
    if (n == 0) return;
    if (n_threads_ == 1 || n == 1) return fn(size_t{0}, n);
    Run(n, grain, chunks_per_thread, &fn, [](const void* ctx, size_t begin, size_t end) {
      (*static_cast<const Fn*>(ctx))(begin, end);
    });
  }

  // The largest chunk ParallelFor(n, fn, grain, chunks_per_thread) hands one call of `fn`, so a
  // per-thread scratch can be sized once for any chunk it may get.
  size_t MaxChunk(size_t n, size_t grain = 1, size_t chunks_per_thread = 4) const;

  // Pins thread i (the caller is thread 0, and stays pinned afterwards) to the i-th CPU of the
  // process's affinity mask. Returns false, leaving the rest unpinned, when there are fewer
  // CPUs than threads or the OS refuses.
  bool PinThreads();

 private:
  using ChunkFn = void (*)(const void* ctx, size_t begin, size_t end);

  void Run(size_t n, size_t grain, size_t chunks_per_thread, const void* ctx, ChunkFn fn);
  void RunChunks();
  void WorkerLoop(size_t thread_index);
  void StopWorkers();

  size_t n_threads_;
  std::string start_error_;
  std::vector<std::thread> workers_;  // (n_threads - 1)

  // The current job, written by Run before it opens the job in `state_` (release) and read by
  // the workers after they join it (acquire).
  size_t job_n_ = 0;
  size_t job_chunk_ = 1;  // elements per claimed chunk
  const void* job_ctx_ = nullptr;
  ChunkFn job_fn_ = nullptr;
  // Set by StopWorkers; a worker may read it while it handles an earlier job number, before the
  // job bump that publishes it, so it is atomic (found by ThreadSanitizer).
  std::atomic<bool> stop_{false};

  // One word for a job's start and end: the job number (bits 32-63, bumped by Run to start a
  // job), `kJobClosed` (bit 31, set by Run once every chunk is claimed) and the number of
  // workers inside the job (bits 0-30). A worker joins only an open job, so Run waits only for
  // workers that joined, never for one that is still waking or was descheduled before it saw
  // the job.
  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<size_t> next_chunk_{0};  // first unclaimed chunk of the current job
  alignas(64) std::atomic<size_t> sleepers_{0};  // workers parked (or parking) on `wake_`
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace petrel::cpu
