// MpiLink: MPI point-to-point and broadcast with polled deadlines (mpi_link.h).
#include "dist/mpi_link.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>

namespace petrel::dist {
namespace {

constexpr int kRowsTag = 41;
constexpr int kCallsSizeTag = 42, kCallsTag = 43;  // rank 0 to each other rank
constexpr int kOutputTag = 44;                     // the last rank to rank 0
bool g_joined = false;
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_failed{false};

// Waits for `request` until `timeout_s` has passed. MPI_Wait would block for ever on a peer
// that hangs without dying; polling lets the rank give up with an error instead. The first
// polls are back to back (a decode step's rows arrive within microseconds on one host), later
// ones sleep so that a waiting rank leaves the cores to the ranks computing.
// A timeout of 0 waits without a deadline (a follower waiting for the next request).
Status Wait(MPI_Request* request, double timeout_s, int rank, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (int polls = 0;; ++polls) {
    int done = 0;
    if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      g_failed = true;
      return Error("rank %d: MPI failed while waiting for %s", rank, what);
    }
    if (done) return Status::Ok();
    if (g_interrupted.load(std::memory_order_relaxed)) {
      g_failed = true;
      return Error("rank %d: stopped waiting for %s: the MPI job is ending", rank, what);
    }
    if (polls > 64) {
      if (timeout_s > 0 && Clock::now() > deadline) {
        g_failed = true;
        return Error("rank %d: no %s within %.0f s (is every rank still running?)", rank, what,
                     timeout_s);
      }
      ::usleep(polls > 4096 ? 500 : 20);
    }
  }
}

int Count(size_t n_floats) {
  PETREL_CHECK(n_floats <= size_t(INT_MAX));
  return int(n_floats);
}

}  // namespace

Result<std::shared_ptr<MpiLink>> MpiLink::Join(std::vector<size_t> counts, double timeout_s) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // One thread at a time calls MPI: the main thread, or a server's scheduler thread while
    // the main thread waits; the thread pool's workers never do.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return Error("MPI_Init failed");
    }
    // Errors come back as codes (turned into Status) instead of ending the job silently.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  g_joined = true;
  std::shared_ptr<MpiLink> link(new MpiLink());
  MPI_Comm_rank(MPI_COMM_WORLD, &link->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &link->n_ranks_);
  link->counts_ = std::move(counts);
  link->timeout_s_ = timeout_s;
  return link;
}

Result<LayerRange> MpiLink::ChooseLayers(const LoadedModel& model) {
  PETREL_ASSIGN_OR_RETURN(const std::vector<LayerRange> stages,
                          PlanStages(model, size_t(n_ranks_), counts_));
  return stages[size_t(rank_)];
}

Status MpiLink::SendRows(const float* rows, size_t n_floats) {
  MPI_Request request;
  if (MPI_Isend(rows, Count(n_floats), MPI_FLOAT, rank_ + 1, kRowsTag, MPI_COMM_WORLD, &request) !=
      MPI_SUCCESS) {
    return Error("rank %d: sending hidden rows to rank %d failed", rank_, rank_ + 1);
  }
  return Wait(&request, timeout_s_, rank_, "room to send hidden rows to the next rank");
}

Status MpiLink::ReceiveRows(float* rows, size_t n_floats) {
  MPI_Request request;
  if (MPI_Irecv(rows, Count(n_floats), MPI_FLOAT, rank_ - 1, kRowsTag, MPI_COMM_WORLD, &request) !=
      MPI_SUCCESS) {
    return Error("rank %d: receiving hidden rows from rank %d failed", rank_, rank_ - 1);
  }
  return Wait(&request, timeout_s_, rank_, "hidden rows from the previous rank");
}

Status MpiLink::ShareOutput(float* out, size_t n_floats) {
  MPI_Request request;
  if (MPI_Ibcast(out, Count(n_floats), MPI_FLOAT, n_ranks_ - 1, MPI_COMM_WORLD, &request) !=
      MPI_SUCCESS) {
    return Error("rank %d: broadcasting the logits failed", rank_);
  }
  return Wait(&request, timeout_s_, rank_, "logits from the last rank");
}

