// `petrel info`: what a model file holds and the memory it needs.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "core/model/loader.h"
#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "core/runtime/memory_plan.h"
#include "core/runtime/pipeline_plan.h"
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

// `petrel info --devices`: every backend of the build and the devices it can use; a backend
// whose driver or loader is missing says why on its own line, and the command still succeeds.
int ListDevices() {
  for (const std::string& name : AvailableBackends()) {
    const BackendFactory* factory = FindBackend(name);
    if (!factory || !factory->list_devices) {
      std::printf("%-8s host (runs on the CPU of this machine)\n", name.c_str());
      continue;
    }
    auto devices = factory->list_devices();
    if (!devices.ok()) {
      std::printf("%-8s unavailable: %s\n", name.c_str(), devices.status().message().c_str());
      continue;
    }
    if (devices->empty()) {
      std::printf("%-8s unavailable: no %s device\n", name.c_str(), DeviceKindName(name).c_str());
      continue;
    }
    for (size_t i = 0; i < devices->size(); ++i) {
      const DeviceDescription& device = (*devices)[i];
      std::printf("%-8s %s:%zu %s (%s, %s)%s%s\n", i == 0 ? name.c_str() : "", name.c_str(), i,
                  device.name.c_str(), device.type.c_str(),
                  Bytes(double(device.memory_bytes)).c_str(), device.features.empty() ? "" : ": ",
                  device.features.c_str());
    }
  }
  return 0;
}

// The device memory plan of `--gpu-layers` on `device`, from the file's tensor sizes: printed
// before anything is uploaded, so that it shows even when the load would not fit.
Status PrintDevicePlan(const LoadedModel& model, const std::string& device, DType kv_type,
                       size_t context) {
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(device, 1, BackendOptions{}));
  KvCacheOptions kv;
  kv.dtype = kv_type;
  kv.context = context;
  kv.n_blocks = (context + kv.block_tokens - 1) / kv.block_tokens;
  const size_t n_layers = size_t(model.config.n_layers);
  EngineOptions defaults;
  PETREL_ASSIGN_OR_RETURN(
      const size_t ubatch,
      DefaultMicroBatch(model, Placement::Offload(n_layers, 1, n_layers + 1), 2,
                        defaults.max_batch_tokens));
  PETREL_ASSIGN_OR_RETURN(const DeviceMemoryPlan plan, PlanDeviceMemory(model, kv, ubatch));
  size_t largest = 0;
  for (size_t bytes : plan.layer_weight_bytes) largest = std::max(largest, bytes);
  std::printf("device memory    %s plan, per block: weights %s (largest), KV cache %s per token "
              "(%s for %zu tokens)\n",
              device.c_str(), Bytes(double(largest)).c_str(),
              Bytes(double(plan.kv_bytes_per_token)).c_str(),
              Bytes(double(plan.LayerKvBytes())).c_str(), plan.kv_tokens);
  std::printf("                 output head %s, activations %s (passes of %zu tokens)\n",
              Bytes(double(plan.output_weight_bytes)).c_str(),
              Bytes(double(plan.activation_bytes)).c_str(), plan.ubatch_tokens);
  std::printf("                 all blocks and the head: %s\n",
              Bytes(double(plan.OffloadBytes(n_layers + 1))).c_str());
  const size_t free = backend->FreeMemory();
  if (free == 0) {
    std::printf("                 %s shares host memory: auto places every block\n",
                backend->Name());
    return Status::Ok();
  }
  const size_t fit = plan.FitLayers(free);
  std::printf("                 free %s (margin %s): --gpu-layers auto places %s\n",
              Bytes(double(free)).c_str(), Bytes(double(DeviceMemoryPlan::Margin(free))).c_str(),
              fit > n_layers ? "every block and the output head"
                             : (std::to_string(fit) + " of " + std::to_string(n_layers) + " blocks").c_str());
  return Status::Ok();
}

// `petrel info --mpi-ranks N`: each rank's blocks and what they cost in memory, as `mpirun -np N
// petrel ... --mpi` would split them (by weight bytes, or `split`).
Status PrintPipelinePlan(const LoadedModel& model, size_t n_ranks, const std::string& split,
                         DType kv_type, size_t context) {
  std::vector<size_t> counts;
  if (!split.empty()) {
    PETREL_ASSIGN_OR_RETURN(counts, ParseLayerCounts(split));
  }
  PETREL_ASSIGN_OR_RETURN(const std::vector<LayerRange> stages, PlanStages(model, n_ranks, counts));
  KvCacheOptions kv;
  kv.dtype = kv_type;
  kv.context = context;
  kv.n_blocks = (context + kv.block_tokens - 1) / kv.block_tokens;
  const size_t n_layers = size_t(model.config.n_layers);
  EngineOptions defaults;
  PETREL_ASSIGN_OR_RETURN(const size_t ubatch,
                          DefaultMicroBatch(model, Placement::Offload(n_layers, 0, 0), 1,
                                            defaults.max_batch_tokens));
  PETREL_ASSIGN_OR_RETURN(const std::vector<StageMemory> memory,
                          PlanStageMemory(model, stages, kv, ubatch));
  std::printf("pipeline         %zu ranks (%s), KV cache for %zu tokens, passes of %zu tokens\n",
              n_ranks, split.empty() ? "split by weight bytes" : "--mpi-split", context, ubatch);
  for (size_t r = 0; r < memory.size(); ++r) {
    const StageMemory& m = memory[r];
    std::string extra = r == 0 ? " + embedding" : "";
    if (r + 1 == memory.size()) extra += " + output head";
    std::printf("  rank %-9zu blocks %d-%d%s: weights %s, KV cache %s, activations %s; total %s\n",
                r, m.layers.begin, m.layers.end - 1, extra.c_str(),
                Bytes(double(m.weight_bytes)).c_str(), Bytes(double(m.kv_bytes)).c_str(),
                Bytes(double(m.activation_bytes)).c_str(), Bytes(double(m.total())).c_str());
  }
  return Status::Ok();
}

}  // namespace

