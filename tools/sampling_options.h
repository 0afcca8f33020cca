// The sampling and generation-control flags shared by `run` and `chat` (llama.cpp's names).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/generation/generate.h"
#include "core/base/status.h"

namespace petrel::tools {

struct SamplingOptions {
  GenerateOptions generate;
  std::vector<std::string> logit_bias;  // "TOKEN+BIAS", "TOKEN-BIAS", "TOKEN-inf"
  std::string samplers;

  void AddTo(CLI::App& app);
  // Completes `generate.sampling` from the flags; errors name the flag.
  Result<GenerateOptions> ToGenerateOptions() const;
};

}  // namespace petrel::tools
