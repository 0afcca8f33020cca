// GBNF grammars: parsing and its errors, matching text, the token mask against a brute-force
// check over a small vocabulary (tokens spanning several characters and ending inside one),
// JSON Schema conversion, and a corpus of hostile grammars and schemas that must each be
// rejected with an error or handled, without a crash or a hang (also run under the sanitizers).
#include "core/grammar/grammar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/grammar/grammar_matcher.h"
#include "core/grammar/json_schema.h"
#include "core/grammar/vocab_trie.h"

namespace petrel {
namespace {

// A bound that only a hang reaches: the sanitizer build on a loaded machine is some 20 times
// slower than a release build (the slowest case takes about 1.5 s in release).
constexpr double kHangSeconds = 90.0;

std::shared_ptr<const Grammar> MustCompile(const std::string& text) {
  auto grammar = CompileGrammar(text);
  EXPECT_TRUE(grammar.ok()) << grammar.status().message() << "\n" << text;
  return grammar.ok() ? *grammar : nullptr;
}

// Whether the whole of `text` is a complete match.
bool Matches(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  auto matcher = GrammarMatcher::Create(grammar, nullptr);
  if (!matcher.ok()) return false;
  return (*matcher)->AcceptBytes(text).ok() && (*matcher)->CanEnd();
}

std::string CompileError(const std::string& text) {
  auto grammar = CompileGrammar(text);
  return grammar.ok() ? "" : grammar.status().message();
}

TEST(GrammarTest, ParsesTheSyntax) {
  auto g = MustCompile(R"(
# a comment
root ::= greeting ("," ws name)* "!"?   # trailing comment
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]{1,5}
ws ::= [ \t]*
)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(g, "hello"));
  EXPECT_TRUE(Matches(g, "hi, Bob!"));
  EXPECT_TRUE(Matches(g, "hi,Bob,  Alice"));
  EXPECT_FALSE(Matches(g, "hi, bob"));
  EXPECT_FALSE(Matches(g, "hi, Bobbbbbb"));  // {1,5}
  EXPECT_FALSE(Matches(g, "hey"));
  EXPECT_FALSE(Matches(g, "hel"));  // a prefix is not a match
}

TEST(GrammarTest, Repetitions) {
  auto g = MustCompile(R"(root ::= "a"{2} "b"{1,3} "c"{2,} "d"? "e"+ "f"*)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(g, "aabcce"));
  EXPECT_TRUE(Matches(g, "aabbbcccccdeeefff"));
  EXPECT_FALSE(Matches(g, "abcce"));
  EXPECT_FALSE(Matches(g, "aabbbbcce"));
  EXPECT_FALSE(Matches(g, "aabce"));
  EXPECT_FALSE(Matches(g, "aabccf"));
  auto multi = MustCompile(R"(root ::= "ab"{2,3} ("x" | "yz"){0,2})");
  EXPECT_TRUE(Matches(multi, "abab"));
  EXPECT_TRUE(Matches(multi, "abababyzx"));
  EXPECT_FALSE(Matches(multi, "ababababx"));
  EXPECT_FALSE(Matches(multi, "ababxxx"));
}

TEST(GrammarTest, EscapesClassesAndUnicode) {
  auto g = MustCompile(R"(root ::= "\x41\u00e9\U0001F600\n\t\"\\" [^a-z\]] [\x30-\x39] . "é")");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(g,
                      "A\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\"
                      "Z"
                      "7"
                      "\xE2\x82\xAC"
                      "\xC3\xA9"));
  EXPECT_FALSE(Matches(g,
                       "A\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\"
                       "z"
                       "7"
                       "x"
                       "\xC3\xA9"));
  EXPECT_FALSE(Matches(g,
                       "A\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\"
                       "]"
                       "7"
                       "x"
                       "\xC3\xA9"));
  // A rule may span lines inside parentheses and after '|'.
  auto spanning = MustCompile("root ::= (\n  \"a\"\n  | \"b\"\n)\n  | \"c\"\nother ::= \"d\"");
  EXPECT_TRUE(Matches(spanning, "b"));
  EXPECT_TRUE(Matches(spanning, "c"));
}

