// The speculative decoding flags shared by `run`, `chat` and `bench`: a draft model or n-gram
// prompt lookup, the draft length's range, and where the draft model runs.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/generation/sampling/sampler.h"
#include "core/generation/speculative.h"
#include "core/runtime/engine.h"
#include "tools/common.h"

namespace petrel::tools {

struct DraftOptions {
  std::string draft_path;   // --draft
  size_t lookup_ngram = 0;  // --lookup-ngram; 0: off
  size_t draft_max = 8;
  size_t draft_min = 0;
  float draft_min_p = 0.0f;
  size_t draft_threads = 0;  // 0: as -t
  std::string draft_device = "cpu";
  std::string draft_gpu_layers = "all";
  std::vector<CLI::Option*> flags;  // every flag but --draft and --lookup-ngram

  void AddTo(CLI::App& app);
  bool enabled() const { return !draft_path.empty() || lookup_ngram > 0; }
  // The checks across flags: a draft length flag without --draft or --lookup-ngram is an
  // error, as is a minimum above the maximum.
  Status Check() const;
  // The speculator for a run against `target` (null when neither --draft nor --lookup-ngram
  // was given): the draft model is loaded with `model`'s options but its own threads and
  // placement, the context of `target`, and its vocabulary checked against the target's. With
  // `ignore_eos` it never drafts an end-of-generation token.
  Result<std::unique_ptr<Speculator>> MakeSpeculator(const Engine& target,
                                                     const ModelOptions& model,
                                                     const SamplingParams& sampling,
                                                     bool ignore_eos = false) const;
};

// "; draft: 62 of 80 accepted (78 %), 2.9 tokens per pass" for the stats line ("" without
// drafts), and the same as JSON timings fields.
std::string SpeculationSummary(const GenerateResult& result);

}  // namespace petrel::tools
