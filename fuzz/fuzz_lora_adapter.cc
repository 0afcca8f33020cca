// Fuzz target: a LoRA adapter in llama.cpp's GGUF layout, loaded against a real base model (the
// story model: a llama of two blocks) by LoadLoraAdapters, which checks the architecture, that
// every target is a matrix of the model with matching shapes, the rank and alpha. An adapter
// that loads is then merged into every row of every weight it adapts (ApplyLoraMerges, as
// `petrel quantize --lora` does), which reads each of its A and B values.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/model/architecture.h"  // GgufWeightName
#include "core/model/loader.h"
#include "core/model/lora_adapter.h"
#include "input_file.h"
#include "shared_data.h"

namespace petrel::fuzz {
namespace {

const LoadedModel& BaseModel() {
  static const LoadedModel* model = [] {
    constexpr const char* kPath = "models/story-gguf/story-f32.gguf";
    LoadOptions options;
    options.load_tokenizer = false;
    return Required(LoadModel(SharedPath(kPath), options), kPath).release();
  }();
  return *model;
}

void MergeInto(const LoraSet& lora, const std::string& name, const TensorView& weight) {
  if (weight.data == nullptr || weight.desc.n_dims != 2) return;
  const std::vector<const LoraMerge*> merges = lora.MergesFor(name);
  if (merges.empty()) return;
  std::vector<float> row(size_t(weight.desc.ne[0]));
  for (int64_t r = 0; r < weight.desc.ne[1]; ++r)
    ApplyLoraMerges(merges, r, row.data(), row.size());
}

}  // namespace
}  // namespace petrel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  using namespace petrel::fuzz;
  const LoadedModel& model = BaseModel();
  InputFile input(data, size);
  if (!input.ok()) return 0;
  const LoraFile file{input.path(), 1.0f, "fuzz"};
  auto lora = LoadLoraAdapters(*model.arch, model.config, model.weights, {&file, 1});
  if (!lora.ok()) return Refused(lora.status());
  const Architecture& arch = *model.arch;
  const ModelWeights& weights = model.weights;
  MergeInto(**lora, GgufWeightName(arch.output, -1), weights.output);
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& layer = weights.layers[l];
    for (size_t i = 0; i < layer.size(); ++i) {
      MergeInto(**lora, GgufWeightName(layer.spec(i), int(l)), layer[i]);
    }
  }
  return 0;
}
