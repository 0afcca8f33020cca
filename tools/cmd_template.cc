// `petrel template`: renders a chat template with a JSON context and prints the prompt, for
// debugging templates and for tests.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/chat/chat_template.h"
#include "core/chat/model_template.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("cannot read %s", path.c_str());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

Runner AddTemplateCommand(CLI::App& app) {
  struct Args {
    std::string model;
    std::string file;
    std::string context;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "template",
      "render a chat template; the context (an object of template variables: messages, tools, "
      "add_generation_prompt, bos_token, eos_token, ...) comes from --context or stdin");
  auto* model = cmd->add_option("-m,--model", args->model,
                                "GGUF file or Hugging Face folder whose chat template to use");
  auto* file = cmd->add_option("--chat-template-file", args->file,
                               "a Jinja template file (the flag run, chat and serve take too)");
  model->excludes(file);
  file->excludes(model);
  cmd->add_option("--context", args->context, "JSON file with the template variables");
  return [args]() -> int {
    if (args->model.empty() == args->file.empty()) {
      return Fail(Error("give one of -m/--model and --chat-template-file"));
    }
    ModelChatTemplate source;
    if (!args->model.empty()) {
      auto loaded = LoadModelChatTemplate(args->model);
      if (!loaded.ok()) return Fail(loaded.status());
      source = std::move(loaded).value();
      if (source.source.empty()) {
        return Fail(Error("%s: the model has no chat template; render one with "
                          "--chat-template-file FILE",
                          args->model.c_str()));
      }
    } else {
      auto text = ReadAll(args->file);
      if (!text.ok()) return Fail(text.status());
      source.source = std::move(text).value();
    }
    std::string context_text;
    if (args->context.empty()) {
      context_text.assign(std::istreambuf_iterator<char>(std::cin), {});
    } else {
      auto text = ReadAll(args->context);
      if (!text.ok()) return Fail(text.status());
      context_text = std::move(text).value();
    }
    // ordered_json keeps the keys in file order, which `tojson` and printed dicts show.
    nlohmann::ordered_json context = nlohmann::ordered_json::parse(context_text, nullptr, false);
    const std::string where = args->context.empty() ? "standard input" : args->context;
    if (context.is_discarded()) return Fail(Error("%s: invalid JSON", where.c_str()));
    if (!context.is_object()) return Fail(Error("%s: expected a JSON object", where.c_str()));
    // As transformers' apply_chat_template: `tools` and `documents` are always defined (none
    // when not given), and the model's special tokens are passed unless the context sets them.
    for (const char* key : {"tools", "documents"}) {
      if (!context.contains(key)) context[key] = nullptr;
    }
    if (!context.contains("add_generation_prompt")) context["add_generation_prompt"] = false;
    if (!context.contains("bos_token")) context["bos_token"] = source.bos_token;
    if (!context.contains("eos_token")) context["eos_token"] = source.eos_token;

    auto parsed = ChatTemplate::Parse(source.source);
    if (!parsed.ok()) return Fail(parsed.status().Wrap("chat template"));
    auto rendered = parsed->Render(context);
    if (!rendered.ok()) return Fail(rendered.status());
    std::fwrite(rendered->data(), 1, rendered->size(), stdout);
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace petrel::tools
