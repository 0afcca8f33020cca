// Running a model over llama-perplexity's windows (core/eval/perplexity.h): each window from an
// empty sequence, several windows per batch when -b holds them (as llama-perplexity does with
// n_seq = b / c), a window split over several batches when it does not.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/eval/perplexity.h"
#include "core/runtime/engine.h"

namespace petrel {
class Tokenizer;
}  // namespace petrel

namespace petrel::tools {

// The whole file, as bytes.
Result<std::string> ReadText(const std::string& path);

// The text's tokens as llama-perplexity (and llama-imatrix) make them: the whole text once, BOS
// as the model adds it; returns the BOS each window starts with (-1 when the model adds none).
int32_t TokenizeText(const Tokenizer& tokenizer, const std::string& text,
                     std::vector<int32_t>* tokens);

// Windows evaluated together in one batch of `batch` tokens (at least one).
size_t WindowsPerBatch(const ChunkPlan& plan, size_t batch);

// Called for every scored position in order: the window, the position j in it (first … n_ctx-2),
// the logits at j (which predict window_tokens[j + 1]).
using ScoredLogits =
    std::function<Status(size_t window, size_t position, std::span<const float> logits)>;
// Called after each window's last scored position, in window order.
using WindowDone = std::function<void(size_t window)>;

// `windows`: every window's tokens as evaluated (ChunkTokens), plan.n_ctx each. The engine must
// have room for WindowsPerBatch sequences of n_ctx tokens and batches of `batch` tokens.
Status EvaluateWindows(Engine& engine, const ChunkPlan& plan,
                       const std::vector<std::vector<int32_t>>& windows, size_t batch,
                       const ScoredLogits& on_logits, const WindowDone& on_window);

}  // namespace petrel::tools