TEST(GrammarTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(CompileError("root ::= \"a\"\nfoo ::= \"b\" bar"), "2:13: undefined rule 'bar'");
  EXPECT_EQ(CompileError("root ::= \"abc"), "1:10: unterminated literal");
  EXPECT_EQ(CompileError("root ::= [a-z"), "1:10: unterminated character class");
  EXPECT_EQ(CompileError("root ::= (\"a\""), "1:10: unclosed '('");
  EXPECT_EQ(CompileError("root ::= \"\\q\""), "1:11: unknown escape '\\q'");
  EXPECT_EQ(CompileError("root ::= \"a\"{3,1}"), "1:13: repetition {m,n} has n < m");
  EXPECT_EQ(CompileError("root ::= *"), "1:10: '*' must follow an item");
  EXPECT_EQ(CompileError("root = \"a\""), "1:6: expected '::=' after 'root'");
  EXPECT_EQ(CompileError("a ::= \"x\""), "the grammar has no 'root' rule");
  EXPECT_EQ(CompileError("root ::= \"a\"\nroot ::= \"b\""), "2:1: rule 'root' is defined twice");
  EXPECT_EQ(CompileError("root ::= [z-a]"), "1:13: character range ends before it starts");
  EXPECT_EQ(CompileError("root ::= <think>"), "1:10: token references (<...>) are not supported");
  EXPECT_EQ(CompileError("root ::= \"\\uD800\""), "1:11: escape is not a Unicode code point");
}

TEST(GrammarTest, LeftRecursionIsRejected) {
  EXPECT_EQ(CompileError("root ::= root \"a\" | \"b\""),
            "left recursion: rule 'root' can begin with itself");
  EXPECT_NE(CompileError("root ::= a\na ::= b \"x\"\nb ::= c\nc ::= a | \"y\""), "");
  // Through a rule that can match nothing.
  EXPECT_NE(CompileError("root ::= empty root \"x\" | \"y\"\nempty ::= \"z\"?"), "");
  EXPECT_NE(CompileError("root ::= (\"a\"? root) | \"b\""), "");
  // Right recursion is fine.
  auto g = MustCompile("root ::= \"a\" root | \"b\"");
  EXPECT_TRUE(Matches(g, "aaab"));
}

// A small vocabulary with tokens that span characters, split UTF-8 characters, and repeat
// bytes; the mask must equal "feeding this token's bytes succeeds".
std::vector<std::string> TestVocab() {
  return {"",
          "a",
          "b",
          "ab",
          "ba",
          "abc",
          "c",
          "{",
          "}",
          "\"",
          "\"a",
          "a\"",
          "{\"",
          "\":",
          ":",
          " ",
          "  ",
          ",",
          "1",
          "12",
          "-",
          "-1",
          "0",
          "01",
          ".",
          ".5",
          "e",
          "true",
          "tru",
          "null",
          "\xC3",
          "\xA9",
          "\xC3\xA9",
          "a\xC3",
          "\xA9"
          "b",
          "\xE2\x82",
          "\xAC",
          "\xE2",
          "\x82\xAC",
          "\xF0\x9F",
          "\x98\x80",
          "\n",
          "\\",
          "\\n",
          "u",
          "[",
          "]",
          "x",
          "yz",
          "A",
          "Bo",
          "b,",
          ", ",
          "é,",
          "\xFF"};
}

std::shared_ptr<const VocabTrie> MakeVocab(const std::vector<std::string>& pieces,
                                           std::vector<int32_t> ends) {
  return std::make_shared<const VocabTrie>(pieces, std::move(ends));
}

// Checks ComputeMask against feeding each token to a fresh matcher after `prefix` tokens.
void CheckMaskAgainstBruteForce(const std::shared_ptr<const Grammar>& grammar,
                                const std::vector<std::string>& pieces, uint64_t seed,
                                size_t steps) {
  const int32_t kEnd = 0;  // piece "" stands for the end token
  auto vocab = MakeVocab(pieces, {kEnd});
  auto created = GrammarMatcher::Create(grammar, vocab);
  ASSERT_TRUE(created.ok()) << created.status().message();
  auto& matcher = *created;
  std::vector<int32_t> accepted;
  std::mt19937_64 rng(seed);
  for (size_t step = 0; step < steps; ++step) {
    std::vector<uint8_t> mask;
    const Status status = matcher->ComputeMask(&mask);
    std::vector<int32_t> allowed;
    for (size_t id = 0; id < pieces.size(); ++id) {
      auto fresh = GrammarMatcher::Create(grammar, vocab);
      ASSERT_TRUE(fresh.ok());
      bool ok = true;
      for (int32_t t : accepted) ok = ok && (*fresh)->AcceptToken(t).ok();
      ASSERT_TRUE(ok);
      const bool expected = (*fresh)->AcceptToken(int32_t(id)).ok();
      EXPECT_EQ(bool(mask[id]), expected)
          << "token " << id << " '" << pieces[id] << "' after " << accepted.size() << " tokens";
      if (expected) allowed.push_back(int32_t(id));
    }
    if (allowed.empty()) {
      EXPECT_FALSE(status.ok());
      return;
    }
    const int32_t chosen = allowed[rng() % allowed.size()];
    if (chosen == kEnd) return;
    ASSERT_TRUE(matcher->AcceptToken(chosen).ok());
    accepted.push_back(chosen);
  }
}

