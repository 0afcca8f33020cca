// Options shared by the `petrel` subcommands (model path, threads, placement, KV cache) and the
// mapping from Status to "error: …" + exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/runtime/engine.h"
#include "core/base/status.h"

namespace petrel::tools {

struct ModelOptions {
  std::string model_path;
  size_t n_threads = 0;
  std::string device = "cpu";
  int64_t gpu_layers = -1;  // -1: all when --device is not cpu
  size_t context = 0;
  std::string kv_type = "f16";
  size_t batch = 512;
  size_t ubatch = 0;  // 0: the engine chooses
  bool pin_threads = false;
  bool load_tokenizer = true;  // false where only token ids are fed (bench): ~4 MB for 32k tokens

  void AddTo(CLI::App& app, bool threads_option = true);
  Result<EngineOptions> ToEngineOptions() const;
  Result<std::unique_ptr<Engine>> LoadEngine(size_t max_sequences = 1) const;
};

// Prints "error: <message>" on stderr and returns 1.
int Fail(const Status& status);

// Registration of each subcommand: adds it to `app`, returns the function to run after parsing.
using Runner = std::function<int()>;
Runner AddRunCommand(CLI::App& app);
Runner AddChatCommand(CLI::App& app);
Runner AddLogitsCommand(CLI::App& app);
Runner AddTokenizeCommand(CLI::App& app);
Runner AddDetokenizeCommand(CLI::App& app);
Runner AddInfoCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddSynthCommand(CLI::App& app);
Runner AddQuantizeCommand(CLI::App& app);
Runner AddTemplateCommand(CLI::App& app);

// Peak resident set size of this process in bytes (VmHWM).
size_t PeakRssBytes();

}  // namespace petrel::tools
