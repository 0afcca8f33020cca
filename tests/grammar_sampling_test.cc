// Constrained sampling end to end: grammars and JSON schemas under sampling at temperature 1,
// 100 samples each, every output checked by a recogniser written here (std::regex, nlohmann
// and a small JSON Schema validator), never by the grammar engine itself. The trained story
// model spells only letters, digits and a little punctuation (no braces or brackets), so the
// grammars that need more run on a random model with the 32,000-token llama vocabulary (byte
// tokens, multi-byte characters), which also makes the sampled tokens as varied as possible.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "core/convert/synth_model.h"
#include "core/format/gguf.h"
#include "core/generation/grammar_constraint.h"
#include "core/generation/sequence.h"
#include "core/grammar/json_schema.h"
#include "core/runtime/engine.h"
#include "core/tokenizer/tokenizer.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::ScratchDir;
using testing::SharedDir;

constexpr size_t kSamples = 100;
constexpr size_t kBatch = 25;  // sequences stepped together

std::unique_ptr<Engine> LoadModel(const std::string& path) {
  EngineOptions options;
  options.n_threads = 2;
  options.max_sequences = kBatch;
  options.context = 512;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// A random model with llama's SPM vocabulary, written once per test run.
const std::string& SpmModelPath() {
  static const std::string path = [] {
    SynthSpec spec;
    spec.dim = 64;
    spec.n_layers = 1;
    spec.n_heads = 4;
    spec.n_kv_heads = 4;
    spec.ffn_dim = 128;
    spec.type = DType::kF32;
    spec.vocab_gguf = SharedDir() + "/golden/tokenizer/ggml-vocab-llama-spm.gguf";
    spec.context = 512;
    spec.seed = 7;
    const std::string out = ScratchDir() + "/grammar-sampling-spm.gguf";
    const Status status = WriteSynthModel(spec, out);
    EXPECT_TRUE(status.ok()) << status.message();
    return out;
  }();
  return path;
}

std::string StoryPath() { return SharedDir() + "/models/story-gguf/story-f32.gguf"; }

struct Sample {
  std::string text;
  std::string stop_reason;
  Status status;
};

// kSamples generations from `prompt` under `grammar` at temperature 1, each with its own seed.
std::vector<Sample> SampleMany(Engine& engine, const std::string& grammar, size_t max_tokens,
                               const std::string& prompt = "Once upon a time") {
  std::vector<Sample> samples;
  const std::vector<int32_t> ids = engine.tokenizer()->Encode(prompt);
  for (size_t first = 0; first < kSamples; first += kBatch) {
    std::vector<std::unique_ptr<Sequence>> owned;
    std::vector<Sequence*> sequences;
    std::vector<SeqId> seqs;
    for (size_t i = first; i < std::min(kSamples, first + kBatch); ++i) {
      GenerateOptions options;
      options.max_new_tokens = max_tokens;
      options.sampling.temperature = 1.0f;
      options.sampling.top_k = 0;
      options.sampling.top_p = 1.0f;
      options.sampling.min_p = 0.0f;
      options.sampling.seed = 1000 + i;
      options.sampling.grammar = grammar;
      const SeqId seq = engine.NewSequence();
      seqs.push_back(seq);
      auto sequence = Sequence::Create(engine, seq, ids, options);
      EXPECT_TRUE(sequence.ok()) << sequence.status().message();
      if (!sequence.ok()) return samples;
      sequences.push_back(sequence->get());
      owned.push_back(std::move(sequence).value());
    }
    RunSequences(engine, sequences);
    for (Sequence* sequence : sequences) {
      samples.push_back(
          {sequence->result().text, sequence->result().stop_reason, sequence->status()});
    }
    for (SeqId seq : seqs) engine.FreeSequence(seq);
  }
  return samples;
}

// `min_distinct`: sampling at temperature 1 explores, less so on a trained model than on a
// random one.
void ExpectAllAccepted(const std::vector<Sample>& samples,
                       const std::function<bool(const std::string&)>& accepts,
                       size_t min_distinct = kSamples / 2) {
  ASSERT_EQ(samples.size(), kSamples);
  size_t distinct = 0;
  std::vector<std::string> seen;
  for (const Sample& sample : samples) {
    EXPECT_TRUE(sample.status.ok()) << sample.status.message();
    // The grammar ended the text (no token limit reached before it was complete).
    EXPECT_EQ(sample.stop_reason, "eos") << sample.text;
    EXPECT_TRUE(accepts(sample.text)) << "rejected: '" << sample.text << "'";
    if (std::find(seen.begin(), seen.end(), sample.text) == seen.end()) {
      seen.push_back(sample.text);
      ++distinct;
    }
  }
  EXPECT_GE(distinct, min_distinct);
  std::printf("  e.g. '%s' | '%s' (%zu distinct)\n", samples[0].text.c_str(),
              samples[1].text.c_str(), distinct);
}

std::function<bool(const std::string&)> Regex(const std::string& pattern) {
  auto re = std::make_shared<std::regex>(pattern, std::regex::ECMAScript);
  return [re](const std::string& text) { return std::regex_match(text, *re); };
}

// The grammars, each bounded in length so that a sample always completes within its tokens.
const char* kArithmetic = R"G(root ::= expr
expr ::= term ([-+] term){0,2}
term ::= factor ([*/] factor)?
factor ::= number | "(" number [-+*/] number ")"
number ::= "-"? [0-9]{1,3}
)G";
const char* kArithmeticRegex =
    R"(^(N|\(N[-+*/]N\))([*/](N|\(N[-+*/]N\)))?([-+](N|\(N[-+*/]N\))([*/](N|\(N[-+*/]N\)))?){0,2}$)";