TEST(GrammarTest, MaskMatchesBruteForce) {
  const std::vector<std::string> grammars = {
      JsonValueGbnf(),
      R"(root ::= "ab"* "c" | "a\u00e9b" "\u20ac"+ | [^a-z]{1,3} "x")",
      "root ::= ([a-c] | \"\\u00e9\" | \"\\U0001F600\")+ \"}\"",
      R"(root ::= name (", " name){0,3}
name ::= [A-Z] [a-z]{1,3})",
  };
  for (size_t g = 0; g < grammars.size(); ++g) {
    auto grammar = MustCompile(grammars[g]);
    ASSERT_TRUE(grammar);
    for (uint64_t seed = 0; seed < 6; ++seed) {
      SCOPED_TRACE("grammar " + std::to_string(g) + " seed " + std::to_string(seed));
      CheckMaskAgainstBruteForce(grammar, TestVocab(), seed, 12);
    }
  }
}

TEST(GrammarTest, EndTokenOnlyWhenComplete) {
  auto grammar = MustCompile(R"(root ::= "ab" "c"?)");
  auto vocab = MakeVocab({"", "a", "b", "c", "ab"}, {0});
  auto matcher = GrammarMatcher::Create(grammar, vocab);
  ASSERT_TRUE(matcher.ok());
  std::vector<uint8_t> mask;
  ASSERT_TRUE((*matcher)->ComputeMask(&mask).ok());
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 0, 0, 1}));
  EXPECT_FALSE((*matcher)->AcceptToken(0).ok());  // the end token before the end
  EXPECT_FALSE((*matcher)->error().ok());         // kept
  matcher = GrammarMatcher::Create(grammar, vocab);
  ASSERT_TRUE((*matcher)->AcceptToken(4).ok());
  ASSERT_TRUE((*matcher)->ComputeMask(&mask).ok());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 0, 1, 0}));
  EXPECT_TRUE((*matcher)->CanContinue());
  ASSERT_TRUE((*matcher)->AcceptToken(3).ok());
  EXPECT_FALSE((*matcher)->CanContinue());
  ASSERT_TRUE((*matcher)->ComputeMask(&mask).ok());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 0, 0, 0}));
  ASSERT_TRUE((*matcher)->AcceptToken(0).ok());
  EXPECT_TRUE((*matcher)->ended());
}

TEST(GrammarTest, VocabularyThatCannotSpellTheGrammarIsAnError) {
  auto grammar = MustCompile(R"(root ::= "{")");
  auto matcher = GrammarMatcher::Create(grammar, MakeVocab({"", "a", "b"}, {0}));
  ASSERT_TRUE(matcher.ok());
  std::vector<uint8_t> mask;
  const Status status = (*matcher)->ComputeMask(&mask);
  EXPECT_EQ(status.message(), "grammar: no token of the vocabulary can continue the text");
}

// --- JSON Schema ---------------------------------------------------------------------------

std::string SchemaError(const std::string& schema) {
  auto grammar = JsonSchemaToGbnf(schema);
  return grammar.ok() ? "" : grammar.status().message();
}

std::shared_ptr<const Grammar> SchemaGrammar(const std::string& schema) {
  auto text = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return nullptr;
  return MustCompile(*text);
}

TEST(JsonSchemaTest, ObjectsAndRequiredAndOptional) {
  auto g = SchemaGrammar(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2}},
    "required": ["name"], "additionalProperties": false})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(g, R"({"name": "Bob"})"));
  EXPECT_TRUE(Matches(g, R"({"name":"Bob","age":42,"tags":["a",3]})"));
  EXPECT_TRUE(Matches(g, R"({"name":"Bob","tags":[]})"));
  EXPECT_FALSE(Matches(g, R"({"age":42})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Bob","age":151})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Bob","age":-1})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Bobbie"})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Bob","tags":["c"]})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Bob","tags":["a","b","a"]})"));
  EXPECT_FALSE(Matches(g, R"({"name":"Bob","extra":1})"));
}

