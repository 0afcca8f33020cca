// The MPI options of the `petrel` subcommands (mpi_options.h).
#include "tools/mpi_options.h"

#include <cstdio>
#include <fstream>

#include "tools/common.h"  // PeakRssBytes
#ifdef PETREL_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only; Open MPI's C++ bindings are deprecated
#include <mpi.h>

#include "dist/mpi_link.h"
#endif

namespace petrel::tools {
namespace {

struct Report {
  bool wanted = false;
  bool failure_agreed = false;  // every rank knows the job failed (AgreeOnLoad)
  double timeout_s = 300;
  int rank = -1;
  LayerRange layers;
  size_t rss_before_load = 0;
  size_t weight_bytes = 0, kv_bytes = 0;
};
Report g_report;

}  // namespace

void MpiOptions::AddTo(CLI::App& app) {
  app.add_flag("--mpi", enabled,
               "run as one stage of a pipeline under mpirun: each rank runs a contiguous range "
               "of blocks (docs/DISTRIBUTED.md)");
  app.add_option("--mpi-split", split,
                 "blocks per rank, e.g. 3,2,2 (default: balanced by weight bytes)");
  app.add_flag("--mpi-report", report,
               "at exit, one line per rank on stderr: its blocks, weight and KV bytes, resident "
               "memory before load and at its peak");
  app.add_option("--mpi-timeout", timeout_s,
                 "seconds a rank waits for its neighbour before it gives up (default 300)")
      ->check(RealRange(0, 1e6, /*lo_open=*/true));
}

Result<std::shared_ptr<PipelineLink>> MpiOptions::Join() const {
  if (!enabled) {
    if (!split.empty()) return Error("--mpi-split needs --mpi");
    return std::shared_ptr<PipelineLink>();
  }
#ifdef PETREL_HAVE_MPI
  std::vector<size_t> counts;
  if (!split.empty()) {
    PETREL_ASSIGN_OR_RETURN(counts, ParseLayerCounts(split));
  }
  PETREL_ASSIGN_OR_RETURN(std::shared_ptr<dist::MpiLink> link,
                          dist::MpiLink::Join(counts, timeout_s));
  if (!counts.empty() && counts.size() != size_t(link->n_ranks())) {
    return Error("--mpi-split has %zu counts for %d ranks", counts.size(), link->n_ranks());
  }
  // Rank 0 talks to the user; the others' results would repeat its own.
  if (link->rank() != 0 && !std::freopen("/dev/null", "w", stdout)) {
    return Error("rank %d: cannot silence stdout", link->rank());
  }
  g_report.wanted = report;
  g_report.timeout_s = timeout_s;
  g_report.rank = link->rank();
  return std::shared_ptr<PipelineLink>(link);
#else
  return Error(
      "--mpi: this petrel was built without MPI (install Open MPI and reconfigure with "
      "-Dmpi=enabled)");
#endif
}

size_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return size_t(std::stoull(line.substr(6))) * 1024;
  }
  return 0;
}

int MpiRank() { return g_report.rank < 0 ? 0 : g_report.rank; }

void InterruptMpiWaits() {
#ifdef PETREL_HAVE_MPI
  dist::InterruptWaits();
#endif
}

bool MpiPipelineBroken() {
#ifdef PETREL_HAVE_MPI
  return dist::AnyWaitFailed();
#else
  return false;
#endif
}

void NoteRssBeforeLoad() { g_report.rss_before_load = RssBytes(); }

void NoteLoadedEngine(const Engine& engine) {
  g_report.layers = engine.stage_layers();
  g_report.weight_bytes = engine.stage_weight_bytes();
  g_report.kv_bytes = engine.kv_bytes();
}

Status AgreeOnLoad(const Status& loaded) {
#ifdef PETREL_HAVE_MPI
  if (dist::MpiJoined()) {
    PETREL_ASSIGN_OR_RETURN(const bool all_ok, dist::AllRanksOk(loaded.ok(), g_report.timeout_s));
    if (all_ok) return Status::Ok();
    g_report.failure_agreed = true;
    if (!loaded.ok()) return loaded;
    return Error("rank %d: another rank could not load its part (its error says why)",
                 g_report.rank);
  }
#endif
  return loaded;
}

uint64_t SharedSeed(uint64_t seed) {
#ifdef PETREL_HAVE_MPI
  if (dist::MpiJoined()) {
    unsigned long long value = seed;
    MPI_Bcast(&value, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    return uint64_t(value);
  }
#endif
  return seed;
}

int FinishMpi(int exit_code) {
#ifdef PETREL_HAVE_MPI
  if (g_report.wanted && exit_code == 0) {
    std::fprintf(stderr,
                 "mpi-report: rank %d blocks %d-%d weight_bytes %zu kv_bytes %zu "
                 "rss_before_load %zu peak_rss %zu\n",
                 g_report.rank, g_report.layers.begin, g_report.layers.end - 1,
                 g_report.weight_bytes, g_report.kv_bytes, g_report.rss_before_load,
                 PeakRssBytes());
  }
  return dist::LeaveMpi(exit_code, g_report.failure_agreed);
#else
  return exit_code;
#endif
}

}  // namespace petrel::tools