const char* kJson = R"(root ::= object
object ::= "{" pair (", " pair)? "}"
pair ::= key ": " value
key ::= "\"" [a-z]{1,6} "\""
value ::= scalar | array | inner
inner ::= "{" key ": " scalar "}"
array ::= "[" (scalar (", " scalar){0,2})? "]"
scalar ::= string | number | "true" | "false" | "null"
string ::= "\"" [a-zA-Z0-9 ]{0,6} "\""
number ::= "-"? ("0" | [1-9] [0-9]{0,3}) ("." [0-9]{1,2})?
)";

const char* kCLike = R"(root ::= stmt stmt?
stmt ::= decl | assign | if
decl ::= "int " ident " = " expr ";\n"
assign ::= ident " = " expr ";\n"
if ::= "if (" operand (" < " | " == " | " > ") operand ") { " ident " = " expr "; }\n"
expr ::= operand ((" + " | " - " | " * ") operand)?
operand ::= ident | [0-9]{1,3}
ident ::= [a-z] [a-z0-9_]{0,4}
)";
const char* kCLikeRegex =
    R"(^((int I = E;\n)|(I = E;\n)|(if \(O (<|==|>) O\) \{ I = E; \}\n)){1,2}$)";

const char* kNames = R"(root ::= name (", " name){0,4}
name ::= [A-Z] [a-z]{1,7}
)";
const char* kNamesRegex = R"(^[A-Z][a-z]{1,7}(, [A-Z][a-z]{1,7}){0,4}$)";

std::string Expand(std::string pattern) {
  auto replace = [&](const std::string& key, const std::string& value) {
    for (size_t pos; (pos = pattern.find(key)) != std::string::npos;)
      pattern.replace(pos, key.size(), value);
  };
  replace("E", "(O( [-+*] O)?)");
  replace("O", "(I|[0-9]{1,3})");
  replace("I", "([a-z][a-z0-9_]{0,4})");
  replace("N", "(-?[0-9]{1,3})");
  return pattern;
}

