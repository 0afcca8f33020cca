// ThreadPool: every index is covered exactly once, for many sizes and thread counts; no hangs.
#include "cpu/threading/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/threading/host_work_split.h"

namespace petrel::cpu {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (size_t n_threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(n_threads);
    ASSERT_EQ(pool.size(), n_threads);
    for (size_t n : {0, 1, 2, 3, 5, 6, 7, 8, 13, 64, 100, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<size_t> calls{0};
      pool.ParallelFor(n, [&](size_t begin, size_t end) {
        ASSERT_LT(begin, end);
        ASSERT_LE(end, n);
        calls.fetch_add(1);
        for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
      // A few chunks per thread at most (claimed dynamically), never an empty one.
      ASSERT_LE(calls.load(), std::min(n, 4 * n_threads)) << "n " << n;
    }
  }
}

TEST(ThreadPoolTest, ChunksAreContiguousAndRespectTheGrain) {
  for (size_t grain : {1, 4, 8}) {
    ThreadPool pool(3);
    std::mutex mutex;
    std::vector<std::pair<size_t, size_t>> chunks;
    pool.ParallelFor(203, [&](size_t begin, size_t end) {
      std::lock_guard<std::mutex> lock(mutex);
      chunks.push_back({begin, end});
    }, grain);
    std::sort(chunks.begin(), chunks.end());
    size_t expected_begin = 0;
    for (const auto& [begin, end] : chunks) {
      EXPECT_EQ(begin, expected_begin);
      EXPECT_EQ(begin % grain, 0u) << "grain " << grain;
      expected_begin = end;
    }
    EXPECT_EQ(expected_begin, 203u);
  }
}

// About chunks_per_thread chunks per thread: 203 items on 3 threads.
TEST(ThreadPoolTest, ChunksPerThreadSetsTheChunkCount) {
  ThreadPool pool(3);
  for (auto [per_thread, expected] : {std::pair<size_t, size_t>{1, 3}, {4, 12}, {16, 41}}) {
    std::atomic<size_t> chunks{0}, items{0};
    pool.ParallelFor(203, [&](size_t begin, size_t end) {
      chunks.fetch_add(1);
      items.fetch_add(end - begin);
    }, 1, per_thread);
    EXPECT_EQ(chunks.load(), expected) << per_thread << " per thread";
    EXPECT_EQ(items.load(), 203u);
  }
}

// A thread that is late (preempted) does not hold the others: they claim its chunks.
TEST(ThreadPoolTest, BusyThreadsTakeOverAStalledThreadsWork) {
  ThreadPool pool(2);
  std::atomic<int> stalled{0};
  std::vector<std::atomic<int>> hits(64);
  pool.ParallelFor(64, [&](size_t begin, size_t end) {
    if (stalled.fetch_add(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (auto& hit : hits) EXPECT_EQ(hit.load(), 1);
}

TEST(ThreadPoolTest, ManyCallsDoNotHang) {
  for (size_t n_threads : {2, 4}) {
    ThreadPool pool(n_threads);
    std::atomic<uint64_t> sum{0};
    for (int call = 0; call < 10000; ++call) {
      pool.ParallelFor(n_threads * 3, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) sum.fetch_add(i);
      });
    }
    const uint64_t per_call = (n_threads * 3) * (n_threads * 3 - 1) / 2;
    EXPECT_EQ(sum.load(), per_call * 10000);
  }
}

// A worker that comes late to a call (still waking, or descheduled: four threads on fewer CPUs)
// either joins it before ParallelFor returns or stays out of it, never runs its `fn` afterwards.
TEST(ThreadPoolTest, LateWorkersNeverRunAFinishedCall) {
  ThreadPool pool(4);
  std::atomic<int> current_call{0}, stale{0};
  for (int call = 0; call < 20000; ++call) {
    current_call.store(call);
    std::atomic<size_t> covered{0};
    pool.ParallelFor(2, [&, call](size_t begin, size_t end) {
      if (current_call.load() != call) stale.fetch_add(1);
      covered.fetch_add(end - begin);
    });
    ASSERT_EQ(covered.load(), 2u) << "call " << call;
  }
  EXPECT_EQ(stale.load(), 0);
}

// Workers that park between calls (long gaps) still wake up for the next call.
TEST(ThreadPoolTest, WakesParkedWorkers) {
  ThreadPool pool(3);
  for (int call = 0; call < 5; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic<size_t> covered{0};
    pool.ParallelFor(30, [&](size_t begin, size_t end) { covered.fetch_add(end - begin); });
    EXPECT_EQ(covered.load(), 30u);
  }
}

TEST(ThreadPoolTest, PinThreadsDoesNotBreakThePool) {
  cpu_set_t saved;  // PinThreads pins the calling thread too; undo that for later tests
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(saved), &saved));
  ThreadPool pool(2);
  pool.PinThreads();  // may be refused (fewer CPUs); the pool must work either way
  std::atomic<size_t> covered{0};
  pool.ParallelFor(100, [&](size_t begin, size_t end) { covered.fetch_add(end - begin); });
  EXPECT_EQ(covered.load(), 100u);
  sched_setaffinity(0, sizeof(saved), &saved);
}

// The matrix products' row chunks: whole lanes groups for quantized weights, whole float tiles
// (3 and 4 rows) otherwise, and for the small shape's 2048-row gate and up on two threads,
// chunks that split evenly (48-row chunks gave one thread 1152 rows and the other 896).
TEST(ThreadPoolTest, MatMulRowChunksKeepTheKernelsBlocksAndSplitEvenly) {
  ThreadPool pool(2);
  const size_t quant_grain = MatMulRowGrain(DType::kQ8_0);
  EXPECT_EQ(quant_grain % 16, 0u);
  EXPECT_EQ(MatMulRowGrain(DType::kF32) % 12, 0u);
  for (size_t rows : {768, 2048, 5632}) {
    SCOPED_TRACE(rows);
    const size_t chunk = pool.MaxChunk(rows, quant_grain, MatMulChunksPerThread(DType::kQ8_0, 64));
    EXPECT_EQ(chunk % quant_grain, 0u);
    EXPECT_EQ(rows % chunk, 0u);
    EXPECT_EQ(rows / chunk % pool.size(), 0u);
  }
}

}  // namespace
}  // namespace petrel::cpu
