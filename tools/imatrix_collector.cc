// ImatrixCollector: naming the nodes' weights and summing their inputs' squares.
#include "tools/imatrix_collector.h"

#include "core/format/gguf.h"

namespace petrel::tools {

ImatrixCollector::ImatrixCollector(const Engine& engine, bool include_output) {
  const ModelWeights& weights = engine.placed_weights();
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& layer = weights.layers[l];
    for (size_t i = 0; i < layer.size(); ++i) {
      if (layer.spec(i).kind != WeightKind::kMatrix || !layer[i].data) continue;
      names_.emplace(&layer[i], GgufWeightName(layer.spec(i), int(l)));
    }
  }
  if (include_output) {
    // A tied head is the embedding table: its statistics go to the tensor the file holds it
    // in, which is what quantize looks up.
    const LoadedModel& model = engine.model();
    const bool own_output =
        !engine.config().tied_embeddings || (model.gguf && model.gguf->FindTensor("output.weight"));
    names_.emplace(&weights.output, own_output ? "output.weight" : "token_embd.weight");
  }
}

void ImatrixCollector::Add(const TensorView* weight, const float* rows, int64_t n_rows,
                           int64_t n_cols) {
  if (!weight) return;
  const auto name = names_.find(weight);
  if (name == names_.end()) return;
  Sums& sums = sums_[name->second];
  sums.sum2.resize(size_t(n_cols), 0.0);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* x = rows + r * n_cols;
    for (int64_t j = 0; j < n_cols; ++j) sums.sum2[size_t(j)] += double(x[j]) * double(x[j]);
  }
  sums.count += double(n_rows);
}

void ImatrixCollector::OnMatMulInput(const Node& node, const float* rows, int64_t n_rows,
                                     int64_t n_cols) {
  // A gated FFN's gate and up projections read the same input: both get its statistics.
  Add(node.weight, rows, n_rows, n_cols);
  if (node.op == OpKind::kGatedFfn) Add(node.weight_up, rows, n_rows, n_cols);
}

Imatrix ImatrixCollector::Result(std::vector<std::string> datasets, uint32_t chunk_count,
                                 uint32_t chunk_size) const {
  Imatrix imatrix;
  imatrix.datasets = std::move(datasets);
  imatrix.chunk_count = chunk_count;
  imatrix.chunk_size = chunk_size;
  for (const auto& [name, sums] : sums_) {
    if (sums.count == 0) continue;
    ImatrixEntry entry;
    entry.n_in = int64_t(sums.sum2.size());
    entry.sum2.assign(sums.sum2.begin(), sums.sum2.end());
    entry.counts = {float(sums.count)};
    imatrix.entries.emplace(name, std::move(entry));
  }
  return imatrix;
}

}  // namespace petrel::tools
