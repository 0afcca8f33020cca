// `petrel synth`: write a random-weight Llama (or DeepSeek2) GGUF of a benchmark shape.
#include <cstdio>
#include <string>

#include "core/convert/synth_model.h"
#include "tools/common.h"

namespace petrel::tools {

Runner AddSynthCommand(CLI::App& app) {
  struct Args {
    std::string shape = "small";
    std::string type = "f16";
    std::string weights = "normal";
    std::string vocab;
    std::string output;
    uint64_t seed = 1;
    int64_t n_vocab = 32000;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("synth", "write a random-weight model of a given shape");
  cmd->add_option("--shape", args->shape,
                  "small, tinyllama, moe (8 experts, top-2, dim 2048), moe-dense (a dense model of "
                  "its total size), moe-tiny, deepseek2-lite (DeepSeek-V2-Lite's widths in 8 "
                  "blocks: latent attention, 64 experts top-6 + 2 shared), deepseek2-tiny or "
                  "DIMxLAYERSxHEADSxKV_HEADSxFFN[xEXPERTSxUSED]");
  cmd->add_option("--type", args->type, "weight type: f32, f16, bf16, a block type (q4_0, q8_0, q4_k, iq4_xs, ...) or a mix (q4_k_m, q5_k_m, q3_k_m); default f16");
  cmd->add_option("--weights", args->weights,
                  "normal (N(0, 1/n_in), the default) or ternary (each row t * s, t in "
                  "{-1, 0, +1}, one f16 scale s per row: F16, TQ1_0 and TQ2_0 hold it exactly)")
      ->check(CLI::IsMember({"normal", "ternary"}));
  CLI::Option* vocab = cmd->add_option("--vocab", args->vocab, "GGUF whose tokenizer to copy (default: a byte vocabulary)");
  CLI::Option* n_vocab =
      cmd->add_option("--n-vocab", args->n_vocab,
                      "vocabulary size of the byte vocabulary (default 32000; not with --vocab)")
          ->check(IntRange(259, 1 << 20));
  n_vocab->excludes(vocab);
  cmd->add_option("--seed", args->seed, "random seed (default 1)")->check(IntRange(0, INT64_MAX));
  cmd->add_option("-o,--output", args->output, "output GGUF file")->required();
  return [args]() -> int {
    auto spec = ParseSynthShape(args->shape);
    if (!spec.ok()) return Fail(spec.status());
    auto type = DTypeFromName(args->type);
    if (type && (*type == DType::kF32 || *type == DType::kF16 || *type == DType::kBF16)) {
      spec->type = *type;
    } else {
      // Block types and mixes: llama-quantize's normal (not --pure) choices, as BASELINES.md.
      spec->quant_mix = ParseQuantMix(args->type);
      if (!spec->quant_mix) {
        return Fail(Error("--type '%s' is not a known type or mix", args->type.c_str()));
      }
    }
    spec->weights = args->weights == "ternary" ? SynthWeights::kTernary : SynthWeights::kNormal;
    spec->vocab_gguf = args->vocab;
    spec->n_vocab = args->n_vocab;
    spec->seed = args->seed;
    Status status = WriteSynthModel(*spec, args->output);
    if (!status.ok()) return Fail(status);
    std::fprintf(stderr, "wrote %s\n", args->output.c_str());
    return 0;
  };
}

}  // namespace petrel::tools
