// Chat-template engine: every golden rendering in shared/chat-templates/expected.jsonl, language
// semantics against jinja2's, render limits, and clean errors for malformed templates.
#include "core/chat/chat_template.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/chat/chat_prompt.h"
#include "core/chat/user_text.h"
#include "core/format/gguf.h"
#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using Json = nlohmann::ordered_json;

// The fixed moment the golden data was rendered at: 2026-01-15 00:00:00.
constexpr int64_t kGoldenNow = 1768435200;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string Dir() { return testing::SharedDir() + "/chat-templates"; }

// Python exception classes the golden errors name; any other error text came from the
// template's own raise_exception and must match exactly.
bool IsPythonError(const std::string& error) {
  for (const char* prefix : {"TypeError:", "UndefinedError:", "SecurityError:",
                             "TemplateRuntimeError:", "ValueError:", "KeyError:"}) {
    if (error.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(ChatTemplateGolden, EveryRecord) {
  const std::string conversations_text = ReadFile(Dir() + "/conversations.json");
  if (conversations_text.empty()) GTEST_SKIP() << "no " << Dir();
  const Json conversations = Json::parse(conversations_text);
  std::map<std::string, Json> by_id;
  for (const Json& conversation : conversations) by_id[conversation["id"]] = conversation;

  std::map<std::string, Result<ChatTemplate>> templates;
  std::ifstream lines(Dir() + "/expected.jsonl");
  std::string line;
  size_t total = 0, passed = 0, errors_total = 0, errors_same_text = 0;
  std::vector<std::string> failures;
  RenderLimits limits;
  limits.now_unix_seconds = kGoldenNow;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const Json record = Json::parse(line);
    ++total;
    const std::string name = record["template"];
    auto it = templates.find(name);
    if (it == templates.end()) {
      it = templates.emplace(name, ChatTemplate::Parse(ReadFile(Dir() + "/" + name + ".jinja")))
               .first;
    }
    const std::string label = name + " / " + record["conversation"].get<std::string>() +
                              " / agp=" + record["add_generation_prompt"].dump() + " / " +
                              record["extra_vars"].dump();
    if (!it->second.ok()) {
      failures.push_back(label + ": parse error: " + it->second.status().message());
      continue;
    }
    const Json& conversation = by_id[record["conversation"]];
    Json context = Json::object();
    context["messages"] = conversation["messages"];
    context["tools"] = conversation["tools"];
    context["documents"] = nullptr;
    context["add_generation_prompt"] = record["add_generation_prompt"];
    context["bos_token"] = record["bos_token"];
    context["eos_token"] = record["eos_token"];
    for (const auto& [key, value] : record["extra_vars"].items()) context[key] = value;
    const Result<std::string> rendered = it->second->Render(context, limits);
    if (record["error"].is_null()) {
      const std::string expected = record["output"];
      if (!rendered.ok()) {
        failures.push_back(label + ": failed: " + rendered.status().message());
      } else if (*rendered != expected) {
        size_t at = 0;
        while (at < expected.size() && at < rendered->size() && expected[at] == (*rendered)[at]) {
          ++at;
        }
        failures.push_back(label + ": differs at byte " + std::to_string(at) + ": expected ..." +
                           Json(expected.substr(at, 60)).dump() + ", got ..." +
                           Json(rendered->substr(at, 60)).dump());
      } else {
        ++passed;
      }
      continue;
    }
    const std::string error = record["error"];
    ++errors_total;
    if (rendered.ok()) {
      failures.push_back(label + ": rendered, but the reference failed with " + error);
      continue;
    }
    const std::string message = rendered.status().message();
    if (IsPythonError(error)) {
      ++passed;  // any failure is a pass; count those that also say the same thing
      if (message.size() >= error.size() &&
          message.compare(message.size() - error.size(), error.size(), error) == 0) {
        ++errors_same_text;
      } else {
        std::printf("note: %s: reference says \"%s\", petrel says \"%s\"\n", label.c_str(),
                    error.c_str(), message.c_str());
      }
    } else if (message == error) {
      ++passed;
    } else {
      failures.push_back(label + ": expected error \"" + error + "\", got \"" + message + "\"");
    }
  }
  for (size_t i = 0; i < failures.size() && i < 40; ++i) {
    std::printf("FAIL %s\n", failures[i].c_str());
  }
  std::printf(
      "chat templates: %zu/%zu records pass (%zu expected errors; %zu of the Python "
      "exception messages reproduced word for word)\n",
      passed, total, errors_total, errors_same_text);
  EXPECT_EQ(total, 1520u);
  EXPECT_EQ(passed, total);
}

// Renders `source` with `context` (a JSON object text); returns the output or "ERROR: message".
std::string Render(const std::string& source, const std::string& context = "{}",
                   RenderLimits limits = {}) {
  Result<ChatTemplate> parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) return "ERROR: " + parsed.status().message();
  Result<std::string> out = parsed->Render(Json::parse(context), limits);
  return out.ok() ? *out : "ERROR: " + out.status().message();
}

TEST(ChatTemplateLanguage, WhitespaceControl) {
  EXPECT_EQ(Render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(Render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(Render("{{ 'x' }}\n"), "x");
  EXPECT_EQ(Render("{{ 'x' }}\n\n"), "x\n");
  EXPECT_EQ(Render("a {# c #}\nb"), "a b");
  EXPECT_EQ(Render("  {# c #}\nb"), "b");
  EXPECT_EQ(Render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(Render("{{- ' a ' -}}"), " a ");
}

TEST(ChatTemplateLanguage, PythonValues) {
  EXPECT_EQ(Render("{{ [1, 'a', none, true, 1.0, {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, 1.0, {'k': \"it's\"}]");
  EXPECT_EQ(Render("{{ (1,) }}{{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"),
            "(1,)2.5 3 -4 2 1024");
  EXPECT_EQ(Render("{{ 1e16 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }}"), "1e+16 1.5e-05 0.30000000000000004");
  EXPECT_EQ(Render("{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}{{ 'héllo'[1:3] }}"), "cba3él");
  EXPECT_EQ(Render("{{ x }}|{{ x is defined }}|{{ x | default('d') }}|{{ none }}"),
            "|False|d|None");
  EXPECT_EQ(Render("{{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 1 < 2 < 3 }}"),
            "True True True True");
  EXPECT_EQ(Render("{{ 'a' if false }}|{{ 0 or 'y' }}|{{ 'x' and 0 }}"), "|y|0");
}

TEST(ChatTemplateLanguage, Statements) {
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ loop.index }}{{ k }}={{ v }}{% if not loop.last "
                   "%},{% endif %}{% endfor %}",
                   R"({"d": {"b": 1, "a": 2}})"),
            "1b=1,2a=2");
  EXPECT_EQ(Render("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% else %}none"
                   "{% endfor %}"),
            "2242");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}"
                   "{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(Render("{% set c = 0 %}{% for i in range(3) %}{% set c = c + 1 %}{% endfor %}{{ c }}"),
            "0");
  EXPECT_EQ(Render("{% set ns = namespace(c=0) %}{% for i in range(3) %}{% set ns.c = ns.c + 1 %}"
                   "{% endfor %}{{ ns.c }}"),
            "3");
  EXPECT_EQ(
      Render("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"),
      "[1B][23]");
  EXPECT_EQ(Render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"),
            "<in>");
  EXPECT_EQ(Render("{% set x %}a{{ 1 }}{% endset %}{{ x }}{% filter upper %}b{% endfilter %}"),
            "a1B");
  EXPECT_EQ(Render("{% generation %}g{% endgeneration %}"), "g");
  EXPECT_EQ(Render("{% for a in 'ab' %}{{ loop.cycle('x', 'y') }}{{ loop.previtem }}{% endfor %}"),
            "xya");
}