Runner AddInfoCommand(CLI::App& app) {
  struct Args {
    std::string model;
    size_t context = 0;  // 0: the model's, at most 4096 (as run)
    std::string kv_type = "f16";
    std::string device = "cpu";
    std::string gpu_layers = "all";
    std::vector<std::string> override_tensor;
    bool cpu_moe = false;
    size_t n_cpu_moe = 0;
    std::string tensor_split;
    bool devices = false;
    size_t mpi_ranks = 0;
    std::string mpi_split;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "describe a model and the memory it needs");
  cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder (needed unless --devices)");
  cmd->add_flag("--devices", args->devices,
                "list the devices of every backend of this build (name, type, memory, features)");
  cmd->add_option("-c,--ctx-size", args->context,
                  "context length for the KV cache estimate (default: the model's, at most 4096)")
      ->check(IntRange(1, kMaxContext));
  cmd->add_option("--cache-type", args->kv_type, "KV cache type for the estimate (default f16)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  cmd->add_option("--device", args->device, "show the placement on this backend")
      ->check(KnownDevice());
  CLI::Option* gpu_layers =
      cmd->add_option("--gpu-layers,--n-gpu-layers", args->gpu_layers,
                      "blocks to place on --device: a count (more than the model has: all), "
                      "all (the default), half or auto; without --device: a warning, and ignored")
          ->check(GpuLayers());
  cmd->add_option("--override-tensor", args->override_tensor,
                  "PATTERN=DEVICE[,...]: tensors by GGUF name on a device, as run takes it")
      ->take_all()
      ->allow_extra_args(false);
  cmd->add_flag("--cpu-moe", args->cpu_moe, "every block's expert tensors on the CPU, as run");
  cmd->add_option("--n-cpu-moe", args->n_cpu_moe, "the first N blocks' experts on the CPU, as run")
      ->check(IntRange(0, kMaxGpuLayers));
  cmd->add_option("--tensor-split", args->tensor_split,
                  "shares of a --device list, as run takes it");
  cmd->add_option("--mpi-ranks", args->mpi_ranks,
                  "print the pipeline plan of `mpirun -np N petrel ... --mpi`: each rank's "
                  "blocks, weights, KV cache and activations")
      ->check(IntRange(1, kMaxGpuLayers));
  cmd->add_option("--mpi-split", args->mpi_split, "blocks per rank for --mpi-ranks, e.g. 3,2,2");
  return [args, gpu_layers]() -> int {
    if (args->devices) return ListDevices();
    if (args->model.empty()) return Fail(Error("--model is required (or --devices)"));
    if (gpu_layers->count() > 0 && args->device == "cpu") {
      Warn("--gpu-layers %s has no effect without --device (everything runs on the cpu)",
           args->gpu_layers.c_str());
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
    // K and V rows of kv_dim elements per layer and token (with latent attention one latent
    // row of kv_lora + rope, no V); a block type stores whole blocks per head (as the engine's
    // cache does), so a head that holds none has no estimate.
    const int64_t kv_head = c.mla() ? c.kv_row_elems() : c.head_dim;
    const std::optional<uint64_t> head_bytes = RowBytes(kv_type, uint64_t(kv_head));
    if (!head_bytes) {
      return Fail(Error(
          "--cache-type %s needs heads of whole %u-element blocks; this model's heads have %lld",
          args->kv_type.c_str(), Traits(kv_type).block_elems, (long long)kv_head));
    }
    if (args->context > 0 && c.max_context > 0 && int64_t(args->context) > c.max_context) {
      Warn("-c %zu is above the %lld tokens the model was trained on; expect worse output past them",
           args->context, (long long)c.max_context);
    }
    const double row_bytes = double(*head_bytes) * double(c.n_kv_heads);
    const double kv_token_bytes = (c.kv_has_values() ? 2.0 : 1.0) * double(c.n_layers) * row_bytes;
    const double kv_bytes = kv_token_bytes * double(context);
    std::printf("source           %s (%s)\n", model.source.c_str(), model.format.c_str());
    std::printf("%s", c.Summary().c_str());
    if (model.tokenizer) std::printf("tokenizer        %zu tokens\n", model.tokenizer->n_vocab());
    std::printf("tensors          %zu used, %s\n", model.n_tensors,
                Bytes(double(model.weight_bytes)).c_str());
    {
      // Parameters: every weight once (the tied output is the embedding); active: what one
      // token's step multiplies by, i.e. the routed share of each experts tensor and no
      // embedding table (a step gathers one row of it).
      const ModelWeights& w = model.weights;
      double total = 0, active = 0;
      auto add = [&](const TensorView& view, bool in_step, bool experts = false) {
        if (!view.data) return;
        const double n = double(view.desc.n_elems());
        total += n;
        if (!in_step) return;
        active += experts ? n * double(c.n_experts_used) / double(view.desc.ne[2]) : n;
      };
      add(w.token_embd, false);
      if (w.output.data != w.token_embd.data) add(w.output, true);
      else active += double(w.output.desc.n_elems());
      add(w.output_norm, true);
      for (const LayerWeights& layer : w.layers) {
        for (size_t i = 0; i < layer.size(); ++i) {
          if (!layer.spec(i).IsFusedPart()) {
            add(layer[i], true, layer.spec(i).kind == WeightKind::kExperts);
          }
        }
      }
      std::printf("parameters       %.4g M total, %.4g M active per token (no embedding)\n",
                  total / 1e6, active / 1e6);
    }
    for (const auto& [type, bytes] : model.bytes_by_type) {
      const std::optional<DType> dtype = DTypeFromName(type);
      std::printf("  %-14s %-12s mat_mul: %s\n", type.c_str(), Bytes(double(bytes)).c_str(),
                  dtype ? cpu::MatMulPathName(*dtype).c_str() : "unsupported");
    }
    if (!model.prequantized.empty()) {
      std::printf("pre-quantized    %s\n", model.prequantized.c_str());
    }
    std::printf(
        "memory           weights %s (%s), KV cache for %zu tokens (%s) %s\n",
        Bytes(double(model.weight_bytes)).c_str(),
        model.prequantized_bytes > 0
            ? (Bytes(double(model.prequantized_bytes)) + " of them unpacked at load").c_str()
            : "mapped from the file",
        context, args->kv_type.c_str(), Bytes(kv_bytes).c_str());
    std::printf("KV bytes/token   %.0f (%s rows of %lld elements x %lld layers)\n", kv_token_bytes,
                c.kv_has_values() ? "K and V" : "latent", (long long)c.kv_row_elems(),
                (long long)c.n_layers);
    std::printf(
        "matmul path      Highway kernels (batch-invariant), SIMD target %s; no BLAS (no\n"
        "                 faster than the f32 tiles here, see docs/PERFORMANCE.md)\n",
        cpu::SimdTargetName().c_str());
    std::string backends;
    for (const std::string& name : AvailableBackends()) backends += (backends.empty() ? "" : ", ") + name;
    std::printf("backends         %s\n", backends.c_str());
    if (args->mpi_ranks > 0 || !args->mpi_split.empty()) {
      if (args->mpi_ranks == 0) return Fail(Error("--mpi-split needs --mpi-ranks"));
      Status planned =
          PrintPipelinePlan(model, args->mpi_ranks, args->mpi_split, kv_type, context);
      if (!planned.ok()) return Fail(planned);
    }
    if (args->device != "cpu") {
      // The plan is per device; a --device list shows the first one's.
      Status planned =
          PrintDevicePlan(model, SplitDeviceList(args->device).front(), kv_type, context);
      if (!planned.ok()) return Fail(planned);
      std::fflush(stdout);
      // The placement the engine would make, with the layers the device cannot run kept on
      // the CPU and why.
      EngineOptions options;
      options.device = args->device;
      SetGpuLayers(args->gpu_layers, &options);
      options.context = args->gpu_layers == "auto" ? context : 16;
      options.kv_type = kv_type;
      options.load_tokenizer = false;
      for (const std::string& text : args->override_tensor) {
        auto rules = ParseTensorRules(text);
        if (!rules.ok()) return Fail(rules.status());
        for (TensorRule& rule : *rules) options.tensor_rules.push_back(std::move(rule));
      }
      options.cpu_moe_layers = args->cpu_moe ? SIZE_MAX : args->n_cpu_moe;
      if (!args->tensor_split.empty()) {
        auto shares = ParseTensorSplit(args->tensor_split);
        if (!shares.ok()) return Fail(shares.status());
        options.tensor_split = *shares;
      }
      auto engine = Engine::Load(args->model, options);
      if (!engine.ok()) return Fail(engine.status());
      std::printf("placement        %s\n", (*engine)->PlacementString().c_str());
      if (const DeviceMemoryPlan* plan = (*engine)->device_plan()) {
        for (size_t b = 1; b < (*engine)->n_backends(); ++b) {
          std::printf(
              "device weights   backend %zu (%s): %s planned, %s allocated\n", b,
              (*engine)->backend(BackendId(b)).Name(),
              Bytes(double(plan->DeviceWeightBytes((*engine)->placement(), BackendId(b)))).c_str(),
              Bytes(double((*engine)->backend(BackendId(b)).WeightBytes())).c_str());
        }
      }
    }
    return 0;
  };
}

}  // namespace petrel::tools
