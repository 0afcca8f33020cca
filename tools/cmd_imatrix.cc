// `petrel imatrix`: runs a model over a calibration text in windows of -c tokens (as
// llama-imatrix does) and writes, for each weight matrix, the per-column sums of its inputs'
// squares: the importance matrix `petrel quantize --imatrix` weights the rounding error with.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/eval/imatrix_file.h"
#include "core/eval/perplexity.h"
#include "core/format/atomic_file.h"
#include "tools/common.h"
#include "tools/imatrix_collector.h"
#include "tools/perplexity_windows.h"

namespace petrel::tools {
namespace {

constexpr size_t kDefaultChunk = 512;  // llama-imatrix's usual -c

struct ImatrixArgs {
  ModelOptions model;
  std::string text_path;
  std::string output_path = "imatrix.gguf";
  std::string output_format;  // "", "gguf" or "dat"
  size_t max_chunks = 0;      // 0: every chunk of the text
  bool process_output = false;
};

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "chunk 3/8, PPL 31.0059, 2 s left" rewritten in place on a terminal.
void ShowProgress(size_t done, size_t total, double ppl,
                  std::chrono::steady_clock::time_point start) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double left = elapsed / double(done) * double(total - done);
  std::fprintf(stderr, "\r\033[Kimatrix: chunk %zu/%zu, PPL %.4f, %.0f s left", done, total, ppl,
               left);
  std::fflush(stderr);
}

int Run(ImatrixArgs& args) {
  if (args.text_path.empty()) return Fail(Error("imatrix: give the calibration text with -f FILE"));
  if (Status status = args.model.Check(); !status.ok()) return Fail(status);
  ImatrixFormat format =
      EndsWith(args.output_path, ".dat") ? ImatrixFormat::kDat : ImatrixFormat::kGguf;
  if (args.output_format == "gguf") format = ImatrixFormat::kGguf;
  if (args.output_format == "dat") format = ImatrixFormat::kDat;
  if (Status not_input =
          CheckOutputIsNotInput(args.output_path, {args.model.model_path, args.text_path});
      !not_input.ok()) {
    return Fail(not_input);
  }
  const bool window_given = args.model.context_option && args.model.context_option->count() > 0;
  if (!window_given) args.model.context = kDefaultChunk;
  auto text = ReadText(args.text_path);
  if (!text.ok()) return Fail(text.status());

  const size_t n_ctx = args.model.context;
  ModelOptions model = args.model;
  const size_t per_batch = std::max<size_t>(1, model.batch / n_ctx);
  model.batch = std::min(model.batch, per_batch * n_ctx);
  if (model.ubatch > model.batch) model.ubatch = model.batch;
  auto loaded = model.LoadEngine(per_batch);
  if (!loaded.ok()) return Fail(loaded.status());
  Engine& engine = **loaded;
  if (!engine.tokenizer()) return Fail(Error("%s: no tokenizer", model.model_path.c_str()));

  std::vector<int32_t> tokens;
  const int32_t bos = TokenizeText(*engine.tokenizer(), *text, &tokens);
  auto planned = PlanChunks(tokens.size(), n_ctx);
  if (!planned.ok()) return Fail(planned.status());
  ChunkPlan plan = *planned;
  if (args.max_chunks > 0) plan.n_chunks = std::min(plan.n_chunks, args.max_chunks);
  std::vector<std::vector<int32_t>> windows;
  for (size_t w = 0; w < plan.n_chunks; ++w) windows.push_back(ChunkTokens(tokens, plan, w, bos));
  std::fprintf(stderr, "imatrix: %zu chunks of %zu tokens (%zu tokens in the text)\n",
               plan.n_chunks, n_ctx, tokens.size());

  // The perplexity of the second halves comes for free and tells a broken run at a glance.
  ImatrixCollector collector(engine, args.process_output);
  NllStats nll;
  const bool terminal = !args.model.no_progress && ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto on_logits = [&](size_t window, size_t j, std::span<const float> logits) -> Status {
    nll.Add(-LogProbOf(logits, windows[window][j + 1]));
    return Status::Ok();
  };
  auto on_window = [&](size_t window) {
    if (terminal) ShowProgress(window + 1, plan.n_chunks, nll.Perplexity(), start);
  };
  engine.SetMatMulObserver(&collector);
  Status status = EvaluateWindows(engine, plan, windows, model.batch, on_logits, on_window);
  engine.SetMatMulObserver(nullptr);
  if (terminal) std::fputs("\r\033[K", stderr);
  if (!status.ok()) return Fail(status);

  const Imatrix imatrix =
      collector.Result({args.text_path}, uint32_t(plan.n_chunks), uint32_t(n_ctx));
  if (Status written = WriteImatrix(imatrix, args.output_path, format); !written.ok()) {
    return Fail(written);
  }
  std::fprintf(stderr, "imatrix: PPL %.4f over the chunks' second halves\n", nll.Perplexity());
  std::fprintf(stderr, "wrote %s (%zu matrices, %s)\n", args.output_path.c_str(),
               imatrix.entries.size(), format == ImatrixFormat::kDat ? "dat" : "gguf");
  return 0;
}

}  // namespace

Runner AddImatrixCommand(CLI::App& app) {
  auto args = std::make_shared<ImatrixArgs>();
  CLI::App* cmd = app.add_subcommand(
      "imatrix",
      "importance matrix of a model's weights over a calibration text, for quantize --imatrix");
  args->model.AddTo(*cmd);
  args->model.context_option->get_validator("IntRange")->active(false);
  args->model.context_option
      ->description("tokens per chunk, each evaluated from an empty cache (default 512)")
      ->check(IntRange(int64_t(kMinPerplexityContext), kMaxContext));
  cmd->add_option("-f,--file", args->text_path, "the calibration text")->required();
  cmd->add_option("-o,--output", args->output_path,
                  "file to write (default imatrix.gguf; a .dat name selects the legacy layout)");
  cmd->add_option("--output-format", args->output_format,
                  "gguf or dat (default: dat for a .dat name, else gguf)")
      ->check(CLI::IsMember({"gguf", "dat"}));
  cmd->add_option("--chunks", args->max_chunks, "use at most N chunks of the text (default all)")
      ->check(IntRange(1, 1 << 30));
  cmd->add_flag("--process-output", args->process_output,
                "also collect the output head's inputs (llama-imatrix leaves it out by default)");
  return [args]() -> int { return Run(*args); };
}

}  // namespace petrel::tools
