// Options shared by the `petrel` subcommands (model path, threads, placement, KV cache) and the
// mapping from Status to "error: …" + exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/engine.h"
#include "core/base/status.h"
#include "tools/mpi_options.h"

namespace petrel::tools {

// The ranges of the numeric options, in one place so that --help, the checks and the tests agree.
inline constexpr int64_t kMaxThreads = 1 << 20;  // above the CPU count: capped with a warning
inline constexpr int64_t kMaxContext = 1 << 20;
inline constexpr int64_t kMaxBatch = 1 << 16;
inline constexpr int64_t kMaxGpuLayers = 100000;  // above the model's block count: all of them
inline constexpr int64_t kMaxTokens = 1 << 20;    // -n, --min-tokens, bench's -p/-n

// Every numeric option of every subcommand carries one of these checks. CLI11 runs them while
// it parses, before any file is read; the range shows in --help, and a value outside it (or not
// a number, or not finite) is one line naming the flag, the value and the range:
// "error: --temp: -1 is outside the range [0, 100]".
CLI::Validator IntRange(int64_t lo, int64_t hi);
CLI::Validator RealRange(double lo, double hi, bool lo_open = false);  // lo_open: (lo, hi]
CLI::Validator IntChoice(std::vector<int64_t> values);                 // one of `values`
CLI::Validator KnownDevice();  // a backend of this build, with an optional ":N" (--device)
// --gpu-layers: a count in [0, kMaxGpuLayers], or all, half or auto.
CLI::Validator GpuLayers();

// --gpu-layers as EngineOptions take it; `text` passed GpuLayers().
void SetGpuLayers(const std::string& text, EngineOptions* options);

// `--profile`: per-op device time, one line per (backend, op) with calls, total ms and the
// share of the backend's measured time, longest first. "" when no backend measured anything.
std::string FormatProfile(const std::vector<Engine::BackendProfile>& profiles);

// "warning: <message>" on stderr: a flag combination we accept but that does not do what it says.
void Warn(const char* format, ...) __attribute__((format(printf, 1, 2)));

// `requested` threads, capped at the CPUs of this machine (std::thread::hardware_concurrency)
// with one warning naming `flag`: more threads than cores only contend (and can exhaust a
// process limit).
size_t CapThreads(size_t requested, const char* flag);

struct ModelOptions {
  std::string model_path;
  size_t n_threads = 0;  // 0: all cores
  std::string device = "cpu";
  std::string gpu_layers = "all";  // a count, all, half or auto (used when --device is not cpu)
  size_t context = 0;
  std::string kv_type = "f16";
  size_t batch = 512;
  size_t ubatch = 0;  // 0: the engine chooses
  bool pin_threads = false;
  bool touch_kv = false;        // EngineOptions::touch_kv (serve)
  bool load_tokenizer = true;  // false where only token ids are fed (bench): ~4 MB for 32k tokens
  bool no_mmap = false;      // --no-mmap: read the weights into memory
  bool mlock = false;        // --mlock: lock the weights in RAM (a warning when refused)
  bool no_progress = false;  // --no-progress: no load progress line on a terminal
  std::vector<std::string> lora;  // --lora [NAME=]FILE[:SCALE], repeatable
  bool lora_per_sequence = false;  // EngineOptions::lora_per_sequence (serve)
  bool shared_prefix_attention = true;  // EngineOptions::shared_prefix_attention (serve)
  std::string bf16_dot = "auto";        // --bf16-dot auto|on|off: EngineOptions::bf16_dot
  std::vector<std::string> override_tensor;  // --override-tensor PATTERN=DEVICE[,...], repeatable
  bool cpu_moe = false;                      // --cpu-moe: every block's experts on the CPU
  size_t n_cpu_moe = 0;                      // --n-cpu-moe N: the first N blocks' experts
  std::string tensor_split;                  // --tensor-split a,b: shares of the devices
  MpiOptions mpi;  // added by the subcommands that take --mpi (mpi.AddTo)
  // Set by AddTo, to tell a value given from a default.
  CLI::Option* gpu_layers_option = nullptr;
  CLI::Option* context_option = nullptr;

  void AddTo(CLI::App& app, bool threads_option = true);
  // The checks across flags, before anything is loaded: --ubatch-size above -b is an error;
  // --gpu-layers without --device and -t above the CPU count are warnings (the count is capped).
  Status Check();
  Result<EngineOptions> ToEngineOptions() const;
  // Also warns when -c asks for more than the model was trained on.
  // `kv_blocks`: the KV cache's blocks (0: `max_sequences` full contexts).
  Result<std::unique_ptr<Engine>> LoadEngine(size_t max_sequences = 1, size_t kv_blocks = 0) const;
};

// Prints "error: <message>" on stderr and returns 1.
int Fail(const Status& status);

// Registration of each subcommand: adds it to `app`, returns the function to run after parsing.
using Runner = std::function<int()>;
Runner AddRunCommand(CLI::App& app);
Runner AddChatCommand(CLI::App& app);
Runner AddLogitsCommand(CLI::App& app);
Runner AddEmbedCommand(CLI::App& app);
Runner AddTokenizeCommand(CLI::App& app);
Runner AddDetokenizeCommand(CLI::App& app);
Runner AddInfoCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddSynthCommand(CLI::App& app);
Runner AddQuantizeCommand(CLI::App& app);
Runner AddTemplateCommand(CLI::App& app);
Runner AddPerplexityCommand(CLI::App& app);
Runner AddImatrixCommand(CLI::App& app);
Runner AddServeCommand(CLI::App& app);
Runner AddBenchServeCommand(CLI::App& app);

// Peak resident set size of this process in bytes (VmHWM).
size_t PeakRssBytes();

}  // namespace petrel::tools
