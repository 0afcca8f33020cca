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
// `weights`: the views the graph's nodes point into, which tell the nodes that run apart from
// their layer (Placement::NodeBackend); null places every node with its layer.
Result<ArenaLayout> LayOutArenas(const Graph& graph, const Placement& placement, size_t n_backends,
                                 const ModelWeights* weights = nullptr);

// Sees the input rows of every matrix product as the executor runs them (`petrel imatrix`
// collects per-column activation statistics with it). Only while one is set does the executor do
// anything more per node: with none, a null check.
class MatMulObserver {
 public:
  virtual ~MatMulObserver() = default;
  // `node` is a kMatMul or kGatedFfn node about to run; `rows` holds its input, n_rows × n_cols
  // floats copied to host memory, valid during the call.
  virtual void OnMatMulInput(const Node& node, const float* rows, int64_t n_rows,
                             int64_t n_cols) = 0;
};

class Executor {
 public:
  // `weights` (borrowed, may be null): as for LayOutArenas.
  Executor(std::vector<Backend*> backends, Placement placement,
           const ModelWeights* weights = nullptr);
  ~Executor();

  // Runs `graph` and copies the logits value to `host_logits` (rows x n_vocab floats). Returns
  // once every backend has finished. `input`, when not kNoValue, is a value no node produces (a
  // pipeline stage's incoming hidden rows): it is filled from `host_input` first.
  Status Run(const Graph& graph, const BatchContext& batch, const KvCache& kv, float* host_logits,
             const float* host_input = nullptr, ValueId input = kNoValue);

  // Number of cross-backend copies the last Run made (tests check that only boundaries copy).
  size_t last_copy_count() const { return last_copy_count_; }
  void SetMatMulObserver(MatMulObserver* observer) { observer_ = observer; }
  size_t arena_bytes() const;

 private:
  Status Plan(const Graph& graph);
  // Hands the input of matrix-product `node` (on backend `b`) to observer_, once it is computed.
  Status Observe(const Node& node, const Graph& graph, Backend& backend);
  bool SameShapeAsPlanned(const Graph& graph) const;

  std::vector<Backend*> backends_;
  Placement placement_;
  const ModelWeights* weights_;  // what the nodes' weight pointers point into
  std::vector<std::unique_ptr<BackendBuffer>> arenas_;  // per backend
  ArenaLayout layout_;                        // for the current graph
  std::vector<ValueView> bound_;              // per value, re-pointed per node
  std::vector<uint8_t> copied_;               // per (value, backend): copy made in this run
  std::vector<uint8_t> unsubmitted_;          // per backend: has nodes recorded since Submit
  std::vector<uint8_t> in_batch_;             // per backend: BeginBatch called in this run
  std::vector<ValueDesc> planned_values_;     // the graph shape the plan above is for
  size_t planned_nodes_ = 0;
  MatMulObserver* observer_ = nullptr;
  std::vector<float> observed_;               // the observed input, on the host
  size_t last_copy_count_ = 0;
};

}  // namespace petrel
