// Keeps the text of end-of-generation markers out of streamed output, for models that spell
// them as plain text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace petrel {

class Tokenizer;

// Streams generated text while removing every occurrence of the text of the tokenizer's
// end-of-generation tokens ("</s>", "<|end_story|>", ...): models trained on documents that
// spell those markers as plain text produce them piece by piece before the token itself. Text
// that may be the start of such a marker is held back until it is decided.
class EndTextFilter {
 public:
  // With no tokenizer, or `keep` (--special), text passes unchanged.
  EndTextFilter(const Tokenizer* tokenizer, bool keep);
  // The part of `text` (appended to what is held back) that is now final.
  std::string Push(std::string_view text);
  // Whatever is still held back (a partial marker at the end of the generation).
  std::string Flush();

 private:
  std::vector<std::string> markers_;
  std::string held_;
};

}  // namespace petrel
