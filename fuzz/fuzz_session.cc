// Fuzz target: a session file (`/save`, petrel_context_save), read by SessionReader as
// LoadSession reads it into an engine: against the story model's fingerprint and a KV cache of
// its shape (f16 rows, a context of 256), checking the header, the model path, the metadata,
// the tokens and every K/V layer.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/base/tensor.h"  // DType
#include "core/generation/session_format.h"
#include "core/model/loader.h"
#include "input_file.h"
#include "shared_data.h"

namespace petrel::fuzz {
namespace {

constexpr uint64_t kContext = 256;  // the seeds were saved with `-c 256`

const SessionTarget& StoryTarget() {
  static const SessionTarget* target = [] {
    constexpr const char* kPath = "models/story-gguf/story-f32.gguf";
    LoadOptions options;
    options.load_tokenizer = false;
    std::unique_ptr<LoadedModel> model = Required(LoadModel(SharedPath(kPath), options), kPath);
    const ModelConfig& config = model->config;
    auto* story = new SessionTarget;
    story->fingerprint = FingerprintModel(*model);
    story->model_path = SessionModelPath(*model);
    story->kv_type = uint32_t(DType::kF16);  // the default --cache-type
    story->n_layers = uint32_t(config.n_layers);
    story->row_bytes = uint32_t(config.kv_row_elems() * sizeof(uint16_t));
    story->context = kContext;
    story->n_vocab = config.n_vocab;
    return story;
  }();
  return *target;
}

}  // namespace
}  // namespace petrel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  using namespace petrel::fuzz;
  const SessionTarget& target = StoryTarget();
  InputFile input(data, size);
  if (!input.ok()) return 0;
  auto reader = SessionReader::Open(input.path(), target);
  if (!reader.ok()) return Refused(reader.status());
  std::vector<uint8_t> k(reader->tokens().size() * target.row_bytes), v(k.size());
  for (uint32_t layer = 0; layer < target.n_layers; ++layer) {
    if (!reader->ReadLayer(layer, k.data(), v.data()).ok()) break;
  }
  return 0;
}
