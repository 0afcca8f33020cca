// The executor: runs a graph node by node on each node's backend, keeping activations in one
// arena per backend (reused by liveness) and copying values only where the backend changes.
#pragma once

#include <memory>
#include <vector>

#include "core/runtime/backend.h"
#include "core/graph/graph.h"
#include "core/runtime/kv_cache.h"
#include "core/runtime/placement.h"

namespace petrel {

// Where a value (or its copy on another backend) lives.
struct ValueSlot {
  BackendId backend = 0;
  size_t offset = 0;
};

// The arena layout of a graph: every value, and every copy of it on another backend, gets an
// offset in its backend's arena; values whose lives do not overlap share bytes. A pure function
// of the graph and placement, so callers can size work (micro-batches) before running anything.
struct ArenaLayout {
  std::vector<ValueSlot> home;                // per value: producer's backend and offset
  std::vector<std::vector<int64_t>> copy_at;  // per value, per backend: offset of its copy (-1 none)
  std::vector<size_t> bytes;                  // per backend: arena size
};
Result<ArenaLayout> LayOutArenas(const Graph& graph, const Placement& placement,
                                 size_t n_backends);

class Executor {
 public:
  Executor(std::vector<Backend*> backends, Placement placement);
  ~Executor();

  // Runs `graph` and copies the logits value to `host_logits` (rows x n_vocab floats). Returns
  // once every backend has finished.
  Status Run(const Graph& graph, const BatchContext& batch, const KvCache& kv, float* host_logits);

  // Number of cross-backend copies the last Run made (tests check that only boundaries copy).
  size_t last_copy_count() const { return last_copy_count_; }
  size_t arena_bytes() const;

 private:
  Status Plan(const Graph& graph);
  bool SameShapeAsPlanned(const Graph& graph) const;

  std::vector<Backend*> backends_;
  Placement placement_;
  std::vector<std::unique_ptr<BackendBuffer>> arenas_;  // per backend
  ArenaLayout layout_;                        // for the current graph
  std::vector<ValueView> bound_;              // per value, re-pointed per node
  std::vector<uint8_t> copied_;               // per (value, backend): copy made in this run
  std::vector<uint8_t> unsubmitted_;          // per backend: has nodes recorded since Submit
  std::vector<uint8_t> in_batch_;             // per backend: BeginBatch called in this run
  std::vector<ValueDesc> planned_values_;     // the graph shape the plan above is for
  size_t planned_nodes_ = 0;
  size_t last_copy_count_ = 0;
};

}  // namespace petrel
