// Fuzz target: GBNF grammar text, compiled (parse, repetition expansion, undefined-rule and
// left-recursion checks), then matched against text. An input holding a NUL byte is split
// there: the grammar before it, the text to match after it (fed in pieces, as generation
// feeds tokens); otherwise the grammar is matched against a fixed JSON-like text. Before each
// piece, the token mask over a small vocabulary is computed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/grammar/grammar.h"
#include "core/grammar/grammar_matcher.h"
#include "core/grammar/vocab_trie.h"

namespace {

// A small vocabulary of single bytes, common multi-byte pieces and UTF-8, plus an end token,
// for the token mask.
std::shared_ptr<const petrel::VocabTrie> Vocab() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int byte = 0; byte < 256; ++byte) tokens.push_back(std::string(1, char(byte)));
    for (const char* piece : {"{\"", "\":", " \"", "\",", "true", "false", "null", "12", "ab", "é",
                              "東京", "🦀", "\n\n", "  "}) {
      tokens.push_back(piece);
    }
    tokens.push_back("");  // the end token: no bytes
    const int32_t end = int32_t(tokens.size() - 1);
    return std::make_shared<const petrel::VocabTrie>(tokens, std::vector<int32_t>{end});
  }();
  return vocab;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view grammar_text = input;
  std::string_view text = R"({"name": "petrel", "n": [1, -2.5e3, true, null]} abc 123)";
  if (size_t nul = input.find('\0'); nul != std::string_view::npos) {
    grammar_text = input.substr(0, nul);
    text = input.substr(nul + 1);
  }
  GrammarLimits limits;
  limits.max_elements = 200'000;  // each input in milliseconds; the limit itself is what is tested
  limits.max_stacks = 1024;
  auto grammar = CompileGrammar(grammar_text, limits);
  if (!grammar.ok()) return 0;
  auto matcher = GrammarMatcher::Create(*grammar, Vocab());
  if (!matcher.ok()) return 0;
  std::vector<uint8_t> allowed;
  for (size_t at = 0; at < text.size(); at += 3) {
    if (!(*matcher)->ComputeMask(&allowed).ok()) break;
    if (!(*matcher)->AcceptBytes(text.substr(at, 3)).ok()) break;
    (void)(*matcher)->CanEnd();
    (void)(*matcher)->CanContinue();
  }
  return 0;
}
