// DraftOptions: the flags, their checks, and building the speculator (loading the draft model).
#include "tools/draft_options.h"

#include <algorithm>
#include <cstdio>

#include "core/generation/draft_model.h"
#include "core/generation/ngram_lookup.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel::tools {

void DraftOptions::AddTo(CLI::App& app) {
  CLI::Option* draft = app.add_option("--draft,--model-draft", draft_path,
                                      "speculative decoding with this draft model (GGUF file or "
                                      "Hugging Face folder; same vocabulary as -m)");
  app.add_option("--lookup-ngram", lookup_ngram,
                 "speculative decoding by prompt lookup: draft what followed the last N tokens "
                 "(then shorter n-grams) earlier in the text; no draft model")
      ->check(IntRange(1, 64))
      ->excludes(draft);
  flags.push_back(app.add_option("--draft-max", draft_max,
                                 "longest draft per pass (default 8); each pass drafts the length "
                                 "that gives the most tokens/s by the pass times and acceptance "
                                 "measured so far, none when drafting does not pay")
                      ->check(IntRange(1, 256)));
  flags.push_back(app.add_option("--draft-min", draft_min,
                                 "shortest draft per pass (default 0: the length may be 0, with "
                                 "occasional one-token probes); N > 0 drafts at least N tokens "
                                 "every pass, paying or not")
                      ->check(IntRange(0, 256)));
  flags.push_back(app.add_option("--draft-min-p", draft_min_p,
                                 "stop drafting when the draft model's most likely token is less "
                                 "likely than P (default 0: off)")
                      ->check(RealRange(0, 1)));
  flags.push_back(app.add_option("--draft-threads", draft_threads,
                                 "CPU threads of the draft model (default: as -t)")
                      ->check(IntRange(1, kMaxThreads)));
  flags.push_back(app.add_option("--draft-device", draft_device,
                                 "backend for the draft model's offloaded layers (default cpu)")
                      ->check(KnownDevice()));
  flags.push_back(app.add_option("--draft-gpu-layers", draft_gpu_layers,
                                 "draft model blocks on --draft-device, as --gpu-layers (default "
                                 "all)")
                      ->check(GpuLayers()));
}

Status DraftOptions::Check() const {
  if (!enabled()) {
    for (const CLI::Option* flag : flags) {
      if (flag->count() > 0) {
        return Error("%s needs --draft or --lookup-ngram", flag->get_name().c_str());
      }
    }
  }
  if (draft_min > draft_max) {
    return Error("--draft-min %zu is above --draft-max %zu", draft_min, draft_max);
  }
  if (lookup_ngram > 0) {
    for (const CLI::Option* flag : flags) {
      const std::string name = flag->get_name();
      if (flag->count() > 0 && name != "--draft-max" && name != "--draft-min") {
        return Error("%s needs --draft (it sets the draft model)", name.c_str());
      }
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<Speculator>> DraftOptions::MakeSpeculator(const Engine& target,
                                                                 const ModelOptions& model,
                                                                 const SamplingParams& sampling,
                                                                 bool ignore_eos) const {
  if (!enabled()) return std::unique_ptr<Speculator>();
  SpeculationOptions options;
  options.draft_min = draft_min;
  options.draft_max = draft_max;
  std::unique_ptr<DraftSource> source;
  if (lookup_ngram > 0) {
    source = std::make_unique<NgramLookup>(lookup_ngram);
  } else {
    ModelOptions draft_model = model;
    draft_model.model_path = draft_path;
    if (draft_threads > 0) draft_model.n_threads = CapThreads(draft_threads, "--draft-threads");
    draft_model.device = draft_device;
    draft_model.gpu_layers = draft_gpu_layers;
    draft_model.context = target.context();
    draft_model.context_option = nullptr;  // the target's context, whatever the draft's training
    draft_model.load_tokenizer = true;     // its vocabulary is compared
    // Requests' own adapters reach the target only; the draft proposes under the loaded ones,
    // which the target's verification makes exact whatever the request chose.
    draft_model.lora_per_sequence = false;
    auto engine = draft_model.LoadEngine();
    if (!engine.ok())
      return Error("--draft %s: %s", draft_path.c_str(), engine.status().message().c_str());
    DraftModelOptions draft;
    draft.min_p = draft_min_p;
    // Greedy and mirostat chains accept only their own choice: a greedy draft suits both.
    draft.temperature = sampling.mirostat == 0 ? std::max(0.0f, sampling.temperature) : 0.0f;
    draft.seed = sampling.seed ^ 0x9e3779b97f4a7c15ull;  // a stream apart from the sampler's
    if (ignore_eos && target.tokenizer()) {
      const Tokenizer& tokenizer = *target.tokenizer();
      for (size_t id = 0; id < tokenizer.n_vocab(); ++id) {
        if (tokenizer.IsEndOfGeneration(int32_t(id))) draft.banned.push_back(int32_t(id));
      }
    }
    auto created = DraftModel::Create(target, std::move(engine).value(), draft);
    if (!created.ok()) {
      return Error("--draft %s: %s", draft_path.c_str(), created.status().message().c_str());
    }
    source = std::move(created).value();
  }
  return Speculator::Create(std::move(source), options);
}

std::string SpeculationSummary(const GenerateResult& result) {
  if (result.draft_tokens == 0) return "";
  char line[160];
  std::snprintf(line, sizeof(line), "; draft: %zu of %zu accepted (%.0f %%), %.2f tokens per pass",
                result.draft_accepted, result.draft_tokens,
                100.0 * double(result.draft_accepted) / double(result.draft_tokens),
                double(result.new_ids.size()) / double(std::max<size_t>(result.target_passes, 1)));
  return line;
}

}  // namespace petrel::tools
