// `petrel synth`: write a random-weight Llama GGUF of a benchmark shape.
#include <cstdio>
#include <string>

#include "core/synth_model.h"
#include "tools/common.h"

namespace petrel::tools {

Runner AddSynthCommand(CLI::App& app) {
  struct Args {
    std::string shape = "small";
    std::string type = "f16";
    std::string vocab;
    std::string output;
    uint64_t seed = 1;
    int64_t n_vocab = 32000;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("synth", "write a random-weight model of a given shape");
  cmd->add_option("--shape", args->shape, "small, tinyllama or DIMxLAYERSxHEADSxKV_HEADSxFFN");
  cmd->add_option("--type", args->type, "weight type: f32, f16, bf16 (default f16)");
  cmd->add_option("--vocab", args->vocab, "GGUF whose tokenizer to copy (default: a byte vocabulary)");
  cmd->add_option("--n-vocab", args->n_vocab, "vocabulary size without --vocab (default 32000)");
  cmd->add_option("--seed", args->seed, "random seed (default 1)");
  cmd->add_option("-o,--output", args->output, "output GGUF file")->required();
  return [args]() -> int {
    auto spec = ParseSynthShape(args->shape);
    if (!spec.ok()) return Fail(spec.status());
    auto type = DTypeFromName(args->type);
    if (!type) return Fail(Error("--type '%s' is not a known type", args->type.c_str()));
    spec->type = *type;
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
