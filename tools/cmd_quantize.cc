// `petrel quantize IN OUT TYPE`: re-encode a GGUF model's (or a Hugging Face folder's) weights
// into a block type or a mix, as a GGUF file.
#include <cctype>
#include <cstdio>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "core/convert/quantize_hf.h"
#include "core/convert/quantize_model.h"
#include "core/eval/imatrix_file.h"
#include "quant/quantize_weighted.h"  // NeedsImportance
#include "tools/common.h"

namespace petrel::tools {

Runner AddQuantizeCommand(CLI::App& app) {
  struct Args {
    std::string input, output, type, imatrix;
    std::vector<std::string> lora;
    bool pure = false;
    bool list = false;
    bool no_progress = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "write a GGUF with weights in another type");
  cmd->add_option("input", args->input, "source GGUF (F32, F16, BF16 or quantized) or Hugging Face folder")->required();
  cmd->add_option("output", args->output, "GGUF file to write")->required();
  cmd->add_option("type", args->type,
                  "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL F16 BF16 F32, or a "
                  "mix as llama-quantize names them: Q3_K_M Q4_K_M Q5_K_M IQ1_S IQ1_M IQ2_XXS "
                  "IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M IQ4_XS TQ1_0 TQ2_0 MXFP4_MOE "
                  "(IQ1_*, IQ2_* and IQ3_XXS need --imatrix)")
      ->required();
  cmd->add_flag("--pure", args->pure,
                "every 2-D weight in TYPE (rows that hold no whole block still fall back)");
  cmd->add_flag("--list", args->list, "print each tensor's new type");
  cmd->add_option("--imatrix", args->imatrix,
                  "importance matrix (petrel imatrix or llama-imatrix, GGUF or .dat): the "
                  "low-bit types weight their rounding error by each column's importance");
  cmd->add_option("--lora", args->lora,
                  "LoRA adapter merged into the weights, FILE[:SCALE]: a GGUF adapter or a PEFT "
                  "folder; repeatable")
      ->take_all()
      ->allow_extra_args(false);
  cmd->add_flag("--no-progress", args->no_progress,
                "no progress line on stderr (default: shown when stderr is a terminal)");
  return [args]() -> int {
    std::optional<QuantMix> mix = ParseQuantMix(args->type);
    if (!mix)
      return Fail(Error("quantize: '%s' is not a type or mix we can write", args->type.c_str()));
    mix->pure = args->pure;
    // The grids of the lowest-bit types have nothing to choose points by without an importance
    // matrix: refused here in one line (per-tensor cases, such as IQ3_XS's IQ3_XXS layers, are
    // refused by the writer before any output).
    if (args->imatrix.empty() && NeedsImportance(mix->base)) {
      std::string named = args->type;
      for (char& c : named) c = char(std::toupper(static_cast<unsigned char>(c)));
      if (named != DTypeName(mix->base)) named += std::string(" (") + DTypeName(mix->base) + ")";
      return Fail(Error("quantize: %s needs an importance matrix: pass --imatrix FILE (from "
                        "petrel imatrix or llama-imatrix)",
                        named.c_str()));
    }
    struct stat info;
    const bool folder = stat(args->input.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
    std::optional<Imatrix> imatrix;
    if (!args->imatrix.empty()) {
      if (folder) {
        return Fail(Error("quantize: --imatrix needs a GGUF input (convert %s first: its "
                          "weight names are not the importance matrix's)",
                          args->input.c_str()));
      }
      auto read = ReadImatrix(args->imatrix);
      if (!read.ok()) return Fail(read.status());
      imatrix.emplace(std::move(*read));
    }
    std::vector<LoraFile> lora;
    for (const std::string& text : args->lora) {
      auto file = ParseLoraArgument(text);
      if (!file.ok()) return Fail(file.status());
      lora.push_back(std::move(*file));
    }
    if (!lora.empty() && folder) {
      return Fail(
          Error("quantize: --lora needs a GGUF input (convert %s first with petrel "
                "quantize %s OUT F32)",
                args->input.c_str(), args->input.c_str()));
    }
    // One stderr line rewritten in place after each tensor; only for a person watching, so
    // never when stderr goes to a file or a pipe.
    GgufWriter::ProgressFn progress;
    bool line_open = false;
    if (!args->no_progress && isatty(STDERR_FILENO)) {
      progress = [&line_open](size_t done, size_t n_tensors, uint64_t bytes_done,
                              uint64_t bytes_total) {
        const bool gb = bytes_total >= 1000000000ull;
        const double scale = gb ? 1e9 : 1e6;
        std::fprintf(stderr, "\rquantize: %zu/%zu tensors, %.1f/%.1f %s", done, n_tensors,
                     double(bytes_done) / scale, double(bytes_total) / scale, gb ? "GB" : "MB");
        line_open = done < n_tensors;
        if (!line_open) std::fputc('\n', stderr);
        std::fflush(stderr);
      };
    }
    const Status status =
        folder ? QuantizeHfFolder(args->input, args->output, *mix, args->list, progress)
               : QuantizeGgufModel(args->input, args->output, *mix, args->list, progress,
                                   imatrix ? &*imatrix : nullptr, args->imatrix, lora);
    if (line_open) std::fputc('\n', stderr);  // an error ends the progress line first
    if (!status.ok()) return Fail(status);
    std::fprintf(stderr, "wrote %s\n", args->output.c_str());
    return 0;
  };
}

}  // namespace petrel::tools
