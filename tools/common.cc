// Shared option handling for the subcommands.
#include "tools/common.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/base/log.h"
#include "tools/cli_ux.h"

namespace petrel::tools {

void ModelOptions::AddTo(CLI::App& app, bool threads_option) {
  app.add_option("-m,--model", model_path, "GGUF file or Hugging Face folder")->required();
  if (threads_option) app.add_option("-t,--threads", n_threads, "CPU threads (default: all cores)");
  app.add_option("--device", device, "backend for offloaded layers: cpu, ref");
  app.add_option("--gpu-layers,--n-gpu-layers", gpu_layers,
                 "blocks to place on --device (default: all)");
  app.add_option("-c,--ctx-size", context,
                 "context length per sequence (default: model's, <= 4096)");
  app.add_option("--cache-type", kv_type, "KV cache type: f32, f16, q8_0");
  app.add_option("-b,--batch-size", batch, "maximum tokens per batch (longer prompts are split)");
  app.add_option("--ubatch-size", ubatch,
                 "tokens per forward pass within a batch (default: chosen from the model size)");
  app.add_flag("--cpu-affinity", pin_threads, "pin worker threads to cores");
}

Result<EngineOptions> ModelOptions::ToEngineOptions() const {
  EngineOptions options;
  options.n_threads = n_threads;
  options.pin_threads = pin_threads;
  options.device = device;
  options.device_layers = device == "cpu" ? 0 : gpu_layers < 0 ? SIZE_MAX / 2 : size_t(gpu_layers);
  options.context = context;
  options.max_batch_tokens = batch;
  options.ubatch_tokens = ubatch;
  if (kv_type == "f32") {
    options.kv_type = DType::kF32;
  } else if (kv_type == "f16") {
    options.kv_type = DType::kF16;
  } else if (kv_type == "q8_0") {
    options.kv_type = DType::kQ8_0;
  } else {
    return Error("--cache-type '%s' is not supported (use f32, f16 or q8_0)", kv_type.c_str());
  }
  return options;
}

Result<std::unique_ptr<Engine>> ModelOptions::LoadEngine(size_t max_sequences) const {
  PETREL_ASSIGN_OR_RETURN(EngineOptions options, ToEngineOptions());
  options.max_sequences = max_sequences;
  options.load_tokenizer = load_tokenizer;
  const auto start = std::chrono::steady_clock::now();
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Load(model_path, options));
  if (GetLogLevel() <= LogLevel::kInfo) {
    LogLoadDetails(*engine, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return engine;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

size_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return size_t(std::stoull(line.substr(6))) * 1024;
  }
  return 0;
}

}  // namespace petrel::tools
