// Feeding perplexity windows to the engine and handing back the logits of the scored positions.
#include "tools/perplexity_windows.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/tokenizer/tokenizer.h"

namespace petrel::tools {

Result<std::string> ReadText(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return Error("%s: cannot open for reading", path.c_str());
  std::ostringstream contents;
  contents << stream.rdbuf();
  if (stream.bad()) return Error("%s: read failed", path.c_str());
  return std::move(contents).str();
}

int32_t TokenizeText(const Tokenizer& tokenizer, const std::string& text,
                     std::vector<int32_t>* tokens) {
  *tokens = tokenizer.Encode(text);
  const int32_t bos = tokenizer.bos_id();
  const bool adds_bos =
      bos >= 0 && !tokens->empty() && (*tokens)[0] == bos &&
      tokenizer.Encode(text, {.add_special = false, .parse_special = false, .plain_spans = {}})
              .size() < tokens->size();
  return adds_bos ? bos : -1;
}

size_t WindowsPerBatch(const ChunkPlan& plan, size_t batch) {
  return std::max<size_t>(1, batch / plan.n_ctx);
}

Status EvaluateWindows(Engine& engine, const ChunkPlan& plan,
                       const std::vector<std::vector<int32_t>>& windows, size_t batch,
                       const ScoredLogits& on_logits, const WindowDone& on_window) {
  const size_t n_vocab = size_t(engine.config().n_vocab);
  const size_t group = WindowsPerBatch(plan, batch);
  const size_t n_ctx = plan.n_ctx;
  // Only the scored positions ask for logits: n_vocab floats each add up for large vocabularies.
  auto scored = [&plan, n_ctx](size_t j) { return j >= plan.first && j + 1 < n_ctx; };
  Batch pass;
  std::vector<float> logits;
  for (size_t begin = 0; begin < windows.size(); begin += group) {
    const size_t end = std::min(windows.size(), begin + group);
    std::vector<SeqId> seqs;
    for (size_t w = begin; w < end; ++w) seqs.push_back(engine.NewSequence());
    // Tokens of the windows [begin, end), window by window, cut into batches of `batch`.
    const size_t total = (end - begin) * n_ctx;
    Status status = Status::Ok();
    for (size_t start = 0; start < total && status.ok(); start += batch) {
      const size_t stop = std::min(total, start + batch);
      pass.Clear();
      for (size_t t = start; t < stop; ++t) {
        const size_t w = t / n_ctx;
        const size_t j = t % n_ctx;
        pass.Add(windows[begin + w][j], int32_t(j), seqs[w], scored(j));
      }
      status = engine.Decode(pass, &logits);
      size_t row = 0;
      for (size_t t = start; t < stop && status.ok(); ++t) {
        const size_t j = t % n_ctx;
        if (!scored(j)) continue;
        status = on_logits(begin + t / n_ctx, j,
                           std::span<const float>(logits.data() + row * n_vocab, n_vocab));
        ++row;
        // Its last scored position ends a window's figures (its last token is never scored).
        if (status.ok() && j + 2 == n_ctx) on_window(begin + t / n_ctx);
      }
    }
    for (const SeqId seq : seqs) engine.FreeSequence(seq);
    PETREL_RETURN_IF_ERROR(status);
  }
  return Status::Ok();
}

}  // namespace petrel::tools
