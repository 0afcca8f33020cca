// `petrel perplexity`: perplexity of a text in llama-perplexity's windows and with its output
// (so figures compare), and KL divergence of a model's distributions against a base model's
// saved with --kl-divergence-base: the figures users pick quantization types with.
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/eval/kld_base_file.h"
#include "core/eval/perplexity.h"
#include "core/format/atomic_file.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"
#include "tools/perplexity_windows.h"

namespace petrel::tools {
namespace {

// llama-perplexity's usual window when -c is not given.
constexpr size_t kDefaultWindow = 512;

struct Args {
  ModelOptions model;
  std::string text_path;
  std::string kld_base_path;
  bool kl_divergence = false;
  bool json = false;
};

// The folder `path` would be written in, for the free-space check.
std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A base file of a long text and a large vocabulary runs to gigabytes: better refused before the
// evaluation than failing at the end of it.
Status CheckFreeSpace(const std::string& path, uint64_t bytes) {
  struct statvfs info;
  if (::statvfs(FolderOf(path).c_str(), &info) != 0) return Status::Ok();  // Create() reports it
  const uint64_t free_bytes = uint64_t(info.f_bavail) * info.f_frsize;
  if (bytes > free_bytes) {
    return Error(
        "%s: needs %.1f MiB (2 bytes per vocabulary entry per scored token), but only "
        "%.1f MiB are free there",
        path.c_str(), double(bytes) / (1 << 20), double(free_bytes) / (1 << 20));
  }
  return Status::Ok();
}

// The vocabulary's identity, for the base file.
uint64_t VocabularyHash(const Engine& engine) {
  const Tokenizer& tokenizer = *engine.tokenizer();
  return HashVocabulary(tokenizer.n_vocab(), [&](int32_t id) { return tokenizer.TokenText(id); });
}

// A base file is compared only with a model of the same vocabulary: its size and token texts.
Status CheckBaseMatchesModel(const KldBaseReader& base, const std::string& base_path,
                             const Engine& engine, uint64_t vocab_hash,
                             const std::string& model_path) {
  const size_t n_vocab = size_t(engine.config().n_vocab);
  if (base.header().n_vocab != n_vocab) {
    return Error("%s holds distributions over %u tokens, but %s has a vocabulary of %zu",
                 base_path.c_str(), base.header().n_vocab, model_path.c_str(), n_vocab);
  }
  if (base.header().vocab_hash != vocab_hash) {
    return Error("%s was written with a different vocabulary than %s's", base_path.c_str(),
                 model_path.c_str());
  }
  return Status::Ok();
}

// With -f, the text must make exactly the windows the base file holds. Compared window by window,
// so that another text is named as such even when it is shorter than one window.
Status CheckTextMatchesBase(const std::vector<int32_t>& text_tokens, int32_t bos,
                            const std::string& text_path, const KldBaseReader& base,
                            const std::string& base_path) {
  const ChunkPlan& plan = base.plan();
  const ChunkPlan text_plan{
      .n_ctx = plan.n_ctx, .n_chunks = text_tokens.size() / plan.n_ctx, .first = plan.first};
  for (size_t w = 0; w < std::min(text_plan.n_chunks, plan.n_chunks); ++w) {
    const std::vector<int32_t> tokens = ChunkTokens(text_tokens, text_plan, w, bos);
    const int32_t* stored = base.tokens().data() + w * plan.n_ctx;
    for (size_t j = 0; j < plan.n_ctx; ++j) {
      if (tokens[j] != stored[j]) {
        return Error(
            "the tokens of %s differ from those %s was written for (window %zu, token %zu)",
            text_path.c_str(), base_path.c_str(), w + 1, j);
      }
    }
  }
  if (text_plan.n_chunks != plan.n_chunks) {
    return Error("%s makes %zu windows of %zu tokens, but %s holds %zu", text_path.c_str(),
                 text_plan.n_chunks, plan.n_ctx, base_path.c_str(), plan.n_chunks);
  }
  return Status::Ok();
}

// "window 3/8, PPL 31.0059, 2 s left" rewritten in place on a terminal.
class Progress {
 public:
  Progress(bool enabled, size_t total) : enabled_(enabled), total_(total) {}
  void Update(size_t done, double ppl) {
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double left = elapsed / double(done) * double(total_ - done);
    std::fprintf(stderr, "\r\033[Kperplexity: window %zu/%zu, PPL %.4f, %.0f s left", done, total_,
                 ppl, left);
    std::fflush(stderr);
  }
  void Clear() {
    if (!enabled_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  size_t total_;
  Clock::time_point start_ = Clock::now();
};

// The running estimates "[1]40.9986,[2]29.9078," as llama-perplexity prints them: streamed as
// each window ends, unless the progress line holds the terminal (then all at once at the end).
class RunningEstimates {
 public:
  RunningEstimates(bool print, bool stream) : print_(print), stream_(stream) {}
  void Add(size_t window, double ppl) {
    values_.push_back(ppl);
    char item[64];
    std::snprintf(item, sizeof(item), "[%zu]%.4lf,", window + 1, ppl);
    text_ += item;
    if (print_ && stream_) {
      std::fputs(item, stdout);
      std::fflush(stdout);
    }
  }
  void Finish() {
    if (!print_) return;
    if (!stream_) std::fputs(text_.c_str(), stdout);
    std::fputc('\n', stdout);
  }
  const std::vector<double>& values() const { return values_; }

 private:
  bool print_;
  bool stream_;
  std::string text_;
  std::vector<double> values_;
};

// The figures of a model compared with a base file, as text after the final estimate.
void PrintComparison(const KldStats& stats) {
  const Estimate delta = stats.DeltaPerplexity();
  const Estimate ratio = stats.MeanLogPerplexityRatio();
  const Estimate kld = stats.MeanKld();
  const Estimate same = stats.SameTopPercent();
  std::printf("PPL(base)                  : %10.6f +/- %.6f\n", stats.base().Perplexity(),
              stats.base().PerplexityUncertainty());
  std::printf("PPL(Q) - PPL(base)         : %10.6f +/- %.6f\n", delta.value, delta.uncertainty);
  std::printf("ln(PPL(Q) / PPL(base))     : %10.6f +/- %.6f\n", ratio.value, ratio.uncertainty);
  std::printf("Mean KLD                   : %10.6f +/- %.6f\n", kld.value, kld.uncertainty);
  std::printf("Maximum KLD                : %10.6f\n", stats.MaxKld());
  std::printf("Same top token             : %10.3f +/- %.3f %%\n", same.value, same.uncertainty);
}

// The same figures as JSON fields.
void AddComparisonJson(const KldStats& stats, nlohmann::ordered_json* out) {
  const Estimate delta = stats.DeltaPerplexity();
  const Estimate ratio = stats.MeanLogPerplexityRatio();
  const Estimate kld = stats.MeanKld();
  const Estimate same = stats.SameTopPercent();
  (*out)["base_ppl"] = stats.base().Perplexity();
  (*out)["base_ppl_uncertainty"] = stats.base().PerplexityUncertainty();
  (*out)["delta_ppl"] = delta.value;
  (*out)["delta_ppl_uncertainty"] = delta.uncertainty;
  (*out)["ln_ppl_ratio"] = ratio.value;
  (*out)["ln_ppl_ratio_uncertainty"] = ratio.uncertainty;
  (*out)["mean_kld"] = kld.value;
  (*out)["mean_kld_uncertainty"] = kld.uncertainty;
  (*out)["max_kld"] = stats.MaxKld();
  (*out)["same_top_percent"] = same.value;
  (*out)["same_top_percent_uncertainty"] = same.uncertainty;
}

int Run(Args& args) {
  if (args.kl_divergence && args.kld_base_path.empty()) {
    return Fail(
        Error("--kl-divergence compares against a base file: give it with "
              "--kl-divergence-base FILE"));
  }
  if (!args.kl_divergence && args.text_path.empty()) {
    return Fail(Error("perplexity: give the text with -f FILE"));
  }
  if (Status status = args.model.Check(); !status.ok()) return Fail(status);
  const bool window_given = args.model.context_option && args.model.context_option->count() > 0;
  std::optional<std::string> text;
  if (!args.text_path.empty()) {
    auto read = ReadText(args.text_path);
    if (!read.ok()) return Fail(read.status());
    text = std::move(*read);
  }
  // The base file: read first when comparing (its window is the one to use); when writing,
  // opened before the model loads so that an unwritable destination fails before the work.
  std::optional<KldBaseReader> base;
  std::optional<AtomicFile> base_out;
  if (args.kl_divergence) {
    auto reader = KldBaseReader::Open(args.kld_base_path);
    if (!reader.ok()) return Fail(reader.status());
    base.emplace(std::move(*reader));
    const size_t base_window = base->header().n_ctx;
    if (base_window > size_t(kMaxContext)) {
      return Fail(Error("%s: corrupt KL-divergence base file (a window of %zu tokens)",
                        args.kld_base_path.c_str(), base_window));
    }
    if (window_given && args.model.context != base_window) {
      return Fail(Error("-c %zu differs from the window of %zu of %s (leave -c out to use it)",
                        args.model.context, base_window, args.kld_base_path.c_str()));
    }
    args.model.context = base_window;
  } else {
    if (!window_given) args.model.context = kDefaultWindow;
    if (!args.kld_base_path.empty()) {
      Status not_input =
          CheckOutputIsNotInput(args.kld_base_path, {args.model.model_path, args.text_path});
      if (!not_input.ok()) return Fail(not_input);
      auto file = AtomicFile::Create(args.kld_base_path);
      if (!file.ok()) return Fail(file.status());
      base_out.emplace(std::move(*file));
    }
  }
  const size_t n_ctx = args.model.context;
  const size_t batch = args.model.batch;

  ModelOptions model = args.model;
  const size_t per_batch = std::max<size_t>(1, batch / n_ctx);
  model.batch = std::min(batch, per_batch * n_ctx);
  if (model.ubatch > model.batch) model.ubatch = model.batch;
  auto loaded = model.LoadEngine(per_batch);
  if (!loaded.ok()) return Fail(loaded.status());
  Engine& engine = **loaded;
  if (!engine.tokenizer()) return Fail(Error("%s: no tokenizer", model.model_path.c_str()));
  const size_t n_vocab = size_t(engine.config().n_vocab);
  const uint64_t vocab_hash = VocabularyHash(engine);

  // The windows' tokens: from the text, or (comparing) from the base file, checked against the
  // text when one is given.
  std::vector<int32_t> text_tokens;
  int32_t bos = -1;
  if (text) bos = TokenizeText(*engine.tokenizer(), *text, &text_tokens);
  ChunkPlan plan;
  std::vector<std::vector<int32_t>> windows;
  if (base) {
    Status matches =
        CheckBaseMatchesModel(*base, args.kld_base_path, engine, vocab_hash, model.model_path);
    if (matches.ok() && text) {
      matches = CheckTextMatchesBase(text_tokens, bos, args.text_path, *base, args.kld_base_path);
    }
    if (!matches.ok()) return Fail(matches);
    plan = base->plan();
    for (size_t w = 0; w < plan.n_chunks; ++w) {
      const auto begin = base->tokens().begin() + ptrdiff_t(w * n_ctx);
      windows.emplace_back(begin, begin + ptrdiff_t(n_ctx));
    }
  } else {
    auto text_plan = PlanChunks(text_tokens.size(), n_ctx);
    if (!text_plan.ok()) return Fail(text_plan.status());
    plan = *text_plan;
    for (size_t w = 0; w < plan.n_chunks; ++w) {
      windows.push_back(ChunkTokens(text_tokens, plan, w, bos));
    }
  }

  std::optional<KldBaseWriter> writer;
  if (base_out) {
    const KldBaseHeader header{.n_vocab = uint32_t(n_vocab),
                               .n_ctx = uint32_t(n_ctx),
                               .n_chunks = uint32_t(plan.n_chunks),
                               .vocab_hash = vocab_hash};
    if (Status status = CheckFreeSpace(args.kld_base_path, BaseFileBytes(header)); !status.ok()) {
      return Fail(status);
    }
    std::vector<int32_t> all;
    for (const auto& window : windows) all.insert(all.end(), window.begin(), window.end());
    auto begun = KldBaseWriter::Begin(std::move(*base_out), header, all);
    base_out.reset();
    if (!begun.ok()) return Fail(begun.status());
    writer.emplace(std::move(*begun));
  }

  const std::string source = base ? "tokens of " + args.kld_base_path
                                  : std::to_string(text_tokens.size()) + " tokens in the text";
  std::fprintf(stderr,
               "perplexity: %zu windows of %zu tokens (%s), %zu scored per window, batch %zu "
               "(%zu window%s per batch)\n",
               plan.n_chunks, n_ctx, source.c_str(), plan.scored_per_chunk(), model.batch,
               per_batch, per_batch == 1 ? "" : "s");
  const bool terminal = !args.model.no_progress && ::isatty(STDERR_FILENO);
  Progress progress(terminal, plan.n_chunks);
  RunningEstimates running(!args.json, !(terminal && ::isatty(STDOUT_FILENO)));
  NllStats nll_stats;
  KldStats kld_stats;
  KldBaseRecord record;
  auto on_logits = [&](size_t window, size_t j, std::span<const float> logits) -> Status {
    const int32_t target = windows[window][j + 1];
    const double nll = -LogProbOf(logits, target);
    nll_stats.Add(nll);
    if (writer) writer->Add(logits, target);
    if (base) {
      PETREL_RETURN_IF_ERROR(base->Next(&record));
      kld_stats.Add(KlDivergence(record.log_probs, logits), Argmax(logits) == record.argmax,
                    -record.target_log_prob, nll);
    }
    return Status::Ok();
  };
  auto on_window = [&](size_t window) {
    running.Add(window, nll_stats.Perplexity());
    progress.Update(window + 1, nll_stats.Perplexity());
  };
  Status status = EvaluateWindows(engine, plan, windows, model.batch, on_logits, on_window);
  progress.Clear();
  if (!status.ok()) return Fail(status);
  if (writer) {
    if (Status committed = writer->Commit(); !committed.ok()) return Fail(committed);
  }

  if (args.json) {
    nlohmann::ordered_json out = {
        {"model", model.model_path},
        {"n_ctx", n_ctx},
        {"batch", model.batch},
        {"windows", plan.n_chunks},
        {"tokens_scored", nll_stats.count()},
        {"running_ppl", running.values()},
        {"ppl", nll_stats.Perplexity()},
        {"ppl_uncertainty", nll_stats.PerplexityUncertainty()},
    };
    if (!args.text_path.empty()) out["text"] = args.text_path;
    if (writer || base) out["kl_divergence_base"] = args.kld_base_path;
    if (base) AddComparisonJson(kld_stats, &out);
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  running.Finish();
  std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", nll_stats.Perplexity(),
              nll_stats.PerplexityUncertainty());
  if (base) PrintComparison(kld_stats);
  return 0;
}

}  // namespace

Runner AddPerplexityCommand(CLI::App& app) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "perplexity of a text (llama-perplexity's method), or KL divergence against a "
      "base model's saved distributions");
  args->model.AddTo(*cmd);
  args->model.mpi.AddTo(*cmd);
  // Here -c is the window, and a window must score at least two tokens: the range starts higher
  // than the context's elsewhere, and is checked while parsing like every other range.
  args->model.context_option->get_validator("IntRange")->active(false);
  args->model.context_option
      ->description(
          "window: tokens per chunk, evaluated from an empty cache, its second half "
          "scored (default 512; with --kl-divergence, the base file's)")
      ->check(IntRange(int64_t(kMinPerplexityContext), kMaxContext));
  cmd->add_option("-f,--file", args->text_path,
                  "the text; each window of -c tokens (default 512) is scored on its second half");
  cmd->add_option("--kl-divergence-base", args->kld_base_path,
                  "save the model's distributions at the scored positions to FILE (2 bytes per "
                  "vocabulary entry per token); with --kl-divergence, read them from FILE");
  cmd->add_flag("--kl-divergence", args->kl_divergence,
                "compare with the distributions in the --kl-divergence-base file: KL divergence, "
                "same top token, PPL difference (-f optional: the file holds the tokens)");
  cmd->add_flag("--json", args->json, "print one JSON object instead of the text report");
  return [args]() -> int { return Run(*args); };
}

}  // namespace petrel::tools
