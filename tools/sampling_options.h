// The sampling and generation-control flags shared by `run` and `chat` (llama.cpp's names).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/generation/generate.h"
#include "core/base/status.h"

namespace petrel::tools {

struct SamplingOptions {
  GenerateOptions generate;
  int64_t n_predict = 64;  // -1: until end of generation or a full context
  std::vector<std::string> logit_bias;  // "TOKEN+BIAS", "TOKEN-BIAS", "TOKEN-inf"
  std::string samplers;
  std::vector<std::string> dry_sequence_breakers;  // as given (escapes unread); empty: default
  // At most one of these: GBNF text or file, JSON Schema text or file (docs/GRAMMARS.md).
  std::string grammar, grammar_file, json_schema, json_schema_file;
  std::vector<CLI::Option*> flags;  // every flag added by AddTo, to tell which were given

  void AddTo(CLI::App& app);
  // Whether the flag of this name (its first long name, "--seed") was given.
  bool Given(const char* name) const;
  // The checks across flags, before anything is loaded: --min-tokens above -n is an error; a
  // parameter of a stage that is off (--mirostat-lr without --mirostat, --dry-base without
  // --dry-multiplier, ...) is a warning, as llama.cpp accepts it silently.
  Status Check() const;
  // The first flag given among ours that is not in `allowed` (its name, or "" when none).
  std::string GivenExcept(std::initializer_list<const char*> allowed) const;
  // Completes `generate.sampling` from the flags (a schema becomes its grammar, and the
  // grammar is compiled once here so that its errors come before the model loads); errors name
  // the flag. -n -1 becomes SIZE_MAX (the generation then ends at a full context, unless the
  // caller shifts it); without --seed, the seed is drawn at random.
  Result<GenerateOptions> ToGenerateOptions() const;
  // The GBNF text the grammar flags ask for ("" when none); errors name the flag.
  Result<std::string> GrammarText() const;
};

}  // namespace petrel::tools