Status MpiLink::SendCalls(const std::vector<uint8_t>& calls) {
  // Point to point rather than a broadcast: a collective would have to be matched, in order,
  // with the logits' broadcasts of the other mode; messages between one pair keep their order.
  unsigned long long size = calls.size();
  std::vector<MPI_Request> requests;
  for (int to = 1; to < n_ranks_; ++to) {
    requests.emplace_back();
    if (MPI_Isend(&size, 1, MPI_UNSIGNED_LONG_LONG, to, kCallsSizeTag, MPI_COMM_WORLD,
                  &requests.back()) != MPI_SUCCESS) {
      g_failed = true;
      return Error("rank %d: sending engine calls to rank %d failed", rank_, to);
    }
    requests.emplace_back();
    if (MPI_Isend(calls.data(), Count(calls.size()), MPI_BYTE, to, kCallsTag, MPI_COMM_WORLD,
                  &requests.back()) != MPI_SUCCESS) {
      g_failed = true;
      return Error("rank %d: sending engine calls to rank %d failed", rank_, to);
    }
  }
  for (MPI_Request& request : requests) {
    PETREL_RETURN_IF_ERROR(Wait(&request, timeout_s_, rank_, "room to send engine calls"));
  }
  return Status::Ok();
}

Status MpiLink::ReceiveCalls(std::vector<uint8_t>* calls) {
  unsigned long long size = 0;
  MPI_Request request;
  if (MPI_Irecv(&size, 1, MPI_UNSIGNED_LONG_LONG, 0, kCallsSizeTag, MPI_COMM_WORLD, &request) !=
      MPI_SUCCESS) {
    g_failed = true;
    return Error("rank %d: receiving engine calls failed", rank_);
  }
  // No deadline: a server may stay idle for as long as no request comes.
  PETREL_RETURN_IF_ERROR(Wait(&request, 0, rank_, "engine calls from rank 0"));
  calls->resize(size_t(size));
  if (MPI_Irecv(calls->data(), Count(calls->size()), MPI_BYTE, 0, kCallsTag, MPI_COMM_WORLD,
                &request) != MPI_SUCCESS) {
    g_failed = true;
    return Error("rank %d: receiving engine calls failed", rank_);
  }
  return Wait(&request, timeout_s_, rank_, "engine calls from rank 0");
}

Status MpiLink::SendOutputToFirst(const float* out, size_t n_floats) {
  MPI_Request request;
  if (MPI_Isend(out, Count(n_floats), MPI_FLOAT, 0, kOutputTag, MPI_COMM_WORLD, &request) !=
      MPI_SUCCESS) {
    g_failed = true;
    return Error("rank %d: sending the logits to rank 0 failed", rank_);
  }
  return Wait(&request, timeout_s_, rank_, "room to send the logits to rank 0");
}

Status MpiLink::PostOutputReceive(float* out, size_t n_floats) {
  output_receives_.emplace_back();
  if (MPI_Irecv(out, Count(n_floats), MPI_FLOAT, n_ranks_ - 1, kOutputTag, MPI_COMM_WORLD,
                &output_receives_.back()) != MPI_SUCCESS) {
    output_receives_.pop_back();
    g_failed = true;
    return Error("rank %d: receiving the logits failed", rank_);
  }
  return Status::Ok();
}

Status MpiLink::WaitOutputs() {
  Status status = Status::Ok();
  for (MPI_Request& request : output_receives_) {
    if (status.ok()) status = Wait(&request, timeout_s_, rank_, "logits from the last rank");
  }
  // After a failure the job ends; requests still pending are left to MPI_Abort.
  output_receives_.clear();
  return status;
}

bool MpiLink::failed() const { return g_failed; }

void InterruptWaits() { g_interrupted = true; }

bool AnyWaitFailed() { return g_failed; }

Result<bool> AllRanksOk(bool ok, double timeout_s) {
  int mine = ok ? 1 : 0, all = 0, rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Request request;
  if (MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &request) != MPI_SUCCESS) {
    return Error("rank %d: MPI_Iallreduce failed", rank);
  }
  PETREL_RETURN_IF_ERROR(Wait(&request, timeout_s, rank, "every rank's load status"));
  return all == 1;
}

bool MpiJoined() { return g_joined; }

int LeaveMpi(int exit_code, bool all_know) {
  if (!g_joined) return exit_code;
  g_joined = false;
  std::fflush(stdout);
  std::fflush(stderr);
  if (exit_code != 0 && !all_know) MPI_Abort(MPI_COMM_WORLD, exit_code);
  MPI_Finalize();
  return exit_code;
}

}  // namespace petrel::dist
