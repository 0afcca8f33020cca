// `petrel run` and `chat` with --grammar, --grammar-file, --json-schema, --json-schema-file:
// outputs that match, and the one-line errors (reported before the model loads).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "util/cli_runner.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Petrel;
using testing::ScratchDir;
using testing::StoryF32Gguf;

const char* kMissingModel = "/nonexistent/petrel-grammar-test.gguf";

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(CliGrammarTest, RunOutputMatchesTheGrammar) {
  const std::string grammar = R"(root ::= name (", " name){1,3}
name ::= [A-Z] [a-z]{1,6}
)";
  for (int seed = 0; seed < 5; ++seed) {
    const auto output =
        Petrel({"run", "-m", StoryF32Gguf(), "-p", "Once upon a time", "-n", "40", "--temp", "1",
                "--seed", std::to_string(seed), "--json", "--grammar", grammar});
    ASSERT_EQ(output.exit_code, 0) << output.err;
    const auto result = nlohmann::json::parse(output.out);
    const std::string text = result["text"];
    EXPECT_EQ(result["stop_reason"], "eos");
    EXPECT_TRUE(std::regex_match(text, std::regex("[A-Z][a-z]{1,6}(, [A-Z][a-z]{1,6}){1,3}")))
        << text;
  }
  const std::string path =
      WriteFile("cli-grammar-digits.gbnf", "# digits\nroot ::= [0-9]{3} \" - \" [0-9]{2}\n");
  const auto output = Petrel({"run", "-m", StoryF32Gguf(), "-p", "Once", "-n", "20", "--temp", "1",
                              "--grammar-file", path});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  EXPECT_TRUE(std::regex_match(output.out, std::regex("[0-9]{3} - [0-9]{2}\n?"))) << output.out;
}

TEST(CliGrammarTest, JsonSchemaFileIsConvertedAndChecked) {
  // The story vocabulary has no braces, so a schema run on it is refused before generating.
  const std::string schema = WriteFile("cli-grammar.schema.json", R"({"type": "object"})");
  const auto output =
      Petrel({"run", "-m", StoryF32Gguf(), "-p", "Once", "-n", "8", "--json-schema-file", schema});
  ExpectOneLineError(output, "needs the character '{' (U+007B), which no token of the model's vocabulary spells");
}

TEST(CliGrammarTest, ErrorsComeBeforeTheModelLoads) {
  ExpectOneLineError(
      Petrel({"run", "-m", kMissingModel, "-p", "x", "--grammar", "root ::= \"a\" foo"}),
      "--grammar: grammar: 1:14: undefined rule 'foo'");
  ExpectOneLineError(
      Petrel({"run", "-m", kMissingModel, "-p", "x", "--grammar", "root ::= root \"a\""}),
      "left recursion: rule 'root' can begin with itself");
  ExpectOneLineError(Petrel({"run", "-m", kMissingModel, "-p", "x", "--json-schema",
                             R"({"type": "string", "format": "uri"})"}),
                     "--json-schema: json schema: unsupported format 'uri' at /format");
  ExpectOneLineError(
      Petrel({"run", "-m", kMissingModel, "-p", "x", "--json-schema", R"({"items": {"not": {}}})"}),
      "unsupported keyword 'not' at /items");
  ExpectOneLineError(Petrel({"run", "-m", kMissingModel, "-p", "x", "--grammar", "root ::= \"a\"",
                             "--json-schema", "{}"}),
                     "--grammar and --json-schema both constrain the output; give one");
  ExpectOneLineError(
      Petrel({"run", "-m", kMissingModel, "-p", "x", "--grammar-file", "/nonexistent/g.gbnf"}),
      "--grammar-file /nonexistent/g.gbnf: cannot open the file");
  ExpectOneLineError(Petrel({"chat", "-m", kMissingModel, "--json-schema", "{"}),
                     "--json-schema: json schema: not valid JSON");
  ExpectOneLineError(Petrel({"run", "-m", kMissingModel, "-p", "x", "--beams", "2", "--grammar",
                             "root ::= \"a\""}),
                     "--grammar has no effect with --beams");
}

}  // namespace
}  // namespace petrel
