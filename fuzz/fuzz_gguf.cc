// Fuzz target: a GGUF file, through everything that reads one at load time: the reader (header,
// metadata, tensor directory), every typed getter on every key, the architecture's config from
// its `<arch>.*` keys and its checks, and the tokenizer from the `tokenizer.ggml.*` keys.
#include <cstddef>
#include <cstdint>

#include "core/format/gguf.h"
#include "core/model/architecture.h"
#include "core/tokenizer/tokenizer.h"
#include "exercise_tokenizer.h"
#include "input_file.h"

namespace petrel::fuzz {
namespace {

void ReadEveryKey(const GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    (void)file.GetUint(key);
    (void)file.GetInt(key);
    (void)file.GetFloat(key);
    (void)file.GetBool(key);
    (void)file.GetString(key);
    if (value.type == GgufType::kArray) {
      (void)file.GetArray(key, value.elem_type);
      // The numeric accessors, on arrays of numbers only (their callers check the type).
      const bool numeric =
          value.elem_type != GgufType::kString && value.elem_type != GgufType::kArray;
      for (uint64_t i = 0; numeric && i < value.count && i < 64; ++i) (void)value.FloatAt(i);
    }
  }
  for (const GgufTensorInfo& tensor : file.tensors()) (void)file.FindTensor(tensor.name);
}

void ReadModelConfig(const GgufFile& file) {
  auto arch_name = file.GetString("general.architecture");
  if (!arch_name.ok()) return;
  const Architecture* arch = FindArchitectureByGguf(*arch_name);
  if (!arch) return;
  auto config = arch->config_from_gguf(file, *arch);
  if (config.ok()) (void)config->Validate();
}

}  // namespace
}  // namespace petrel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  fuzz::InputFile input(data, size);
  if (!input.ok()) return 0;
  auto file = GgufFile::Open(input.path());
  if (!file.ok()) return 0;
  fuzz::ReadEveryKey(**file);
  fuzz::ReadModelConfig(**file);
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (tokenizer.ok()) fuzz::ExerciseTokenizer(**tokenizer);
  return 0;
}
