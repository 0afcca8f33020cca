// `petrel info`: what a model file holds and the memory it needs.
#include <cstdio>
#include <optional>
#include <string>

#include "core/model/loader.h"
#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "core/tokenizer/tokenizer.h"
#include "cpu/kernels.h"  // SimdTargetName
#include "tools/common.h"

namespace petrel::tools {
namespace {

std::string Bytes(double bytes) {
  char buffer[32];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  std::snprintf(buffer, sizeof(buffer), "%.2f %s", bytes, units[unit]);
  return buffer;
}

}  // namespace

Runner AddInfoCommand(CLI::App& app) {
  struct Args {
    std::string model;
    size_t context = 0;  // 0: the model's, at most 4096 (as run)
    std::string kv_type = "f16";
    std::string device = "cpu";
    int64_t gpu_layers = -1;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "describe a model and the memory it needs");
  cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
  cmd->add_option("-c,--ctx-size", args->context,
                  "context length for the KV cache estimate (default: the model's, at most 4096)")
      ->check(IntRange(1, kMaxContext));
  cmd->add_option("--cache-type", args->kv_type, "KV cache type for the estimate (default f16)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  cmd->add_option("--device", args->device, "show the placement on this backend")
      ->check(KnownDevice());
  CLI::Option* gpu_layers =
      cmd->add_option("--gpu-layers,--n-gpu-layers", args->gpu_layers,
                      "blocks to place on --device (default: all; more than the model has: all); "
                      "without --device: a warning, and ignored")
          ->check(IntRange(0, kMaxGpuLayers));
  return [args, gpu_layers]() -> int {
    if (gpu_layers->count() > 0 && args->device == "cpu") {
      Warn("--gpu-layers %lld has no effect without --device (everything runs on the cpu)",
           (long long)args->gpu_layers);
    }
    // The option's check admits only these names.
    const DType kv_type = args->kv_type == "f32"   ? DType::kF32
                          : args->kv_type == "f16" ? DType::kF16
                                                   : DType::kQ8_0;
    auto loaded = LoadModel(args->model);
    if (!loaded.ok()) return Fail(loaded.status());
    const LoadedModel& model = **loaded;
    const ModelConfig& c = model.config;
    const size_t context =
        args->context ? args->context
                      : size_t(std::min<int64_t>(c.max_context > 0 ? c.max_context : 4096, 4096));
    // K and V rows of kv_dim elements per layer and token; a block type stores whole blocks
    // per head (as the engine's cache does), so a head that holds none has no estimate.
    const std::optional<uint64_t> head_bytes = RowBytes(kv_type, uint64_t(c.head_dim));
    if (!head_bytes) {
      return Fail(Error(
          "--cache-type %s needs heads of whole %u-element blocks; this model's heads have %lld",
          args->kv_type.c_str(), Traits(kv_type).block_elems, (long long)c.head_dim));
    }
    if (args->context > 0 && c.max_context > 0 && int64_t(args->context) > c.max_context) {
      Warn("-c %zu is above the %lld tokens the model was trained on; expect worse output past them",
           args->context, (long long)c.max_context);
    }
    const double row_bytes = double(*head_bytes) * double(c.n_kv_heads);
    const double kv_bytes = 2.0 * double(c.n_layers) * double(context) * row_bytes;
    std::printf("source           %s (%s)\n", model.source.c_str(), model.format.c_str());
    std::printf("%s", c.Summary().c_str());
    if (model.tokenizer) std::printf("tokenizer        %zu tokens\n", model.tokenizer->n_vocab());
    std::printf("tensors          %zu used, %s\n", model.n_tensors,
                Bytes(double(model.weight_bytes)).c_str());
    for (const auto& [type, bytes] : model.bytes_by_type) {
      const std::optional<DType> dtype = DTypeFromName(type);
      std::printf("  %-14s %-12s mat_mul: %s\n", type.c_str(), Bytes(double(bytes)).c_str(),
                  dtype ? cpu::MatMulPathName(*dtype).c_str() : "unsupported");
    }
    std::printf(
        "memory           weights %s (mapped from the file), KV cache for %zu tokens (%s) %s\n",
        Bytes(double(model.weight_bytes)).c_str(), context, args->kv_type.c_str(),
        Bytes(kv_bytes).c_str());
    std::printf(
        "matmul path      Highway kernels (batch-invariant), SIMD target %s; no BLAS (no\n"
        "                 faster than the f32 tiles here, see docs/PERFORMANCE.md)\n",
        cpu::SimdTargetName().c_str());
    std::string backends;
    for (const std::string& name : AvailableBackends()) backends += (backends.empty() ? "" : ", ") + name;
    std::printf("backends         %s\n", backends.c_str());
    if (args->device != "cpu") {
      // The placement the engine would make, with the layers the device cannot run kept on
      // the CPU and why.
      EngineOptions options;
      options.device = args->device;
      options.device_layers = args->gpu_layers < 0 ? SIZE_MAX / 2 : size_t(args->gpu_layers);
      options.context = 16;
      options.load_tokenizer = false;
      auto engine = Engine::Load(args->model, options);
      if (!engine.ok()) return Fail(engine.status());
      std::printf("placement        %s\n", (*engine)->PlacementString().c_str());
    }
    return 0;
  };
}

}  // namespace petrel::tools
