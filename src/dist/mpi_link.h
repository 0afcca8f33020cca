// The pipeline link over MPI (core/runtime/pipeline_link.h): rank r runs stage r, hidden rows go
// from rank r to r + 1, the last rank's output is broadcast to every rank. Every wait polls
// with a deadline, so a rank whose neighbour is gone fails with an error instead of waiting
// forever (Open MPI also ends the whole job when one of its processes dies).
#pragma once

#include <memory>
#include <vector>

#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include "core/base/status.h"
#include "core/runtime/pipeline_link.h"

namespace petrel::dist {

class MpiLink final : public PipelineLink {
 public:
  // Joins the MPI job (MPI_Init, once per process). `counts`: the --mpi-split block counts, or
  // empty to split by weight bytes. `timeout_s`: how long a receive waits for its neighbour.
  static Result<std::shared_ptr<MpiLink>> Join(std::vector<size_t> counts, double timeout_s);

  int rank() const override { return rank_; }
  int n_ranks() const override { return n_ranks_; }
  Result<LayerRange> ChooseLayers(const LoadedModel& model) override;
  Status SendRows(const float* rows, size_t n_floats) override;
  Status ReceiveRows(float* rows, size_t n_floats) override;
  Status ShareOutput(float* out, size_t n_floats) override;
  Status SendCalls(const std::vector<uint8_t>& calls) override;
  Status ReceiveCalls(std::vector<uint8_t>* calls) override;
  Status SendOutputToFirst(const float* out, size_t n_floats) override;
  Status PostOutputReceive(float* out, size_t n_floats) override;
  Status WaitOutputs() override;
  bool failed() const override;

 private:
  MpiLink() = default;
  int rank_ = 0, n_ranks_ = 1;
  std::vector<size_t> counts_;
  double timeout_s_ = 0;
  std::vector<MPI_Request> output_receives_;  // posted by PostOutputReceive, in order
};

// Whether every rank reports `ok` (a collective: every rank must call it), within `timeout_s`.
Result<bool> AllRanksOk(bool ok, double timeout_s);

// Whether this process joined an MPI job (MpiLink::Join).
bool MpiJoined();

// Makes every wait of this process fail at once (from then on), so that a thread waiting for a
// neighbour returns an error: the job is ending (a signal came). Safe from any thread.
void InterruptWaits();
// Whether a wait has failed (timed out, interrupted, or MPI reported an error).
bool AnyWaitFailed();
// Leaves the job: MPI_Finalize after `exit_code` 0, or when every rank knows of the failure
// (`all_know`, after AllRanksOk); otherwise MPI_Abort, which ends every rank, so that none waits
// for this one. Returns `exit_code`. Does nothing outside a job.
int LeaveMpi(int exit_code, bool all_know = false);

}  // namespace petrel::dist
