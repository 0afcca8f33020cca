// Executor: liveness-based activation planning per backend, node dispatch, boundary copies.
#include "core/runtime/executor.h"

#include <algorithm>
#include <map>

namespace petrel {
namespace {

// Values start at multiples of 256 bytes: the largest storage-buffer offset alignment Vulkan
// allows a device to require, so a device backend binds any value at its own offset. (64 would
// do for host vector loads.)
constexpr size_t kAlign = 256;
size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// One allocation request: `bytes` on a backend, live over nodes [start, end].
struct Interval {
  ValueId value;
  BackendId backend;
  size_t bytes;
  size_t start, end;
};

}  // namespace

Executor::Executor(std::vector<Backend*> backends, Placement placement, const ModelWeights* weights)
    : backends_(std::move(backends)),
      placement_(std::move(placement)),
      weights_(weights),
      arenas_(backends_.size()) {}

Executor::~Executor() = default;

size_t Executor::arena_bytes() const {
  size_t total = 0;
  for (const auto& arena : arenas_) total += arena ? arena->bytes() : 0;
  return total;
}

bool Executor::SameShapeAsPlanned(const Graph& graph) const {
  if (graph.values.size() != planned_values_.size() || graph.nodes.size() != planned_nodes_) return false;
  for (size_t v = 0; v < graph.values.size(); ++v) {
    if (graph.values[v].rows != planned_values_[v].rows || graph.values[v].cols != planned_values_[v].cols) {
      return false;
    }
  }
  return true;
}

namespace {
BackendId NodeBackend(const Node& node, const Placement& placement, const ModelWeights* weights) {
  return weights ? placement.NodeBackend(node, *weights) : placement.Of(node.layer);
}
}  // namespace

Result<ArenaLayout> LayOutArenas(const Graph& graph, const Placement& placement, size_t n_backends,
                                 const ModelWeights* weights) {
  ArenaLayout layout;
  const size_t n_values = graph.values.size();
  const size_t never = graph.nodes.size();  // the logits live to the end
  layout.home.assign(n_values, ValueSlot{});
  layout.copy_at.assign(n_values, std::vector<int64_t>(n_backends, -1));
  layout.bytes.assign(n_backends, 0);
  std::vector<size_t> def(n_values, 0);
  std::vector<uint8_t> produced(n_values, 0);
  std::vector<std::vector<size_t>> first_use(n_values, std::vector<size_t>(n_backends, SIZE_MAX));
  std::vector<std::vector<size_t>> last_use(n_values, std::vector<size_t>(n_backends, 0));
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    const BackendId b = NodeBackend(node, placement, weights);
    if (size_t(b) >= n_backends) return Error("node %zu: backend %d is not loaded", i, b);
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      // A value no node produces (a stage's incoming rows) lives where it is first read.
      if (!produced[size_t(v)] && first_use[size_t(v)][size_t(b)] == SIZE_MAX) {
        bool read_before = false;
        for (size_t other = 0; other < n_backends; ++other) read_before |= first_use[size_t(v)][other] != SIZE_MAX;
        if (!read_before) layout.home[size_t(v)].backend = b;
      }
      first_use[size_t(v)][size_t(b)] = std::min(first_use[size_t(v)][size_t(b)], i);
      last_use[size_t(v)][size_t(b)] = i;
    }
    if (node.output != kNoValue) {
      layout.home[size_t(node.output)].backend = b;
      def[size_t(node.output)] = i;
      produced[size_t(node.output)] = 1;
    }
  }
  std::vector<Interval> intervals;
  for (size_t v = 0; v < n_values; ++v) {
    const BackendId home = layout.home[v].backend;
    const size_t bytes = AlignUp(graph.values[v].bytes());
    size_t end = std::max(def[v], last_use[v][size_t(home)]);
    // The home copy is read again where another backend first needs the value (its copy is
    // made there): it must live until then, even when its own backend is done with it.
    for (size_t b = 0; b < n_backends; ++b) {
      if (BackendId(b) != home && first_use[v][b] != SIZE_MAX) end = std::max(end, first_use[v][b]);
    }
    if (ValueId(v) == graph.logits) end = never;
    intervals.push_back({ValueId(v), home, bytes, def[v], end});
    for (size_t b = 0; b < n_backends; ++b) {
      if (BackendId(b) == home || first_use[v][b] == SIZE_MAX) continue;
      intervals.push_back({ValueId(v), BackendId(b), bytes, first_use[v][b], last_use[v][b]});
    }
  }
  std::stable_sort(intervals.begin(), intervals.end(),
                   [](const Interval& a, const Interval& b) { return a.start < b.start; });
  // Per backend: best-fit reuse of blocks freed by values whose last use has passed.
  std::vector<std::multimap<size_t, size_t>> free_blocks(n_backends);  // bytes -> offset
  std::vector<std::vector<std::pair<size_t, std::pair<size_t, size_t>>>> live(n_backends);
  for (const Interval& item : intervals) {
    const size_t b = size_t(item.backend);
    auto& active = live[b];
    for (size_t j = 0; j < active.size();) {
      if (active[j].first < item.start) {  // ended before this value is written
        free_blocks[b].emplace(active[j].second.second, active[j].second.first);
        active[j] = active.back();
        active.pop_back();
      } else {
        ++j;
      }
    }
    size_t offset;
    auto fit = free_blocks[b].lower_bound(item.bytes);
    size_t block_bytes = item.bytes;
    if (fit != free_blocks[b].end()) {
      offset = fit->second;
      block_bytes = fit->first;
      free_blocks[b].erase(fit);
    } else {
      offset = layout.bytes[b];
      layout.bytes[b] += item.bytes;
    }
    active.push_back({item.end, {offset, block_bytes}});
    if (item.backend == layout.home[size_t(item.value)].backend) {
      layout.home[size_t(item.value)].offset = offset;
    } else {
      layout.copy_at[size_t(item.value)][b] = int64_t(offset);
    }
  }
  return layout;
}

