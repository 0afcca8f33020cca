// `petrel tokenize`: token ids of a text (an argument or a file), as a JSON array or one
// `id<TAB>piece` line per token.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/model/loader.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

// Vocabulary pieces are raw bytes: show printable UTF-8 as it is and everything else escaped, so
// that each piece stays on one line and invisible bytes can be told apart.
std::string EscapePiece(std::string_view piece) {
  std::string out;
  char hex[8];
  for (size_t pos = 0; pos < piece.size();) {
    const auto byte = static_cast<uint8_t>(piece[pos]);
    switch (byte) {
      case '\\':
        out += "\\\\";
        ++pos;
        continue;
      case '\n':
        out += "\\n";
        ++pos;
        continue;
      case '\t':
        out += "\\t";
        ++pos;
        continue;
      case '\r':
        out += "\\r";
        ++pos;
        continue;
      default:
        break;
    }
    size_t length = 0;
    if (byte >= 0x20 && byte < 0x7F) {
      length = 1;
    } else if (byte >= 0xC2 && byte <= 0xF4) {
      // A complete sequence is copied as it is; anything else is escaped byte by byte.
      const size_t need = byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4;
      bool complete = pos + need <= piece.size();
      for (size_t k = 1; complete && k < need; ++k) {
        complete = (static_cast<uint8_t>(piece[pos + k]) & 0xC0) == 0x80;
      }
      if (complete) length = need;
    }
    if (length > 0) {
      out.append(piece.substr(pos, length));
      pos += length;
    } else {
      std::snprintf(hex, sizeof(hex), "\\x%02X", byte);
      out += hex;
      ++pos;
    }
  }
  return out;
}

}  // namespace

Runner AddTokenizeCommand(CLI::App& app) {
  struct Args {
    std::string model;
    std::string text;
    std::string file;
    bool no_bos = false;
    bool parse_special = false;
    bool show_pieces = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
  CLI::Option* text = cmd->add_option("text", args->text, "text to tokenize");
  CLI::Option* file = cmd->add_option("-f,--file", args->file, "tokenize the contents of a file");
  text->excludes(file);
  file->excludes(text);
  cmd->add_flag("--no-bos", args->no_bos, "do not add BOS/EOS");
  cmd->add_flag("--parse-special", args->parse_special,
                "match special tokens written in the text (off: they are plain text)");
  cmd->add_flag("--show-pieces", args->show_pieces,
                "print one `id<TAB>piece` line per token (piece escaped) instead of a JSON array");
  return [args, text, file]() -> int {
    if (text->count() == 0 && file->count() == 0) {
      return Fail(Error("tokenize: give the text or --file, exactly one"));
    }
    std::string input = args->text;
    if (file->count() != 0) {
      std::ifstream stream(args->file, std::ios::binary);
      if (!stream) return Fail(Error("%s: cannot open for reading", args->file.c_str()));
      std::ostringstream contents;
      contents << stream.rdbuf();
      if (stream.bad()) return Fail(Error("%s: read failed", args->file.c_str()));
      input = std::move(contents).str();
    }
    auto tokenizer = LoadTokenizer(args->model);
    if (!tokenizer.ok()) return Fail(tokenizer.status());
    EncodeOptions options;
    options.add_special = !args->no_bos;
    options.parse_special = args->parse_special;
    const std::vector<int32_t> ids = (*tokenizer)->Encode(input, options);
    if (args->show_pieces) {
      std::string out;
      for (const int32_t id : ids) {
        out += std::to_string(id);
        out.push_back('\t');
        out += EscapePiece((*tokenizer)->TokenText(id));
        out.push_back('\n');
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      return 0;
    }
    const nlohmann::json json_ids = ids;
    std::printf("%s\n", json_ids.dump().c_str());
    return 0;
  };
}

}  // namespace petrel::tools