TEST(ChatTemplateLanguage, FiltersAndMethods) {
  EXPECT_EQ(Render("{{ {'a': [1, 'é'], 'b': none} | tojson }}"), R"({"a": [1, "é"], "b": null})");
  EXPECT_EQ(Render("{{ {'a': [1], 'e': {}} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1\n  ],\n  \"e\": {}\n}");
  EXPECT_EQ(
      Render("{{ ' a b '.strip().split(' ') }}{{ 'a,b'.split(',', 1) }}{{ '  x y '.split() }}"),
      "['a', 'b']['a', 'b']['x', 'y']");
  EXPECT_EQ(Render("{{ [3,1,2] | sort | join(',') }}{{ ['b','A'] | sort | first }}"), "1,2,3A");
  EXPECT_EQ(Render("{{ x | selectattr('r', 'equalto', 'u') | map(attribute='c') | list }}",
                   R"({"x": [{"r": "u", "c": 1}, {"r": "a", "c": 2}]})"),
            "[1]");
  EXPECT_EQ(Render("{{ 'a\nb' | indent(2) }}|{{ 'hello world' | title }}|{{ 'x' | upper }}"),
            "a\n  b|Hello World|X");
  EXPECT_EQ(Render("{{ '{} is {:>3}'.format('a', 1) }}|{{ '%s-%03d' % ('a', 5) }}"),
            "a is   1|a-005");
  EXPECT_EQ(Render("{{ {'b': 1, 'A': 2} | dictsort }}"), "[('A', 2), ('b', 1)]");
  EXPECT_EQ(
      Render("{{ strftime_now('%d %b %Y') }}", "{}", RenderLimits{.now_unix_seconds = kGoldenNow}),
      "15 Jan 2026");
}

TEST(ChatTemplateErrors, RuntimeErrors) {
  EXPECT_EQ(Render("{{ raise_exception('boom') }}"), "ERROR: boom");
  EXPECT_EQ(Render("{% for t in x %}{% endfor %}", R"({"x": null})"),
            "ERROR: 1:4: TypeError: 'NoneType' object is not iterable");
  EXPECT_EQ(Render("{% set l = [] %}{{ l.append(1) }}"),
            "ERROR: 1:28: SecurityError: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(Render("{{ 'a' + none }}"),
            "ERROR: 1:8: TypeError: can only concatenate str (not \"NoneType\") to str");
  EXPECT_EQ(Render("{{ x | from_json }}"),
            "ERROR: 1:8: TemplateRuntimeError: No filter named 'from_json' found.");
  EXPECT_EQ(Render("{{ x.y }}"), "ERROR: 1:5: UndefinedError: 'x' is undefined");
}

TEST(ChatTemplateErrors, MalformedTemplates) {
  for (const char* bad : {"{% if x %}", "{{ x ", "{% for %}{% endfor %}", "{{ 1 + }}",
                          "{% endif %}", "{% foo %}", "{{ (1 }}", "{# open", "{{ 'unterminated }}",
                          "{% set x = %}", "{{ x | }}", "a\n  {{ ] }}"}) {
    const std::string result = Render(bad);
    EXPECT_EQ(result.rfind("ERROR: ", 0), 0u) << bad << " -> " << result;
    // "line:column: message"
    EXPECT_TRUE(result.size() > 10 && isdigit(result[7])) << bad << " -> " << result;
  }
  EXPECT_EQ(Render("a\n  {{ ] }}").substr(0, 12), "ERROR: 2:6: ");
  // Deep nesting fails cleanly instead of exhausting the stack.
  EXPECT_EQ(Render("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}")
                .rfind("ERROR: ", 0),
            0u);
  EXPECT_EQ(Render("{{ " + std::string(50000, '-') + "1 }}").rfind("ERROR: ", 0), 0u);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  EXPECT_EQ(Render(deep_ifs).rfind("ERROR: ", 0), 0u);
}

TEST(ChatTemplateLimits, Steps) {
  RenderLimits limits;
  limits.max_steps = 100000;
  const std::string out =
      Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             "{}", limits);
  EXPECT_NE(out.find("step limit"), std::string::npos) << out;
}