Status Executor::Plan(const Graph& graph) {
  // A graph is a pure function of (model, batch shape), so decode steps of one shape reuse the
  // plan and allocate nothing.
  if (SameShapeAsPlanned(graph)) return Status::Ok();
  planned_values_.clear();
  planned_nodes_ = 0;
  const size_t n_values = graph.values.size();
  const size_t n_backends = backends_.size();
  PETREL_ASSIGN_OR_RETURN(layout_, LayOutArenas(graph, placement_, n_backends, weights_));
  for (size_t b = 0; b < n_backends; ++b) {
    const size_t needed = layout_.bytes[b];
    if (needed == 0) continue;
    if (!arenas_[b] || arenas_[b]->bytes() < needed) {
      arenas_[b].reset();
      PETREL_ASSIGN_OR_RETURN(arenas_[b], backends_[b]->Allocate(needed));
    }
  }
  copied_.assign(n_values * n_backends, 0);
  planned_values_ = graph.values;
  planned_nodes_ = graph.nodes.size();
  return Status::Ok();
}

Status Executor::Observe(const Node& node, const Graph& graph, Backend& backend) {
  const ValueId input = node.inputs[0];
  const ValueDesc& desc = graph.values[size_t(input)];
  observed_.resize(size_t(desc.rows * desc.cols));
  const ValueView& view = bound_[size_t(input)];
  // The input is complete once the backend has run what was submitted; the copy may be
  // asynchronous too.
  PETREL_RETURN_IF_ERROR(backend.Synchronize());
  PETREL_RETURN_IF_ERROR(
      backend.CopyToHost(*view.buffer, view.offset, observed_.data(), desc.bytes()));
  PETREL_RETURN_IF_ERROR(backend.Synchronize());
  observer_->OnMatMulInput(node, observed_.data(), desc.rows, desc.cols);
  return Status::Ok();
}