TEST(JsonSchemaTest, AdditionalPropertiesAndOnlyOptional) {
  auto g = SchemaGrammar(R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}},
                            "additionalProperties": {"type": "integer"}})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(g, "{}"));
  EXPECT_TRUE(Matches(g, R"({"b": null})"));
  EXPECT_TRUE(Matches(g, R"({"a": true, "b": null, "x": 1, "y": -2})"));
  EXPECT_TRUE(Matches(g, R"({"x": 1})"));
  EXPECT_FALSE(Matches(g, R"({"x": "s"})"));
  EXPECT_FALSE(Matches(g, R"({"b": null, "a": true})"));  // the order is fixed
}

TEST(JsonSchemaTest, RefsAnyOfFormatsPatternsAndTuples) {
  auto g = SchemaGrammar(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(g, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(Matches(g, R"({"v": 1, "next": {"v": 2}})"));
  auto formats = SchemaGrammar(R"({"type": "array", "prefixItems": [
      {"type": "string", "format": "date"}, {"type": "string", "format": "uuid"},
      {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}, {"const": {"k": [1, 2]}}],
    "items": false, "minItems": 2})");
  ASSERT_TRUE(formats);
  EXPECT_TRUE(Matches(formats, R"(["2024-02-29", "123e4567-e89b-12d3-a456-426614174000"])"));
  EXPECT_TRUE(Matches(
      formats, R"(["2024-02-29", "123e4567-e89b-12d3-a456-426614174000", "AB-12", {"k":[1,2]}])"));
  EXPECT_FALSE(Matches(formats, R"(["2024-02-29"])"));
  EXPECT_FALSE(Matches(formats, R"(["2024-13-01", "123e4567-e89b-12d3-a456-426614174000"])"));
  EXPECT_FALSE(
      Matches(formats, R"(["2024-02-29", "123e4567-e89b-12d3-a456-426614174000", "ab-12"])"));
  auto types = SchemaGrammar(R"({"type": ["string", "null"], "minLength": 2})");
  EXPECT_TRUE(Matches(types, "null"));
  EXPECT_TRUE(Matches(types, R"("ab")"));
  EXPECT_FALSE(Matches(types, R"("a")"));
  auto unanchored = SchemaGrammar(R"({"type": "string", "pattern": "a\\.b"})");
  EXPECT_TRUE(Matches(unanchored, R"("xxa.byy")"));
  EXPECT_FALSE(Matches(unanchored, R"("xxaxbyy")"));
  auto all_of =
      SchemaGrammar(R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]}], "additionalProperties": false})");
  EXPECT_TRUE(Matches(all_of, R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(Matches(all_of, R"({"a": 1})"));
}

TEST(JsonSchemaTest, IntegerRanges) {
  struct Case {
    const char* schema;
    std::vector<long long> in, out;
  };
  const Case cases[] = {
      {R"({"type": "integer", "minimum": 7, "maximum": 1234})",
       {7, 9, 10, 99, 100, 999, 1000, 1234},
       {6, 0, -7, 1235, 2000, 10000}},
      {R"({"type": "integer", "minimum": -15, "maximum": 3})",
       {-15, -10, -9, -1, 0, 3},
       {-16, -20, 4, 10}},
      {R"({"type": "integer", "exclusiveMinimum": 9})", {10, 11, 99, 100, 123456}, {9, 0, -1}},
      {R"({"type": "integer", "maximum": -3})", {-3, -4, -10, -999}, {-2, 0, 5}},
      {R"({"type": "integer", "minimum": 100, "maximum": 100})", {100}, {99, 101, 10, 1000}},
  };
  for (const Case& c : cases) {
    auto g = SchemaGrammar(c.schema);
    ASSERT_TRUE(g) << c.schema;
    for (long long v : c.in) EXPECT_TRUE(Matches(g, std::to_string(v))) << c.schema << " " << v;
    for (long long v : c.out) EXPECT_FALSE(Matches(g, std::to_string(v))) << c.schema << " " << v;
    EXPECT_FALSE(Matches(g, "007"));
  }
}

TEST(JsonSchemaTest, ErrorsNameTheKeywordAndPointer) {
  EXPECT_EQ(SchemaError(R"({"properties": {"a": {"not": {}}}})"),
            "json schema: unsupported keyword 'not' at /properties/a");
  EXPECT_EQ(SchemaError(R"({"items": {"uniqueItems": true}})"),
            "json schema: unsupported keyword 'uniqueItems' at /items");
  EXPECT_EQ(SchemaError(R"({"type": "string", "format": "uri"})"),
            "json schema: unsupported format 'uri' at /format");
  EXPECT_EQ(SchemaError(R"({"type": "number", "maximum": 3.5})"),
            "json schema: bounds on a number are not supported (only minimum 0; use type integer "
            "for ranges) at /");
  EXPECT_EQ(SchemaError(R"({"$ref": "https://example.com/s.json"})"),
            "json schema: $ref 'https://example.com/s.json' is not local (only \"#...\" "
            "references are supported) at /");
  EXPECT_EQ(SchemaError(R"({"type": "string", "pattern": "(?=a)b"})"),
            "json schema: pattern: lookarounds and named groups are not supported at offset 1 at "
            "/pattern");
  EXPECT_EQ(SchemaError("{"), "json schema: not valid JSON");
  EXPECT_EQ(SchemaError(R"({"type": "thing"})"), "json schema: unknown type 'thing' at /type");
}

// An unbounded repetition of a pattern item that can match nothing would become a left-recursive
// grammar: refused with the pattern's offset. Bounded repetitions of such items, and unbounded
// ones of items that cannot be empty, still convert, and what converts compiles.
TEST(JsonSchemaTest, PatternRepetitionOfEmptyMatchIsRefused) {
  for (const char* pattern : {"(|d)*", "a(b?)+", "(x*){2,}", "((a|)c?)*", "(?:)*"}) {
    const std::string schema = std::string(R"({"type": "string", "pattern": ")") + pattern + "\"}";
    EXPECT_THAT(SchemaError(schema),
                testing::HasSubstr("unbounded repetition of an item that can match the empty"))
        << pattern;
  }
  for (const char* pattern : {"(|d){0,3}", "(b?c)+", "(x+)*", "(a|bc)*d", "(x*){2}"}) {
    const std::string schema = std::string(R"({"type": "string", "pattern": ")") + pattern + "\"}";
    auto gbnf = JsonSchemaToGbnf(schema);
    ASSERT_TRUE(gbnf.ok()) << pattern << ": " << gbnf.status().message();
    auto grammar = CompileGrammar(*gbnf);
    EXPECT_TRUE(grammar.ok()) << pattern << ": " << grammar.status().message();
  }
}

// --- Hostile input ---------------------------------------------------------------------------

struct HostileResult {
  bool compiled = false;
  std::string error;
  double seconds = 0;
};

// Compiles `text` and, when it compiles, matches a few characters and computes masks.
HostileResult TryGrammar(const std::string& text) {
  const auto start = std::chrono::steady_clock::now();
  HostileResult result;
  auto grammar = CompileGrammar(text);
  if (!grammar.ok()) {
    result.error = grammar.status().message();
  } else {
    result.compiled = true;
    auto matcher = GrammarMatcher::Create(*grammar, MakeVocab(TestVocab(), {0}));
    if (!matcher.ok()) {
      result.error = matcher.status().message();
    } else {
      std::vector<uint8_t> mask;
      for (int i = 0; i < 4; ++i) {
        if (!(*matcher)->ComputeMask(&mask).ok()) break;
        int32_t chosen = -1;
        for (size_t id = 1; id < mask.size() && chosen < 0; ++id) {
          if (mask[id]) chosen = int32_t(id);
        }
        if (chosen < 0 || !(*matcher)->AcceptToken(chosen).ok()) break;
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string Repeat(const std::string& piece, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += piece;
  return out;
}

TEST(GrammarHostileTest, CorpusIsRejectedOrHandled) {
  struct Case {
    const char* name;
    std::string text;
    bool must_fail;
  };
  std::string many_alternatives = "root ::= ";
  for (int i = 0; i < 10000; ++i)
    many_alternatives += (i ? " | \"a" : "\"a") + std::to_string(i) + "\"";
  std::string many_rules = "root ::= r0\n";
  for (int i = 0; i < 120000; ++i) many_rules += "r" + std::to_string(i) + " ::= \"a\"\n";
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 20000; ++i) {
    chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  }
  chain += "r20000 ::= \"a\"\n";
  const Case cases[] = {
      {"deep nesting", "root ::= " + Repeat("(", 100000) + "\"a\"" + Repeat(")", 100000), true},
      {"nesting at the limit", "root ::= " + Repeat("(", 100) + "\"a\"" + Repeat(")", 100), false},
      {"huge repetition", "root ::= \"a\"{1000000000}", true},
      {"huge repetition range", "root ::= \"a\"{0,99999999999999999999}", true},
      {"nested repetitions", "root ::= ((((\"ab\"{0,10000}){0,10000}){0,10000}){0,10000})", false},
      {"repetition of optional", "root ::= (\"a\"?){0,10000} \"b\"", false},
      {"left recursion", "root ::= root \"a\"", true},
      {"indirect left recursion", "root ::= a\na ::= b\nb ::= \"x\"? root", true},
      {"undefined rule", "root ::= missing", true},
      {"unterminated literal", "root ::= \"abc", true},
      {"unterminated class", "root ::= [abc", true},
      {"invalid utf-8", "root ::= \"\xC3\x28\"", true},
      {"invalid utf-8 in a class", "root ::= [\xFF-\xFE]", true},
      {"lone escape", "root ::= \"\\", true},
      {"10k alternatives", many_alternatives, false},
      {"too many rules", many_rules, true},
      {"long chain of rules", chain, false},
      {"exponential ambiguity", "root ::= " + Repeat("(\"a\" | \"a\" | \"a\")", 60), false},
      {"ambiguous stars", "root ::= (\"a\"* \"a\"*)*  \"b\"", true},
      {"empty", "", true},
      {"only comments", "# nothing\n# here\n", true},
      {"nul bytes", std::string("root ::= \"a\0b\"", 14), false},
  };
  for (const Case& c : cases) {
    const HostileResult result = TryGrammar(c.text);
    SCOPED_TRACE(c.name);
    std::printf("%-24s %.3f s  %s\n", c.name, result.seconds,
                result.error.empty() ? "(handled)" : result.error.c_str());
    if (c.must_fail) {
      EXPECT_FALSE(result.error.empty());
    }
    // One line, naming what is wrong.
    EXPECT_EQ(result.error.find('\n'), std::string::npos) << result.error;
    EXPECT_LT(result.seconds, kHangSeconds) << result.error;
  }
}

TEST(GrammarHostileTest, SchemaCorpusIsRejectedOrHandled) {
  std::string deep = Repeat(R"({"type": "array", "items": )", 5000) + "{}" + Repeat("}", 5000);
  std::string wide = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 3000; ++i) wide += (i ? ", \"p" : "\"p") + std::to_string(i) + "\": {}";
  wide += "}}";
  std::string deep_const = R"({"const": )" + Repeat("[", 10000) + Repeat("]", 10000) + "}";
  const std::pair<const char*, std::string> cases[] = {
      {"deep nesting", deep},
      {"deep const", deep_const},
      {"wide object", wide},
      {"$ref cycle",
       R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"},
      {"$ref to itself", R"({"$ref": "#"})"},
      {"dangling $ref", R"({"$ref": "#/$defs/nothing"})"},
      {"huge maxItems", R"({"type": "array", "maxItems": 100000000000})"},
      {"huge maxLength", R"({"type": "string", "minLength": 99999999})"},
      {"negative minItems", R"({"type": "array", "minItems": -1})"},
      {"huge pattern repetition", R"({"type": "string", "pattern": "^a{99999999}$"})"},
      {"unterminated pattern class", R"({"type": "string", "pattern": "[abc"})"},
      {"false schema", "false"},
      {"not an object", "[1, 2]"},
      {"invalid utf-8", "{\"const\": \"\xC3\x28\"}"},
      {"huge integer bounds", R"({"type": "integer", "minimum": -1e300, "maximum": 1e300})"},
      {"many prefixItems", R"({"prefixItems": [)" + Repeat("{},", 5000) + "{}]}"},
  };
  for (const auto& [name, schema] : cases) {
    SCOPED_TRACE(name);
    const auto start = std::chrono::steady_clock::now();
    auto text = JsonSchemaToGbnf(schema);
    if (text.ok()) {
      auto compiled = CompileGrammar(*text);
      if (compiled.ok()) (void)GrammarMatcher::Create(*compiled, MakeVocab(TestVocab(), {0}));
    } else {
      EXPECT_EQ(text.status().message().find('\n'), std::string::npos);
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              kHangSeconds);
  }
  EXPECT_NE(
      SchemaError(
          R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"),
      "");
  EXPECT_NE(SchemaError(deep), "");
  EXPECT_NE(SchemaError("false"), "");
}

}  // namespace
}  // namespace petrel