// range() counts in 64-bit unsigned arithmetic: exact at the int64 extremes and with negative
// steps, on 32-bit targets too.
TEST(ChatTemplateLimits, RangeBounds) {
  EXPECT_EQ(Render("{{ range(5, 0, -2) | join(',') }}"), "5,3,1");
  EXPECT_EQ(Render("{{ range(0, 5, -1) | length }}{{ range(3, 3) | length }}"), "00");
  EXPECT_EQ(
      Render("{{ range(-9223372036854775807 - 1, -9223372036854775807 - 1 + 3) | join(',') }}"),
      "-9223372036854775808,-9223372036854775807,-9223372036854775806");
  const std::string too_big = Render(
      "{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807) "
      "| length }}{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}");
  EXPECT_NE(too_big.find("Range too big"), std::string::npos) << too_big;
  EXPECT_EQ(Render("{{ range(9223372036854775807, -9223372036854775807 - 1, "
                   "-9223372036854775807 - 1) | join(',') }}"),
            "9223372036854775807,-1");
}

TEST(ChatTemplateLimits, Depth) {
  const std::string out =
      Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", RenderLimits{});
  EXPECT_NE(out.find("RecursionError"), std::string::npos) << out;
  RenderLimits shallow;
  shallow.max_depth = 3;
  EXPECT_EQ(Render("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}.{% endmacro %}{{ f(2) }}",
                   "{}", shallow),
            "...");
  EXPECT_NE(Render("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}.{% endmacro %}{{ f(3) }}",
                   "{}", shallow)
                .find("RecursionError"),
            std::string::npos);
}

