// LoraSet's uses of its updates: extra nodes in a graph, placed copies, and merging into rows.
#include <cstdint>

#include "core/model/architecture.h"  // ModelWeights
#include "core/model/lora_adapter.h"

namespace petrel {

namespace {

// Appends the nodes of an adapted matrix product and its updates to `out`:
//   sum = W x (+ bias);  for each update that applies: sum += B (s · A x)
// with the last node's output written to `result`, the value the graph's later nodes read.
// The scale goes on A x, (rows, rank), the narrowest value of the update.
void AddUpdatedMatMul(Node node, const std::vector<LoraDelta>& deltas,
                      std::span<const LoraApplication> adapters, ValueId result, Graph* out) {
  const ValueId x = node.inputs[0];
  const int64_t rows = out->values[size_t(x)].rows;
  const int64_t n_out = out->values[size_t(result)].cols;
  auto applies = [&](const LoraDelta& delta) { return adapters[size_t(delta.adapter)].applies(); };
  size_t last = deltas.size();  // the last update that applies (the caller checked there is one)
  for (size_t k = 0; k < deltas.size(); ++k) {
    if (applies(deltas[k])) last = k;
  }
  PETREL_CHECK(last < deltas.size());
  ValueId sum = out->Add(node, rows, n_out);
  for (size_t k = 0; k <= last; ++k) {
    const LoraDelta& delta = deltas[k];
    if (!applies(delta)) continue;
    const LoraApplication& how = adapters[size_t(delta.adapter)];
    const int64_t rank = delta.a.desc.ne[1];
    Node down{OpKind::kMatMul, node.layer, {x}};
    down.weight = &delta.a;
    ValueId low_rank = out->Add(down, rows, rank);  // (rows, rank)
    if (how.row_scales >= 0) {
      Node scale{OpKind::kScaleRows, node.layer, {low_rank}};
      scale.row_scales = how.row_scales;
      low_rank = out->Add(scale, rows, rank);
    } else if (how.uniform != 1.0f) {
      Node scale{OpKind::kScale, node.layer, {low_rank}};
      scale.scalar = how.uniform;
      low_rank = out->Add(scale, rows, rank);
    }
    Node up{OpKind::kMatMul, node.layer, {low_rank}};
    up.weight = &delta.b;
    const ValueId update = out->Add(up, rows, n_out);
    Node add{OpKind::kAdd, node.layer, {sum, update}};
    if (k < last) {
      sum = out->Add(add, rows, n_out);
    } else {
      add.output = result;
      out->nodes.push_back(add);
    }
  }
}

}  // namespace

std::vector<LoraApplication> LoraSet::DefaultApplications() const {
  std::vector<LoraApplication> applications(default_scales_.size());
  for (size_t k = 0; k < applications.size(); ++k) applications[k].uniform = default_scales_[k];
  return applications;
}

std::vector<LoraApplication> LoraSet::PerRowApplications() const {
  std::vector<LoraApplication> applications(default_scales_.size());
  for (size_t k = 0; k < applications.size(); ++k) applications[k].row_scales = int32_t(k);
  return applications;
}

void LoraSet::AddToGraph(const ModelWeights& weights, const Graph& graph,
                         std::span<const LoraApplication> adapters, Graph* out) const {
  PETREL_CHECK(adapters.size() == default_scales_.size());
  const int n_layers = int(weights.layers.size());
  // The updates of the weight `weight` a node of `layer` reads; nullptr when none. Weights are
  // recognised by where their view lives in `weights`, so a placed copy works as the original.
  auto find = [&](int layer, const TensorView* weight) -> const std::vector<LoraDelta>* {
    if (!weight) return nullptr;
    std::pair<int, size_t> key;
    if (layer == n_layers && weight == &weights.output) {
      key = {n_layers, 0};
    } else if (layer >= 0 && layer < n_layers && weights.layers[size_t(layer)].size() > 0) {
      const std::span<const TensorView> views = weights.layers[size_t(layer)].views();
      const auto address = reinterpret_cast<uintptr_t>(weight);
      const auto first = reinterpret_cast<uintptr_t>(views.data());
      if (address < first || address >= reinterpret_cast<uintptr_t>(views.data() + views.size())) {
        return nullptr;
      }
      key = {layer, size_t(weight - views.data())};
    } else {
      return nullptr;
    }
    const auto found = deltas_.find(key);
    if (found == deltas_.end()) return nullptr;
    // A matrix none of whose adapters applies in this pass keeps its plain node.
    for (const LoraDelta& delta : found->second) {
      if (adapters[size_t(delta.adapter)].applies()) return &found->second;
    }
    return nullptr;
  };

  out->values = graph.values;  // assignments keep the capacity of a reused `out`
  out->nodes.clear();
  out->logits = graph.logits;
  for (const Node& node : graph.nodes) {
    if (node.op == OpKind::kMatMul) {
      if (const auto* deltas = find(node.layer, node.weight)) {
        AddUpdatedMatMul(node, *deltas, adapters, node.output, out);
        continue;
      }
    } else if (node.op == OpKind::kGatedFfn) {
      const auto* gate_deltas = find(node.layer, node.weight);
      const auto* up_deltas = find(node.layer, node.weight_up);
      if (gate_deltas || up_deltas) {
        // The fused gated_ffn has no place for the updates: its two products and silu_mul.
        const ValueId x = node.inputs[0];
        const int64_t rows = out->values[size_t(x)].rows;
        const int64_t n_ff = out->values[size_t(node.output)].cols;
        ValueId halves[2];
        const TensorView* matrices[2] = {node.weight, node.weight_up};
        const std::vector<LoraDelta>* updates[2] = {gate_deltas, up_deltas};
        for (int h = 0; h < 2; ++h) {
          Node product{OpKind::kMatMul, node.layer, {x}};
          product.weight = matrices[h];
          if (updates[h]) {
            halves[h] = out->AddValue(rows, n_ff);
            AddUpdatedMatMul(product, *updates[h], adapters, halves[h], out);
          } else {
            halves[h] = out->Add(product, rows, n_ff);
          }
        }
        Node act{OpKind::kSiluMul, node.layer, {halves[0], halves[1]}};
        act.output = node.output;
        out->nodes.push_back(act);
        continue;
      }
    }
    out->nodes.push_back(node);
  }
}

Result<std::unique_ptr<LoraSet>> LoraSet::Placed(const PlaceFn& place) const {
  auto placed = std::make_unique<LoraSet>();
  placed->default_scales_ = default_scales_;
  for (const auto& [key, deltas] : deltas_) {
    std::vector<LoraDelta>& copies = placed->deltas_[key];
    for (const LoraDelta& delta : deltas) {
      PETREL_ASSIGN_OR_RETURN(TensorView a, place(key.first, delta.a));
      PETREL_ASSIGN_OR_RETURN(TensorView b, place(key.first, delta.b));
      copies.push_back(LoraDelta{a, b, delta.adapter});
    }
  }
  return placed;
}

std::vector<const LoraMerge*> LoraSet::MergesFor(std::string_view gguf_name) const {
  std::vector<const LoraMerge*> merges;
  for (const LoraMerge& merge : merges_) {
    if (merge.tensor == gguf_name) merges.push_back(&merge);
  }
  return merges;
}

void ApplyLoraMerges(std::span<const LoraMerge* const> merges, int64_t row_index, float* row,
                     size_t n_in) {
  for (const LoraMerge* merge : merges) {
    const TensorView& a = merge->delta.a;  // rank rows of n_in
    const TensorView& b = merge->delta.b;  // n_out rows of rank
    const int64_t rank = b.desc.ne[0];
    const int64_t r = row_index - merge->first_row;
    if (r < 0 || r >= b.desc.ne[1] || size_t(a.desc.ne[0]) != n_in) continue;
    const float* coefficients = b.as<const float>() + r * rank;
    for (int64_t k = 0; k < rank; ++k) {
      const float* a_row = a.as<const float>() + k * int64_t(n_in);
      const float c = merge->scale * coefficients[k];
      for (size_t j = 0; j < n_in; ++j) row[j] += c * a_row[j];
    }
  }
}

}  // namespace petrel