Status Executor::Run(const Graph& graph, const BatchContext& batch, const KvCache& kv,
                     float* host_logits, const float* host_input, ValueId input) {
  PETREL_RETURN_IF_ERROR(Plan(graph));
  const size_t n_values = graph.values.size();
  const size_t n_backends = backends_.size();
  bound_.resize(n_values);
  auto view = [&](ValueId v, BackendId b, size_t offset) {
    const ValueDesc& desc = graph.values[size_t(v)];
    return ValueView{arenas_[size_t(b)].get(), offset,
                     TensorDesc::Make(DType::kF32, {desc.cols, desc.rows})};
  };
  std::fill(copied_.begin(), copied_.end(), 0);
  unsubmitted_.assign(n_backends, 0);
  in_batch_.assign(n_backends, 0);
  auto copied = [&](ValueId v, BackendId b) -> uint8_t& { return copied_[size_t(v) * n_backends + size_t(b)]; };
  auto submit = [&](BackendId b) -> Status {
    if (!unsubmitted_[size_t(b)]) return Status::Ok();
    unsubmitted_[size_t(b)] = 0;
    return backends_[size_t(b)]->Submit();
  };
  last_copy_count_ = 0;
  if (input != kNoValue) {
    const ValueSlot& home = layout_.home[size_t(input)];
    PETREL_RETURN_IF_ERROR(backends_[size_t(home.backend)]->CopyFromHost(
        host_input, *arenas_[size_t(home.backend)], home.offset, graph.values[size_t(input)].bytes()));
  }
  for (const Node& node : graph.nodes) {
    const BackendId b = NodeBackend(node, placement_, weights_);
    Backend& backend = *backends_[size_t(b)];
    if (!in_batch_[size_t(b)]) {
      PETREL_RETURN_IF_ERROR(backend.BeginBatch(batch));
      in_batch_[size_t(b)] = 1;
    }
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      const ValueSlot& home = layout_.home[size_t(v)];
      if (home.backend == b) {
        bound_[size_t(v)] = view(v, b, home.offset);
        continue;
      }
      const size_t offset = size_t(layout_.copy_at[size_t(v)][size_t(b)]);
      bound_[size_t(v)] = view(v, b, offset);
      if (!copied(v, b)) {
        // Hidden-state rows cross the boundary: the producer's work first goes to its device.
        PETREL_RETURN_IF_ERROR(submit(home.backend));
        const ValueView src = view(v, home.backend, home.offset);
        PETREL_RETURN_IF_ERROR(backends_[size_t(home.backend)]->CopyToBackend(
            *src.buffer, src.offset, backend, *bound_[size_t(v)].buffer, bound_[size_t(v)].offset,
            graph.values[size_t(v)].bytes()));
        copied(v, b) = 1;
        ++last_copy_count_;
      }
    }
    if (node.output != kNoValue) {
      bound_[size_t(node.output)] = view(node.output, b, layout_.home[size_t(node.output)].offset);
    }
    if (observer_ && (node.op == OpKind::kMatMul || node.op == OpKind::kGatedFfn)) {
      PETREL_RETURN_IF_ERROR(submit(b));
      PETREL_RETURN_IF_ERROR(Observe(node, graph, backend));
    }
    const KvLayerView* layer_kv =
        node.op == OpKind::kAttention || node.op == OpKind::kMlaAttention
            ? &kv.LayerView(size_t(node.layer))
            : nullptr;
    Status status = backend.Run(node, bound_.data(), layer_kv);
    if (!status.ok())
      return status.Wrap(std::string("layer ") + std::to_string(node.layer) + " " +
                         OpName(node.op));
    unsubmitted_[size_t(b)] = 1;
  }
  for (size_t b = 0; b < n_backends; ++b) PETREL_RETURN_IF_ERROR(submit(BackendId(b)));
  const ValueSlot& logits = layout_.home[size_t(graph.logits)];
  Backend& logits_backend = *backends_[size_t(logits.backend)];
  PETREL_RETURN_IF_ERROR(logits_backend.CopyToHost(*arenas_[size_t(logits.backend)], logits.offset,
                                                   host_logits,
                                                   graph.values[size_t(graph.logits)].bytes()));
  // Every backend done: the KV writes of this batch are complete before the next one reads them.
  for (size_t b = 0; b < n_backends; ++b) {
    if (in_batch_[b]) PETREL_RETURN_IF_ERROR(backends_[b]->Synchronize());
  }
  return Status::Ok();
}

}  // namespace petrel
