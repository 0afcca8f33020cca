// Fuzz target: a Hugging Face tokenizer.json (added tokens, normalizers, pre-tokenizers with
// their regexes, BPE / WordPiece / WordLevel models, post-processor, decoders), then encoding
// and decoding a text with the tokenizer it describes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/tokenizer/tokenizer.h"
#include "exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = Tokenizer::FromHfJson(json);
  if (tokenizer.ok()) fuzz::ExerciseTokenizer(**tokenizer);
  return 0;
}