TEST(GrammarSamplingTest, FourGrammarsOnTheSpmVocabulary) {
  auto engine = LoadModel(SpmModelPath());
  ASSERT_TRUE(engine);
  struct Case {
    const char* name;
    const char* grammar;
    size_t max_tokens;
    std::function<bool(const std::string&)> accepts;
  };
  const Case cases[] = {
      {"arithmetic", kArithmetic, 80, Regex(Expand(kArithmeticRegex))},
      {"json", kJson, 100,
       [](const std::string& text) {
         const auto value = nlohmann::json::parse(text, nullptr, false);
         return !value.is_discarded() && value.is_object();
       }},
      {"c-like", kCLike, 110,
       [](const std::string& text) {
         // "int" is also an identifier, so "int = 1;" is an assignment.
         static const std::regex re(Expand(kCLikeRegex));
         return std::regex_match(text, re);
       }},
      {"names", kNames, 50, Regex(kNamesRegex)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto start = std::chrono::steady_clock::now();
    ExpectAllAccepted(SampleMany(*engine, c.grammar, c.max_tokens), c.accepts);
    std::printf("%s: %zu samples in %.1f s\n", c.name, kSamples,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

TEST(GrammarSamplingTest, TrainedStoryModel) {
  auto engine = LoadModel(StoryPath());
  ASSERT_TRUE(engine);
  // The story vocabulary has letters, digits, space, comma, '-' and ':' but no brackets.
  ExpectAllAccepted(SampleMany(*engine, kNames, 50), Regex(kNamesRegex), 20);
  const char* subtraction = "root ::= [0-9]{1,3} (\" - \" [0-9]{1,3}){1,3}\n";
  ExpectAllAccepted(SampleMany(*engine, subtraction, 30),
                    Regex(R"(^[0-9]{1,3}( - [0-9]{1,3}){1,3}$)"), 20);
}

// The mask's cost with a 32,000-token vocabulary (llama's SPM, the tinyllama shape): every
// step of a JSON document, timed, and each of its tokens allowed where it comes.
TEST(GrammarSamplingTest, MaskCostOnALlamaVocabulary) {
  auto file = GgufFile::Open(SharedDir() + "/golden/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const size_t n_vocab = (*tokenizer)->n_vocab();
  ASSERT_EQ(n_vocab, 32000u);
  const std::string document =
      R"({"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry", "engines"], )"
      R"("notes": {"first": true, "ratio": -0.25e3, "text": "café ☕ ok"}, "none": null})";
  struct Case {
    const char* name;
    std::string grammar;
  };
  const Case cases[] = {{"json", JsonValueGbnf()},
                        {"json schema", *JsonSchemaToGbnf(R"({"type": "object", "properties": {
                            "name": {"type": "string"}, "born": {"type": "integer"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "notes": {"type": "object"}, "none": {"type": "null"}},
                            "required": ["name", "born", "tags", "notes", "none"],
                            "additionalProperties": false})")}};
  for (const Case& c : cases) {
    const auto build_start = std::chrono::steady_clock::now();
    auto matcher = CompileGrammarConstraint(c.grammar, **tokenizer, n_vocab);
    ASSERT_TRUE(matcher.ok()) << matcher.status().message();
    const double build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start)
            .count();
    // The document is spelled by the longest allowed token at each step (not timed).
    std::vector<uint8_t> mask;
    double total_ms = 0, worst_ms = 0;
    size_t allowed_total = 0, steps = 0;
    for (size_t pos = 0; pos < document.size(); ++steps) {
      const auto start = std::chrono::steady_clock::now();
      ASSERT_TRUE((*matcher)->ComputeMask(&mask).ok());
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      total_ms += ms;
      worst_ms = std::max(worst_ms, ms);
      int32_t best = -1;
      size_t best_length = 0;
      for (size_t id = 0; id < n_vocab; ++id) {
        allowed_total += mask[id];
        const std::string bytes = (*tokenizer)->TokenBytes(int32_t(id));
        if (!bytes.empty() && bytes.size() > best_length &&
            document.compare(pos, bytes.size(), bytes) == 0) {
          EXPECT_TRUE(mask[id]) << "token " << id << " '" << bytes << "' at " << pos;
          best = int32_t(id);
          best_length = bytes.size();
        }
      }
      ASSERT_GE(best, 0) << "no token at " << pos;
      ASSERT_TRUE((*matcher)->AcceptToken(best).ok());
      pos += best_length;
    }
    ASSERT_TRUE((*matcher)->ComputeMask(&mask).ok());
    EXPECT_TRUE(mask[size_t((*tokenizer)->eos_id())]);
    std::printf(
        "%s: %zu steps, mask %.3f ms mean, %.3f ms worst, %.0f tokens allowed on average; "
        "constraint built in %.1f ms\n",
        c.name, steps, total_ms / double(steps), worst_ms, double(allowed_total) / double(steps),
        build_ms);
  }
}

// --- JSON Schema -----------------------------------------------------------------------------

using Json = nlohmann::json;

size_t CodepointCount(const std::string& text) {
  size_t n = 0;
  for (char ch : text) n += (uint8_t(ch) & 0xC0) != 0x80;
  return n;
}

// The keywords the schemas below use, validated as the JSON Schema specification says.
bool Validate(const Json& schema, const Json& value, const Json& root, std::string* why) {
  auto fail = [&](const std::string& what) {
    *why = what + ": " + value.dump();
    return false;
  };
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    return Validate(root.at(Json::json_pointer(ref.substr(1))), value, root, why);
  }
  if (schema.contains("anyOf")) {
    for (const Json& branch : schema["anyOf"]) {
      std::string ignored;
      if (Validate(branch, value, root, &ignored)) return true;
    }
    return fail("no anyOf branch");
  }
  if (schema.contains("const") && value != schema["const"]) return fail("not the const");
  if (schema.contains("enum") &&
      std::find(schema["enum"].begin(), schema["enum"].end(), value) == schema["enum"].end()) {
    return fail("not in the enum");
  }
  if (schema.contains("type")) {
    const std::string type = schema["type"];
    const bool ok =
        (type == "object" && value.is_object()) || (type == "array" && value.is_array()) ||
        (type == "string" && value.is_string()) ||
        (type == "integer" && value.is_number_integer()) ||
        (type == "number" && value.is_number()) || (type == "boolean" && value.is_boolean()) ||
        (type == "null" && value.is_null());
    if (!ok) return fail("not of type " + type);
  }
  if (value.is_object()) {
    for (const Json& name : schema.value("required", Json::array())) {
      if (!value.contains(name.get<std::string>()))
        return fail("missing " + name.get<std::string>());
    }
    const Json properties = schema.value("properties", Json::object());
    for (const auto& [key, member] : value.items()) {
      if (properties.contains(key)) {
        if (!Validate(properties[key], member, root, why)) return false;
      } else if (schema.contains("additionalProperties") &&
                 schema["additionalProperties"] == false) {
        return fail("additional property " + key);
      }
    }
  }
  if (value.is_array()) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>())
      return fail("too few items");
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>())
      return fail("too many items");
    if (schema.contains("items")) {
      for (const Json& item : value) {
        if (!Validate(schema["items"], item, root, why)) return false;
      }
    }
  }
  if (value.is_string()) {
    const std::string text = value;
    const size_t length = CodepointCount(text);
    if (schema.contains("minLength") && length < schema["minLength"].get<size_t>())
      return fail("too short");
    if (schema.contains("maxLength") && length > schema["maxLength"].get<size_t>())
      return fail("too long");
    if (schema.contains("pattern") &&
        !std::regex_search(text, std::regex(schema["pattern"].get<std::string>()))) {
      return fail("pattern");
    }
    if (schema.value("format", "") == "date") {
      static const std::regex date(R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)");
      if (!std::regex_match(text, date)) return fail("not a date");
    }
  }
  if (value.is_number()) {
    if (schema.contains("minimum") && value.get<double>() < schema["minimum"].get<double>())
      return fail("below minimum");
    if (schema.contains("maximum") && value.get<double>() > schema["maximum"].get<double>())
      return fail("above maximum");
  }
  return true;
}

TEST(GrammarSamplingTest, JsonSchemaOutputsValidate) {
  auto engine = LoadModel(SpmModelPath());
  ASSERT_TRUE(engine);
  const char* schemas[] = {
      R"({"type": "object", "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 6},
          "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "tags": {"type": "array", "items": {"enum": ["red", "green", 7]}, "maxItems": 2},
          "ok": {"type": "boolean"},
          "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"},
          "when": {"type": "string", "format": "date"}},
        "required": ["name", "age"], "additionalProperties": false})",
      R"({"$defs": {"point": {"type": "object", "properties": {
            "x": {"type": "integer", "minimum": -50, "maximum": 50},
            "y": {"type": "integer", "minimum": -50, "maximum": 50}},
          "required": ["x", "y"], "additionalProperties": false}},
        "type": "object", "properties": {
          "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1, "maxItems": 2},
          "label": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
          "kind": {"const": "line"}},
        "required": ["points", "label", "kind"], "additionalProperties": false})",
  };
  for (const char* schema_text : schemas) {
    auto grammar = JsonSchemaToGbnf(schema_text);
    ASSERT_TRUE(grammar.ok()) << grammar.status().message();
    const Json schema = Json::parse(schema_text);
    const auto samples = SampleMany(*engine, *grammar, 400);
    ASSERT_EQ(samples.size(), kSamples);
    for (const Sample& sample : samples) {
      EXPECT_TRUE(sample.status.ok()) << sample.status.message();
      EXPECT_EQ(sample.stop_reason, "eos") << sample.text;
      const Json value = Json::parse(sample.text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << "does not parse: '" << sample.text << "'";
      std::string why;
      EXPECT_TRUE(Validate(schema, value, schema, &why)) << why << " in '" << sample.text << "'";
    }
    std::printf("  e.g. %s\n", samples[0].text.c_str());
  }
}

}  // namespace
}  // namespace petrel
