// The pipeline split and each stage's memory (pipeline_plan.h).
#include "core/runtime/pipeline_plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "core/runtime/memory_plan.h"  // PlanDeviceMemory, ArenaBytesPerBackend
#include "core/runtime/placement.h"

namespace petrel {

Result<std::vector<size_t>> ParseLayerCounts(const std::string& text) {
  std::vector<size_t> counts;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || errno != 0) {
      return Error("--mpi-split '%s': '%s' is not a block count", text.c_str(), item.c_str());
    }
    if (value <= 0) {
      return Error("--mpi-split '%s': every rank needs at least one block (got %lld)", text.c_str(),
                   value);
    }
    counts.push_back(size_t(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

Result<std::vector<LayerRange>> SplitLayersByCounts(const std::vector<size_t>& counts,
                                                    size_t n_layers, size_t n_stages) {
  if (counts.size() != n_stages) {
    return Error("--mpi-split has %zu counts for %zu ranks", counts.size(), n_stages);
  }
  size_t sum = 0;
  for (size_t count : counts) {
    if (count == 0) return Error("--mpi-split: every rank needs at least one block");
    sum += count;
  }
  if (sum != n_layers) {
    return Error("--mpi-split counts add up to %zu blocks; the model has %zu", sum, n_layers);
  }
  std::vector<LayerRange> stages;
  int begin = 0;
  for (size_t count : counts) {
    stages.push_back({begin, begin + int(count)});
    begin += int(count);
  }
  return stages;
}

Result<std::vector<LayerRange>> SplitLayersByBytes(const std::vector<size_t>& block_bytes,
                                                   size_t first_extra, size_t last_extra,
                                                   size_t n_stages) {
  const size_t n_layers = block_bytes.size();
  if (n_stages == 0) return Error("a pipeline needs at least one rank");
  if (n_stages > n_layers) {
    return Error("%zu ranks for a model of %zu blocks: each rank needs at least one block",
                 n_stages, n_layers);
  }
  std::vector<size_t> prefix(n_layers + 1, 0);
  for (size_t l = 0; l < n_layers; ++l) prefix[l + 1] = prefix[l] + block_bytes[l];
  // cost(s, a, b): bytes of stage s holding blocks [a, b).
  auto cost = [&](size_t s, size_t a, size_t b) {
    return prefix[b] - prefix[a] + (s == 0 ? first_extra : 0) +
           (s + 1 == n_stages ? last_extra : 0);
  };
  // best[s][b]: the smallest largest-stage bytes of stages 0..s covering blocks [0, b).
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<std::vector<size_t>> best(n_stages, std::vector<size_t>(n_layers + 1, kNone));
  std::vector<std::vector<size_t>> cut(n_stages, std::vector<size_t>(n_layers + 1, 0));
  for (size_t b = 1; b <= n_layers; ++b) best[0][b] = cost(0, 0, b);
  for (size_t s = 1; s < n_stages; ++s) {
    for (size_t b = s + 1; b <= n_layers; ++b) {
      for (size_t a = s; a < b; ++a) {
        if (best[s - 1][a] == kNone) continue;
        const size_t worst = std::max(best[s - 1][a], cost(s, a, b));
        if (worst < best[s][b]) {  // strict: the earliest boundary wins a tie
          best[s][b] = worst;
          cut[s][b] = a;
        }
      }
    }
  }
  std::vector<LayerRange> stages(n_stages);
  size_t end = n_layers;
  for (size_t s = n_stages; s-- > 0;) {
    const size_t begin = s == 0 ? 0 : cut[s][end];
    stages[s] = {int(begin), int(end)};
    end = begin;
  }
  return stages;
}

ModelWeightBytes WeightBytesOf(const LoadedModel& model) {
  auto bytes_of = [](const TensorView& view) { return view.data ? view.desc.bytes() : size_t(0); };
  const ModelWeights& weights = model.weights;
  ModelWeightBytes out;
  for (const LayerWeights& layer : weights.layers) {
    size_t bytes = 0;
    for (size_t i = 0; i < layer.size(); ++i) {
      if (!layer.spec(i).IsFusedPart()) bytes += bytes_of(layer[i]);
    }
    out.blocks.push_back(bytes);
  }
  out.embedding = bytes_of(weights.token_embd);
  for (size_t i = 0; i < weights.input.size(); ++i) out.embedding += bytes_of(weights.input[i]);
  out.head = bytes_of(weights.output) + bytes_of(weights.output_norm);
  return out;
}

Result<std::vector<LayerRange>> PlanStages(const LoadedModel& model, size_t n_stages,
                                           const std::vector<size_t>& counts) {
  const ModelWeightBytes bytes = WeightBytesOf(model);
  if (n_stages > bytes.blocks.size()) {
    return Error("%zu ranks for a model of %zu blocks: each rank needs at least one block",
                 n_stages, bytes.blocks.size());
  }
  if (!counts.empty()) return SplitLayersByCounts(counts, bytes.blocks.size(), n_stages);
  // The embedding lookup reads only the rows of the tokens it meets, so it does not weigh on
  // the first stage; the head is read whole for every pass.
  return SplitLayersByBytes(bytes.blocks, 0, bytes.head, n_stages);
}

Result<std::vector<StageMemory>> PlanStageMemory(const LoadedModel& model,
                                                 const std::vector<LayerRange>& stages,
                                                 const KvCacheOptions& kv, size_t ubatch_tokens) {
  const ModelWeightBytes bytes = WeightBytesOf(model);
  PETREL_ASSIGN_OR_RETURN(const DeviceMemoryPlan plan, PlanDeviceMemory(model, kv, ubatch_tokens));
  // The whole model's arena on one backend bounds each stage's (a stage runs a part of the same
  // graph), plus the hidden rows it receives.
  const Placement cpu = Placement::Offload(bytes.blocks.size(), 0, 0);
  PETREL_ASSIGN_OR_RETURN(const std::vector<size_t> arenas,
                          ArenaBytesPerBackend(model, cpu, 1, ubatch_tokens));
  const size_t rows_bytes = ubatch_tokens * size_t(model.config.dim) * sizeof(float);
  std::vector<StageMemory> out;
  for (size_t s = 0; s < stages.size(); ++s) {
    StageMemory memory;
    memory.layers = stages[s];
    for (int l = stages[s].begin; l < stages[s].end; ++l)
      memory.weight_bytes += bytes.blocks[size_t(l)];
    if (s == 0) memory.weight_bytes += bytes.embedding;
    if (s + 1 == stages.size()) memory.weight_bytes += bytes.head;
    memory.kv_bytes = plan.LayerKvBytes() * size_t(stages[s].size());
    memory.activation_bytes = arenas[0] + (s == 0 ? 0 : rows_bytes);
    out.push_back(memory);
  }
  return out;
}

}  // namespace petrel
