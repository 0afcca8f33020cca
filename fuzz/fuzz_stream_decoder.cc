// Fuzz target: the streaming detokenizer (StreamDecoder) over real vocabularies, fed token ids
// taken from the input. Checks its promise: the concatenation of every Push() and the final
// Flush() is exactly `Decode(all ids)`, and never splits a UTF-8 sequence. The first byte picks
// the vocabulary and the options; each following pair of bytes is one id, folded into the
// vocabulary or (one option) taken as it is, negative and out of range included, as a C API
// caller could pass it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/model/loader.h"  // LoadTokenizer
#include "core/tokenizer/tokenizer.h"
#include "shared_data.h"

namespace petrel::fuzz {
namespace {

constexpr size_t kMaxIds = 96;  // Push decodes its window: quadratic in the worst case

struct Vocabulary {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
};

// One of each decoder pipeline: SPM from GGUF (byte tokens, word-start markers), a Hugging
// Face BPE tokenizer.json (its decoder chain), byte-level BPE and WordPiece from GGUF.
const std::vector<Vocabulary>& Vocabularies() {
  static const std::vector<Vocabulary>* vocabularies = [] {
    auto* list = new std::vector<Vocabulary>;
    for (const char* path : {"models/story-gguf/story-f32.gguf", "models/synth-arch/qwen3.gguf",
                             "models/synth-arch2/bert.gguf"}) {
      list->push_back({path, Required(LoadTokenizer(SharedPath(path)), path)});
    }
    list->push_back({"models/story", Required(Tokenizer::FromHfFolder(SharedPath("models/story")),
                                              "models/story/tokenizer.json")});
    return list;
  }();
  return *vocabularies;
}

// Whether `text` ends inside a UTF-8 sequence (a lead byte without all its continuations).
bool EndsInsideCharacter(const std::string& text) {
  size_t continuations = 0;
  for (size_t i = text.size(); i > 0 && continuations < 4; --i) {
    const auto byte = uint8_t(text[i - 1]);
    if ((byte & 0xC0) == 0x80) {
      ++continuations;
      continue;
    }
    const size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : 4;
    return byte >= 0x80 && continuations + 1 < length;
  }
  return false;
}

[[noreturn]] void Fail(const char* what, const Vocabulary& vocabulary,
                       const std::vector<int32_t>& ids, const std::string& streamed,
                       const std::string& whole) {
  std::fprintf(stderr, "fuzz_stream_decoder: %s (%s, %zu ids)\n  streamed: %s\n  decoded:  %s\n",
               what, vocabulary.name.c_str(), ids.size(), streamed.c_str(), whole.c_str());
  std::abort();
}

}  // namespace
}  // namespace petrel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  using namespace petrel::fuzz;
  if (size == 0) return 0;
  const auto& vocabularies = Vocabularies();
  const Vocabulary& vocabulary = vocabularies[data[0] % vocabularies.size()];
  const Tokenizer& tokenizer = *vocabulary.tokenizer;
  const bool skip_special = (data[0] >> 2) & 1;
  const bool raw_ids = (data[0] >> 3) & 1;
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size && ids.size() < kMaxIds; i += 2) {
    const uint16_t bits = uint16_t(data[i] | (data[i + 1] << 8));
    ids.push_back(raw_ids ? int32_t(int16_t(bits)) : int32_t(bits % tokenizer.n_vocab()));
  }
  StreamDecoder decoder(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = decoder.Push(id);
    if (EndsInsideCharacter(piece))
      Fail("a piece ends inside a character", vocabulary, ids, streamed + piece, "");
    streamed += piece;
  }
  streamed += decoder.Flush();
  const std::string whole = tokenizer.Decode(ids, skip_special);
  if (streamed != whole)
    Fail("the stream differs from the whole decode", vocabulary, ids, streamed, whole);
  return 0;
}
