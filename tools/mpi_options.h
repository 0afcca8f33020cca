// `--mpi`, `--mpi-split`, `--mpi-report`, `--mpi-timeout`: pipeline parallelism over MPI for the
// subcommands that drive an engine through a fixed sequence of calls (run, perplexity, bench).
// Every rank runs the same subcommand; only rank 0 writes to stdout.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/runtime/engine.h"

namespace petrel::tools {

struct MpiOptions {
  bool enabled = false;
  std::string split;       // "3,2,2": blocks per rank; empty: by weight bytes
  bool report = false;     // one "mpi-report:" line per rank on stderr at exit
  double timeout_s = 300;  // how long a rank waits for its neighbour
  // `serve`: rank 0 alone makes the engine calls, which the other ranks replay
  // (EngineOptions::PipelineCalls::kFirstStageLeads), with this many passes per batch in flight
  // (--mpi-micro-batches; 0: one per rank).
  bool first_rank_leads = false;
  size_t micro_batches = 0;

  void AddTo(CLI::App& app);
  // Joins the MPI job and returns the link for EngineOptions::pipeline (null without --mpi).
  Result<std::shared_ptr<PipelineLink>> Join() const;
};

// Remembers what the report prints: the resident memory before the engine loads, and after it,
// the rank's blocks and bytes.
void NoteRssBeforeLoad();
void NoteLoadedEngine(const Engine& engine);

// After each rank's load: whether every rank loaded. A rank that failed keeps its own error; the
// others get one saying so. Every rank then knows, so the job can end without an abort.
Status AgreeOnLoad(const Status& loaded);

// A seed every rank agrees on (rank 0's), so that every rank samples the same tokens; `seed`
// itself outside an MPI job.
uint64_t SharedSeed(uint64_t seed);

// The end of `main`: prints the report, then leaves the MPI job (an error on one rank ends every
// rank, so none waits for it). Returns `exit_code`.
int FinishMpi(int exit_code);

// This process's rank in the MPI job; 0 outside one.
int MpiRank();

// A signal came: every wait for another rank fails from now on (mpirun signals every rank when
// one dies, and a rank waiting for the dead one must not wait out --mpi-timeout).
void InterruptMpiWaits();
// Whether a transfer between ranks has failed: the pipeline cannot run another pass.
bool MpiPipelineBroken();

// Resident memory now (VmRSS), in bytes.
size_t RssBytes();

}  // namespace petrel::tools
