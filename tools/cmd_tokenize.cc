// `petrel tokenize`: token ids of a text, as a JSON array.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/loader.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"

namespace petrel::tools {

Runner AddTokenizeCommand(CLI::App& app) {
  struct Args {
    std::string model;
    std::string text;
    bool no_bos = false;
    bool parse_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
  cmd->add_option("text", args->text, "text to tokenize")->required();
  cmd->add_flag("--no-bos", args->no_bos, "do not add BOS/EOS");
  cmd->add_flag("--parse-special", args->parse_special, "match special tokens written in the text");
  return [args]() -> int {
    auto tokenizer = LoadTokenizer(args->model);
    if (!tokenizer.ok()) return Fail(tokenizer.status());
    EncodeOptions options;
    options.add_special = !args->no_bos;
    options.parse_special = args->parse_special;
    nlohmann::json ids = (*tokenizer)->Encode(args->text, options);
    std::printf("%s\n", ids.dump().c_str());
    return 0;
  };
}

}  // namespace petrel::tools
