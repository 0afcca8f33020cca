// `petrel logits`: float32 logits of every position of one sequence, for parity checks.
#include <cstdio>
#include <sstream>
#include <string>

#include "core/format/atomic_file.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 0 || value > INT32_MAX) {
      return Error("--ids: '%s' is not a token id", item.c_str());
    }
    ids.push_back(int32_t(value));
  }
  if (ids.empty()) return Error("--ids: no token ids given");
  return ids;
}

}  // namespace

Runner AddLogitsCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    std::string ids;
    std::string output;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "write the logits of every position to a file");
  args->model.AddTo(*cmd);
  args->model.mpi.AddTo(*cmd);
  cmd->add_option("--ids", args->ids, "comma-separated token ids")->required();
  cmd->add_option("-o,--output", args->output, "output file: float32 [n_tokens][n_vocab]")->required();
  return [args]() -> int {
    auto ids = ParseIds(args->ids);
    if (!ids.ok()) return Fail(ids.status());
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    // Before the model is even loaded: never replace the model file with its own logits.
    Status not_input = CheckOutputIsNotInput(args->output, {args->model.model_path});
    if (!not_input.ok()) return Fail(not_input);
    // Opened first so that an unwritable output fails before the work; any failure after this
    // removes the temporary and leaves the output as it was.
    auto file = AtomicFile::Create(args->output);
    if (!file.ok()) return Fail(file.status());
    ModelOptions model = args->model;
    if (model.context == 0) model.context = std::max<size_t>(ids->size(), 16);
    auto engine = model.LoadEngine();
    if (!engine.ok()) return Fail(engine.status());
    std::vector<float> logits;
    const SeqId seq = (*engine)->NewSequence();
    Status status = (*engine)->Prefill(seq, *ids, /*all_logits=*/true, &logits);
    if (!status.ok()) return Fail(status);
    if (MpiRank() != 0) return 0;  // every rank has the logits; rank 0 writes them
    file->Write(logits.data(), logits.size() * sizeof(float));
    status = file->Commit();
    if (!status.ok()) return Fail(status);
    return 0;
  };
}

}  // namespace petrel::tools
