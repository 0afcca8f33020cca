// The executor: runs a graph node by node on each node's backend, keeping activations in one
// arena per backend (reused by liveness) and copying values only where the backend changes.
#pragma once

#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/graph.h"
#include "core/kv_cache.h"
#include "core/placement.h"

namespace petrel {

class Executor {
 public:
  Executor(std::vector<Backend*> backends, Placement placement);
  ~Executor();

  // Runs `graph` and copies the logits value to `host_logits` (rows x n_vocab floats).
  Status Run(const Graph& graph, const BatchContext& batch, const KvCache& kv, float* host_logits);

  // Number of cross-backend copies the last Run made (tests check that only boundaries copy).
  size_t last_copy_count() const { return last_copy_count_; }
  size_t arena_bytes() const;

 private:
  struct Slot {              // where a value (or its copy on another backend) lives
    BackendId backend = 0;
    size_t offset = 0;
  };
  Status Plan(const Graph& graph);
  bool SameShapeAsPlanned(const Graph& graph) const;

  std::vector<Backend*> backends_;
  Placement placement_;
  std::vector<std::unique_ptr<BackendBuffer>> arenas_;  // per backend
  std::vector<size_t> arena_needed_;
  // Plan for the current graph.
  std::vector<Slot> home_;                    // per value: producer's backend
  std::vector<std::vector<int64_t>> copy_at_; // per value, per backend: offset of its copy (-1 none)
  std::vector<TensorView> bound_;             // per value, re-pointed per node
  std::vector<uint8_t> staging_;
  std::vector<uint8_t> copied_;               // per (value, backend): copy made in this run
  std::vector<ValueDesc> planned_values_;     // the graph shape the plan above is for
  size_t planned_nodes_ = 0;
  size_t last_copy_count_ = 0;
};

}  // namespace petrel
