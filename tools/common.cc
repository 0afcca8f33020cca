// Shared option handling for the subcommands.
#include "tools/common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/base/log.h"
#include "core/runtime/backend_registry.h"
#include "cpu/matmul/bf16_dot.h"  // Bf16DotSupported
#include "tools/cli_ux.h"

namespace petrel::tools {
namespace {

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char buffer[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
}

}  // namespace

CLI::Validator IntRange(int64_t lo, int64_t hi) {
  const std::string range = Format("[%lld, %lld]", (long long)lo, (long long)hi);
  return CLI::Validator(
      [lo, hi, range](std::string& input) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(input.c_str(), &end, 10);
        if (input.empty() || *end != '\0') {
          return "'" + input + "' is not an integer (range " + range + ")";
        }
        if (errno == ERANGE || value < lo || value > hi) {
          return input + " is outside the range " + range;
        }
        return "";
      },
      "in " + range, "IntRange");
}

CLI::Validator RealRange(double lo, double hi, bool lo_open) {
  const std::string range = Format("%c%g, %g]", lo_open ? '(' : '[', lo, hi);
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(input.c_str(), &end);
        if (input.empty() || *end != '\0' || std::isnan(value)) {
          return "'" + input + "' is not a number (range " + range + ")";
        }
        const bool above_lo = lo_open ? value > lo : value >= lo;
        if (!above_lo || !(value <= hi)) return input + " is outside the range " + range;
        return "";
      },
      "in " + range, "RealRange");
}

CLI::Validator IntChoice(std::vector<int64_t> values) {
  std::string list;
  for (const int64_t value : values) list += (list.empty() ? "" : ", ") + std::to_string(value);
  return CLI::Validator(
      [values, list](std::string& input) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(input.c_str(), &end, 10);
        if (input.empty() || *end != '\0' || errno == ERANGE ||
            std::find(values.begin(), values.end(), int64_t(value)) == values.end()) {
          return input + " is not one of " + list;
        }
        return "";
      },
      "one of " + list, "IntChoice");
}

CLI::Validator KnownDevice() {
  std::string list;
  for (const std::string& name : AvailableBackends()) list += (list.empty() ? "" : ", ") + name;
  return CLI::Validator(
      [list](std::string& input) -> std::string {
        // "vulkan:1" is device 1 of the vulkan backend; whether it exists is checked on use.
        // A comma-separated list names the devices of a --tensor-split.
        for (const std::string& entry : SplitDeviceList(input)) {
          const Result<DeviceSpec> spec = ParseDeviceSpec(entry);
          if (!spec.ok()) {
            return "'" + entry + "' is not a device (one of " + list + ", with an optional :N)";
          }
          bool known = false;
          for (const std::string& name : AvailableBackends())
            known = known || name == spec->backend;
          if (!known) return "unknown device '" + entry + "' (this build has: " + list + ")";
        }
        return "";
      },
      "one of " + list +
          " (optionally :N, the Nth device; a comma-separated list for "
          "--tensor-split)",
      "KnownDevice");
}

CLI::Validator GpuLayers() {
  const std::string range = Format("[0, %lld]", (long long)kMaxGpuLayers);
  return CLI::Validator(
      [range](std::string& input) -> std::string {
        if (input == "all" || input == "half" || input == "auto") return "";
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(input.c_str(), &end, 10);
        if (input.empty() || *end != '\0') {
          return "'" + input + "' is not a count in the range " + range + " or one of all, half, auto";
        }
        if (errno == ERANGE || value < 0 || value > kMaxGpuLayers) {
          return input + " is outside the range " + range;
        }
        return "";
      },
      "in " + range + ", all, half or auto", "GpuLayers");
}

void SetGpuLayers(const std::string& text, EngineOptions* options) {
  options->device_layers = 0;
  if (text == "all") {
    options->device_layer_rule = GpuLayerRule::kAll;
  } else if (text == "half") {
    options->device_layer_rule = GpuLayerRule::kHalf;
  } else if (text == "auto") {
    options->device_layer_rule = GpuLayerRule::kAuto;
  } else {
    options->device_layer_rule = GpuLayerRule::kCount;
    options->device_layers = size_t(std::strtoull(text.c_str(), nullptr, 10));
  }
}

