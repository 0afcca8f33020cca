// llama.cpp's spellings on petrel's command line. People arrive with llama-cli and llama-server
// habits: multi-letter short flags (-ngl, -fa, -ctk, -np, -dev, -ot ...) that CLI11, whose short
// options are one letter, would otherwise read as a letter plus a value (`-ngl 99` as `-n gl`).
// Before parsing, each known llama.cpp flag is rewritten to petrel's flag with the same meaning,
// or, where petrel has no such feature, dropped (with its value) with one warning line naming
// it; any other multi-letter single-dash word is an error rather than a letter and a value.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace petrel::tools {

// One row of the mapping (README, "Coming from llama.cpp").
struct LlamaFlag {
  const char* names;   // llama.cpp's spellings, comma-separated: "-ngl,--gpu-layers"
  const char* petrel;  // petrel's flag with the same meaning, or nullptr: not a petrel feature
  enum Value { kNone, kRequired, kOptionalSwitch } value;  // what follows it on the line
  const char* note;    // for a flag petrel lacks: why it can be left out (the warning's text)
};

// The whole table, for the README test and `petrel help`.
const std::vector<LlamaFlag>& LlamaFlags();

// Rewrites `args` (argv without the program name) as described above. Warnings go to
// `warnings` (one line each, without the "warning: " prefix); an unknown multi-letter short
// flag is an error naming it.
Result<std::vector<std::string>> TranslateLlamaFlags(const std::vector<std::string>& args,
                                                     std::vector<std::string>* warnings);

}  // namespace petrel::tools
