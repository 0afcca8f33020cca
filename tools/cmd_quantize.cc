// `petrel quantize IN OUT TYPE`: re-encode a GGUF model's (or a Hugging Face folder's) weights
// into a block type or a mix, as a GGUF file.
#include <cstdio>
#include <string>

#include <sys/stat.h>

#include "core/convert/quantize_hf.h"
#include "core/convert/quantize_model.h"
#include "tools/common.h"

namespace petrel::tools {

Runner AddQuantizeCommand(CLI::App& app) {
  struct Args {
    std::string input, output, type;
    bool pure = false;
    bool list = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "write a GGUF with weights in another type");
  cmd->add_option("input", args->input, "source GGUF (F32, F16, BF16 or quantized) or Hugging Face folder")->required();
  cmd->add_option("output", args->output, "GGUF file to write")->required();
  cmd->add_option("type", args->type,
                  "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS F16 BF16 F32, "
                  "or a mix: Q3_K_M Q4_K_M Q5_K_M")
      ->required();
  cmd->add_flag("--pure", args->pure,
                "every 2-D weight in TYPE (rows that hold no whole block still fall back)");
  cmd->add_flag("--list", args->list, "print each tensor's new type");
  return [args]() -> int {
    std::optional<QuantMix> mix = ParseQuantMix(args->type);
    if (!mix)
      return Fail(Error("quantize: '%s' is not a type or mix we can write", args->type.c_str()));
    mix->pure = args->pure;
    struct stat info;
    const bool folder = stat(args->input.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
    const Status status = folder ? QuantizeHfFolder(args->input, args->output, *mix, args->list)
                                 : QuantizeGgufModel(args->input, args->output, *mix, args->list);
    if (!status.ok()) return Fail(status);
    std::fprintf(stderr, "wrote %s\n", args->output.c_str());
    return 0;
  };
}

}  // namespace petrel::tools
