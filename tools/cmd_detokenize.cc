// `petrel detokenize`: the text of a list of token ids (comma or space separated, or a JSON array).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/model/loader.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

// Accepts "1,2,3", "1 2 3", "[1, 2, 3]" and the same split over several arguments.
Result<std::vector<int32_t>> ParseIdList(const std::vector<std::string>& args) {
  std::string joined;
  for (const std::string& arg : args) joined += arg + " ";
  size_t begin = joined.find_first_not_of(" \t\r\n");
  size_t end = joined.find_last_not_of(" \t\r\n");
  std::string list = begin == std::string::npos ? "" : joined.substr(begin, end - begin + 1);
  if (!list.empty() && list.front() == '[') {
    if (list.back() != ']') return Error("ids: unterminated JSON array");
    list = list.substr(1, list.size() - 2);
  }
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t item_end = list.find_first_of(", \t\r\n", pos);
    const std::string item =
        list.substr(pos, item_end == std::string::npos ? std::string::npos : item_end - pos);
    if (!item.empty()) {
      char* parse_end = nullptr;
      errno = 0;
      const long long value = std::strtoll(item.c_str(), &parse_end, 10);
      if (*parse_end != '\0' || errno != 0 || value < 0 || value > INT32_MAX) {
        return Error("ids: '%s' is not a token id", item.c_str());
      }
      ids.push_back(static_cast<int32_t>(value));
    }
    if (item_end == std::string::npos) break;
    pos = item_end + 1;
  }
  return ids;
}

}  // namespace

Runner AddDetokenizeCommand(CLI::App& app) {
  struct Args {
    std::string model;
    std::vector<std::string> ids;
    bool keep_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("detokenize", "print the text of a list of token ids");
  cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
  cmd->add_option("ids", args->ids, "token ids: 1,2,3 or \"1 2 3\" or [1,2,3]")->required();
  cmd->add_flag("--keep-special", args->keep_special,
                "print special tokens (BOS, EOS...) instead of skipping them");
  return [args]() -> int {
    auto ids = ParseIdList(args->ids);
    if (!ids.ok()) return Fail(ids.status());
    auto tokenizer = LoadTokenizer(args->model);
    if (!tokenizer.ok()) return Fail(tokenizer.status());
    const size_t n_vocab = (*tokenizer)->n_vocab();
    for (const int32_t id : *ids) {
      if (static_cast<size_t>(id) >= n_vocab) {
        return Fail(Error("ids: token id %d is outside the vocabulary (%zu tokens)", id, n_vocab));
      }
    }
    const std::string text = (*tokenizer)->Decode(*ids, !args->keep_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  };
}

}  // namespace petrel::tools
