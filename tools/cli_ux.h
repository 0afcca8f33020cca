// Command-line conveniences shared by the subcommands: C-style escapes in text flags, "did you
// mean" suggestions for unknown arguments, -v load details, and keeping the text of
// end-of-generation tokens out of the output.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/engine.h"

namespace petrel::tools {

// Replaces \n \r \t \a \b \f \v \0 \\ \" \' \? and \xHH (one or two hex digits) with the
// characters they name, as llama-cli's -e does; any other backslash is kept as written.
std::string ProcessEscapes(std::string_view text);

// Levenshtein distance between two strings (bytes).
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `name` by edit distance, or "" when none is close enough to be a
// plausible typo (distance at most 2, or a third of the longer name) or a longer or shorter
// spelling of it (one a prefix of the other, sharing at least 3 characters).
std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates);

// The one-line message for arguments `app` did not expect (an ExtrasError): names the first
// unknown option or subcommand and the closest valid one, if any.
std::string UnknownArgumentMessage(const CLI::App& app);

// With -v: the model file, format, architecture, tensors, memory, placement, SIMD target and
// micro-batch of a loaded engine, and how long it took to load, as info logs on stderr.
void LogLoadDetails(const Engine& engine, double load_seconds);

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

}  // namespace petrel::tools