TEST(ChatTemplateLimits, DeepValuesAndCycles) {
  // A million-level nested list is built and freed without recursing; a namespace that holds
  // itself prints and serialises to a bounded depth and is freed at the end of the render.
  RenderLimits limits;
  limits.max_steps = 50'000'000;
  EXPECT_EQ(Render("{% set h = namespace(x=none) %}{% for i in range(1000) %}{% for j in "
                   "range(1000) %}{% set h.x = [h.x] %}{% endfor %}{% endfor %}ok",
                   "{}", limits),
            "ok");
  EXPECT_EQ(Render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | string | length > 0 }}"),
            "True");
  EXPECT_NE(Render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me | tojson }}")
                .find("not JSON serializable"),
            std::string::npos);
  // Very deep recursion with a huge max_depth still stops cleanly.
  RenderLimits deep;
  deep.max_depth = 1'000'000;
  EXPECT_EQ(Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", deep)
                .rfind("ERROR: ", 0),
            0u);
}

TEST(ChatTemplateLimits, Output) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  std::string out =
      Render("{% for i in range(100000) %}0123456789abcdef{% endfor %}", "{}", limits);
  EXPECT_NE(out.find("size limit"), std::string::npos) << out.substr(0, 100);
  out = Render("{{ 'x' * 100000000000 }}", "{}", limits);
  EXPECT_NE(out.find("size limit"), std::string::npos) << out.substr(0, 100);
  out = Render(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "{}", limits);
  EXPECT_NE(out.find("size limit"), std::string::npos) << out.substr(0, 100);
}

// Special-token text a user typed stays text in the tokenized prompt; the template's own special
// tokens are still special. The story model's end-of-story token is id 2.
TEST(ChatPromptTokenize, UserSpecialTextStaysText) {
  auto file = GgufFile::Open(testing::SharedDir() + "/models/story-gguf/story-f32.gguf");
  ASSERT_TRUE(file.ok());
  auto tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok());
  auto chat = ChatPrompt::FromSource(
      "{% for m in messages %}{{ m.role }}: {{ m.content | trim }}<|end_story|>{% endfor %}", "",
      "");
  ASSERT_TRUE(chat.ok());
  const Json messages = Json::array(
      {Json{{"role", "user"}, {"content", "  say <|end_story|> and <|start_story|>  "}}});
  auto ids = chat->Tokenize(**tokenizer, messages, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 2), 1);  // the template's
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 1), 1);  // BOS only
  // The same text as tokenizing the rendering with the user's part plain.
  auto text = chat->Render(messages, false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "user: say <|end_story|> and <|start_story|><|end_story|>");
  EncodeOptions options;
  options.parse_special = true;
  options.plain_spans = {{10, 23}, {28, 43}};
  EXPECT_EQ(*ids, (*tokenizer)->Encode(*text, options));
}

TEST(ChatPromptTokenize, MarkersAreRemovedAndSpansKept) {
  UserTextMarkers markers{"<o>", "<c>"};
  std::string text = "a<o>bc<c>d<c>e<o>f";
  const std::vector<TextSpan> spans = TakeMarkedSpans(&text, markers);
  EXPECT_EQ(text, "abcdef");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].begin, 1u);
  EXPECT_EQ(spans[0].end, 3u);
  EXPECT_EQ(spans[1].begin, 5u);  // unclosed: to the end
  EXPECT_EQ(spans[1].end, 6u);
  Json value = Json::array({"x<s>y", Json{{"k<s>", "<s><s>"}}, 3});
  EXPECT_TRUE(MarkSpecialTexts(&value, {"<s>"}, markers));
  EXPECT_EQ(value[0], "x<o><s><c>y");
  EXPECT_EQ(value[1]["k<s>"], "<o><s><c><o><s><c>");
  const UserTextMarkers chosen = ChooseMarkers({&value});
  EXPECT_EQ(value.dump().find(chosen.open), std::string::npos);
}

}  // namespace
}  // namespace petrel
