// Regex pre-tokenization: a PCRE2 wrapper (UTF + Unicode properties), llama.cpp's "split by each
// regex in turn" rule, Hugging Face's Split behaviours, and the table of per-model regexes chosen
// by GGUF `tokenizer.ggml.pre`.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

struct pcre2_real_code_8;

namespace petrel::tok {

struct Span {
  size_t begin;
  size_t end;
  bool matched;
};

class Regex {
 public:
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits `text` (valid UTF-8) into consecutive spans: every match and every gap between
  // matches, in order. Empty matches only mark a split point.
  std::vector<Span> Split(std::string_view text) const;
  // Replaces every match with `replacement` (taken literally).
  std::string ReplaceAll(std::string_view text, std::string_view replacement) const;

 private:
  explicit Regex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

// llama.cpp's unicode_regex_split: each regex splits every current piece into its matches and
// the gaps between them; the result is the list of non-empty pieces.
std::vector<std::string_view> SplitByRegexes(std::string_view text,
                                             const std::vector<std::unique_ptr<Regex>>& regexes);

// Hugging Face `SplitDelimiterBehavior`.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
// Applies `behavior` to spans covering a piece; returns the non-empty sub-pieces as offsets.
std::vector<std::pair<size_t, size_t>> ApplySplitBehavior(const std::vector<Span>& spans,
                                                          SplitBehavior behavior, bool invert);

struct PreTokenizerPreset {
  bool known;                         // false: unknown name, the GPT-2 regex is used
  bool ignore_merges;                 // a word that is a whole token skips merging
  bool add_bos;                       // llama.cpp's default for this pre-tokenizer
  std::vector<const char*> patterns;  // applied in order
};
// The regexes llama.cpp uses for `tokenizer.ggml.pre` = `name`.
PreTokenizerPreset FindPreTokenizerPreset(std::string_view name);

// The GPT-2 / ByteLevel regex.
extern const char* const kGpt2Pattern;

}  // namespace petrel::tok
