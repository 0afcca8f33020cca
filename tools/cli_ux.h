// Command-line conveniences shared by the subcommands: C-style escapes in text flags, "did you
// mean" suggestions for unknown arguments, -v load details.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/generation/end_text_filter.h"
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

// EndTextFilter lives in core/generation, where the server shares it.
using petrel::EndTextFilter;

}  // namespace petrel::tools
