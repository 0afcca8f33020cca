// `petrel embed`: one embedding per input line, as a JSON array per line or raw float32.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/format/atomic_file.h"
#include "core/generation/embedding.h"
#include "core/model/loader.h"  // LoadTokenizer
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

// The inputs: each line of the text, without a last empty line after a final newline.
std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream stream(text);
  while (std::getline(stream, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// A vector as a JSON array of floats that read back to the same float32 values.
std::string JsonArray(const float* v, size_t n) {
  std::string out = "[";
  char number[32];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(number, sizeof(number), i ? ",%.9g" : "%.9g", double(v[i]));
    out += number;
  }
  out += "]";
  return out;
}

}  // namespace

Runner AddEmbedCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    std::string prompt;
    std::string file;
    std::string pooling;
    int normalize = 2;
    std::string output = "json";
    std::string output_file;
    bool parse_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "print an embedding per input line (sentence embeddings, as llama-embedding)");
  args->model.AddTo(*cmd);
  CLI::Option* prompt = cmd->add_option("-p,--prompt", args->prompt, "inputs, one per line");
  CLI::Option* file = cmd->add_option("-f,--file", args->file, "a file of inputs, one per line");
  prompt->excludes(file);
  file->excludes(prompt);
  cmd->add_option("--pooling", args->pooling,
                  "none (every token's state), mean, cls or last (default: the model's)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last"}));
  cmd->add_option("--embd-normalize", args->normalize,
                  "-1 none, 0 max absolute (int16), 1 taxicab, 2 euclidean (default), >2 p-norm")
      ->check(IntRange(-1, 1000));
  cmd->add_option("--output", args->output,
                  "json (one array per input line, default) or f32 (raw little-endian float32)")
      ->check(CLI::IsMember({"json", "f32"}));
  cmd->add_option("-o,--output-file", args->output_file, "write there instead of stdout");
  cmd->add_flag("--parse-special", args->parse_special,
                "match special tokens written in the text (off: they are plain text)");
  CLI::Option* cache_type = cmd->get_option("--cache-type");
  return [args, prompt, file, cache_type]() -> int {
    if (prompt->count() == 0 && file->count() == 0) {
      return Fail(Error("embed: give -p TEXT or -f FILE, exactly one"));
    }
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    std::string text = args->prompt;
    if (file->count() != 0) {
      std::ifstream stream(args->file, std::ios::binary);
      if (!stream) return Fail(Error("%s: cannot open for reading", args->file.c_str()));
      std::ostringstream contents;
      contents << stream.rdbuf();
      if (stream.bad()) return Fail(Error("%s: read failed", args->file.c_str()));
      text = std::move(contents).str();
    }
    const std::vector<std::string> lines = SplitLines(text);
    if (lines.empty()) return Fail(Error("embed: no input lines"));
    EmbedOptions options;
    options.normalize = args->normalize;
    if (!args->pooling.empty()) {
      auto pooling = ParsePooling(args->pooling);
      if (!pooling.ok()) return Fail(pooling.status());
      options.pooling = *pooling;
    }
    std::FILE* out = stdout;
    std::optional<AtomicFile> out_file;
    if (!args->output_file.empty()) {
      std::vector<std::string> read = {args->model.model_path};
      if (!args->file.empty()) read.push_back(args->file);
      Status not_input = CheckOutputIsNotInput(args->output_file, read);
      if (!not_input.ok()) return Fail(not_input);
      auto created = AtomicFile::Create(args->output_file);
      if (!created.ok()) return Fail(created.status());
      out_file.emplace(std::move(created).value());
    }
    ModelOptions model = args->model;
    // Each sequence is computed once and dropped, so the cache's type only costs precision.
    if (cache_type->count() == 0) model.kv_type = "f32";
    // Load once to tokenize, then size the context for the longest input when -c is not given.
    auto tokenizer = LoadTokenizer(model.model_path);
    if (!tokenizer.ok()) return Fail(tokenizer.status());
    EncodeOptions encode;
    encode.parse_special = args->parse_special;
    std::vector<std::vector<int32_t>> inputs;
    size_t longest = 0;
    for (const std::string& line : lines) {
      inputs.push_back((*tokenizer)->Encode(line, encode));
      longest = std::max(longest, inputs.back().size());
    }
    if (model.context == 0) model.context = std::max<size_t>(longest, 16);
    const size_t parallel = std::min<size_t>(inputs.size(), 64);
    auto engine = model.LoadEngine(parallel);
    if (!engine.ok()) return Fail(engine.status());
    auto embeddings = Embed(**engine, inputs, options);
    if (!embeddings.ok()) return Fail(embeddings.status());
    std::string bytes;
    for (const std::vector<float>& v : embeddings->vectors) {
      if (args->output == "f32") {
        bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
        continue;
      }
      // Pooling none: one array of per-token arrays per input line.
      const size_t dim = embeddings->dim;
      if (v.size() == dim && options.pooling != PoolingKind::kNone) {
        bytes += JsonArray(v.data(), dim);
      } else {
        bytes += "[";
        for (size_t r = 0; r < v.size() / dim; ++r) {
          bytes += (r ? "," : "") + JsonArray(v.data() + r * dim, dim);
        }
        bytes += "]";
      }
      bytes += "\n";
    }
    if (out_file) {
      out_file->Write(bytes.data(), bytes.size());
      if (Status status = out_file->Commit(); !status.ok()) return Fail(status);
      return 0;
    }
    if (std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) {
      return Fail(Error("embed: writing the output failed"));
    }
    return 0;
  };
}

}  // namespace petrel::tools