std::string FormatProfile(const std::vector<Engine::BackendProfile>& profiles) {
  std::string out;
  for (const Engine::BackendProfile& profile : profiles) {
    std::vector<OpProfile> ops = profile.ops;
    std::sort(ops.begin(), ops.end(),
              [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
    double total = 0.0;
    for (const OpProfile& op : ops) total += op.seconds;
    out += Format("profile %s: %-16s %8s %12s %7s\n", profile.backend.c_str(), "op", "calls",
                  "total ms", "share");
    for (const OpProfile& op : ops) {
      out += Format("profile %s: %-16s %8zu %12.3f %6.1f%%\n", profile.backend.c_str(),
                    OpName(op.op), op.calls, op.seconds * 1e3,
                    total > 0.0 ? 100.0 * op.seconds / total : 0.0);
    }
    out += Format("profile %s: %-16s %8s %12.3f %6.1f%%\n", profile.backend.c_str(), "total", "",
                  total * 1e3, total > 0.0 ? 100.0 : 0.0);
  }
  return out;
}

void Warn(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::fputs("warning: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
}

size_t CapThreads(size_t requested, const char* flag) {
  const size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  if (requested <= cpus) return requested;
  Warn("%s %zu is more than the %zu CPUs of this machine; using %zu", flag, requested, cpus, cpus);
  return cpus;
}

void ModelOptions::AddTo(CLI::App& app, bool threads_option) {
  app.add_option("-m,--model", model_path, "GGUF file or Hugging Face folder")->required();
  if (threads_option) {
    app.add_option("-t,--threads", n_threads,
                   "CPU threads (default: all cores; more than the CPUs: capped, with a warning)")
        ->check(IntRange(1, kMaxThreads));
  }
  app.add_option("--device", device, "backend for offloaded layers (default cpu)")
      ->check(KnownDevice());
  gpu_layers_option =
      app.add_option("--gpu-layers,--n-gpu-layers", gpu_layers,
                     "blocks to place on --device: a count (more than the model has: all), all "
                     "(every block and the output head, the default), half, or auto (as many as "
                     "the device's free memory holds); without --device: a warning, and ignored")
          ->check(GpuLayers());
  context_option = app.add_option("-c,--ctx-size", context,
                                  "context length per sequence (default: the model's, at most "
                                  "4096; above the model's: a warning)")
                       ->check(IntRange(1, kMaxContext));
  app.add_option("--cache-type", kv_type, "KV cache type (default f16)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  app.add_option("-b,--batch-size", batch,
                 "maximum tokens per batch; longer prompts are split (default 512)")
      ->check(IntRange(1, kMaxBatch));
  app.add_option("--ubatch-size", ubatch,
                 "tokens per forward pass within a batch, at most -b (default: chosen from the "
                 "model size)")
      ->check(IntRange(1, kMaxBatch));
  app.add_flag("--cpu-affinity", pin_threads, "pin worker threads to cores");
  app.add_flag("--no-mmap", no_mmap,
               "read the weights into memory instead of mapping the file (for filesystems where "
               "mapping is slow or unsupported)");
  app.add_flag("--mlock", mlock,
               "keep the weights locked in RAM; when the lock limit (ulimit -l) refuses, a "
               "warning and the weights stay pageable");
  app.add_flag("--no-progress", no_progress,
               "no progress line while weights over 100 MiB are read in (shown only when stderr "
               "is a terminal, with --no-mmap or --mlock)");
  app.add_option("--override-tensor", override_tensor,
                 "place the tensors whose GGUF name matches PATTERN (a regular expression) on "
                 "DEVICE (cpu, or a --device entry; llama.cpp's CPU, Vulkan0 too): "
                 "PATTERN=DEVICE[,PATTERN=DEVICE...], repeatable, the first match wins "
                 "(docs/OFFLOAD.md)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_flag("--cpu-moe", cpu_moe,
               "keep every block's expert tensors (ffn_*_exps) on the CPU; the rest of each "
               "block goes where --gpu-layers puts it");
  app.add_option("--n-cpu-moe", n_cpu_moe,
                 "keep the expert tensors of the first N blocks on the CPU")
      ->check(IntRange(0, kMaxGpuLayers));
  app.add_option("--tensor-split", tensor_split,
                 "with a --device list (vulkan:0,vulkan:1), share the offloaded blocks among the "
                 "devices in these proportions, e.g. 3,1 (default: equal)");
  app.add_option("--bf16-dot", bf16_dot,
                 "auto (the default): BF16 weights multiplied with AVX512-BF16 (vdpbf16ps) on "
                 "activations rounded to bfloat16, as BF16 models run elsewhere, F16 weights "
                 "widened to f32; on: F16 weights too, rounded to bfloat16 (faster prompts, "
                 "slightly different logits); off: both widened to f32. Where the CPU lacks "
                 "AVX512-BF16, all three are off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--lora", lora,
                 "LoRA adapter applied at run time, [NAME=]FILE[:SCALE] (default scale 1): a GGUF "
                 "adapter or a PEFT folder (adapter_config.json + adapter_model.safetensors); "
                 "repeatable; NAME (default: the file's stem) is how serve requests pick it")
      ->take_all()
      ->allow_extra_args(false);
}

Status ModelOptions::Check() {
  if (ubatch > batch) {
    return Error("--ubatch-size %zu is larger than -b/--batch-size %zu", ubatch, batch);
  }
  if (gpu_layers_option && gpu_layers_option->count() > 0 &&
      (device == "cpu" || device.rfind("cpu:", 0) == 0)) {
    Warn("--gpu-layers %s has no effect without --device (everything runs on the cpu)",
         gpu_layers.c_str());
  }
  if ((cpu_moe || n_cpu_moe > 0) && (device == "cpu" || device.rfind("cpu:", 0) == 0)) {
    Warn("--cpu-moe/--n-cpu-moe have no effect without --device (everything runs on the cpu)");
  }
  if (n_threads > 0) n_threads = CapThreads(n_threads, "-t");
  if (bf16_dot == "on" && !cpu::Bf16DotSupported()) {
    Warn("--bf16-dot on: this CPU (or PETREL_CPU_TARGET) has no AVX512-BF16; F16 and BF16 "
         "weights take the f32 path");
  }
  return Status::Ok();
}

Result<EngineOptions> ModelOptions::ToEngineOptions() const {
  EngineOptions options;
  options.n_threads = n_threads;
  options.pin_threads = pin_threads;
  options.shared_prefix_attention = shared_prefix_attention;
  options.bf16_dot = bf16_dot == "on"    ? Bf16Dot::kAll
                     : bf16_dot == "off" ? Bf16Dot::kOff
                                         : Bf16Dot::kBf16Weights;
  options.device = device;
  if (device != "cpu") SetGpuLayers(gpu_layers, &options);
  options.context = context;
  options.max_batch_tokens = batch;
  options.ubatch_tokens = ubatch;
  options.map.read_into_memory = no_mmap;
  options.map.lock = mlock;
  for (const std::string& text : override_tensor) {
    PETREL_ASSIGN_OR_RETURN(std::vector<TensorRule> rules, ParseTensorRules(text));
    for (TensorRule& rule : rules) options.tensor_rules.push_back(std::move(rule));
  }
  options.cpu_moe_layers = cpu_moe ? SIZE_MAX : n_cpu_moe;
  if (!tensor_split.empty()) {
    PETREL_ASSIGN_OR_RETURN(options.tensor_split, ParseTensorSplit(tensor_split));
  }
  for (const std::string& text : lora) {
    PETREL_ASSIGN_OR_RETURN(LoraFile file, ParseLoraArgument(text));
    // Requests pick adapters by name, so a server's names must differ.
    for (const LoraFile& other : options.lora) {
      if (lora_per_sequence && other.name == file.name) {
        return Error("--lora %s: the name '%s' is taken by %s (name it: --lora NAME=FILE)",
                     text.c_str(), file.name.c_str(), other.path.c_str());
      }
    }
    options.lora.push_back(std::move(file));
  }
  options.lora_per_sequence = lora_per_sequence;
  PETREL_ASSIGN_OR_RETURN(options.pipeline, mpi.Join());
  if (mpi.first_rank_leads) {
    options.pipeline_calls = EngineOptions::PipelineCalls::kFirstStageLeads;
    options.pipeline_micro_batches = mpi.micro_batches;
  }
  if (!no_progress && ::isatty(STDERR_FILENO)) {
    // One line rewritten in place; ended when the file is done.
    options.map.progress = [](const std::string& path, size_t done, size_t total) {
      const std::string name = path.substr(path.find_last_of('/') + 1);
      std::fprintf(stderr, "\rloading %s: %3d%% (%zu / %zu MiB)", name.c_str(),
                   int(100.0 * double(done) / double(total)), done >> 20, total >> 20);
      if (done == total) std::fputc('\n', stderr);
      std::fflush(stderr);
    };
  }
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

Result<std::unique_ptr<Engine>> ModelOptions::LoadEngine(size_t max_sequences,
                                                         size_t kv_blocks) const {
  PETREL_ASSIGN_OR_RETURN(EngineOptions options, ToEngineOptions());
  options.max_sequences = max_sequences;
  options.kv_blocks = kv_blocks;
  options.load_tokenizer = load_tokenizer;
  options.touch_kv = touch_kv;
  const auto start = std::chrono::steady_clock::now();
  NoteRssBeforeLoad();
  Result<std::unique_ptr<Engine>> loaded = Engine::Load(model_path, options);
  PETREL_RETURN_IF_ERROR(AgreeOnLoad(loaded.status()));
  std::unique_ptr<Engine> engine = std::move(loaded).value();
  NoteLoadedEngine(*engine);
  if (GetLogLevel() <= LogLevel::kInfo) {
    LogLoadDetails(*engine, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const int64_t trained = engine->config().max_context;
  if (context_option && context_option->count() > 0 && trained > 0 && int64_t(context) > trained) {
    Warn("-c %zu is above the %lld tokens the model was trained on; expect worse output past them",
         context, (long long)trained);
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
