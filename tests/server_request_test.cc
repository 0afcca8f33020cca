// Request validation of `petrel serve` without a server: every bounded field accepted at its
// edges and refused just past them with a 400 naming it; unknown fields refused; defaults.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/generation/sampling/sampling_fields.h"
#include "core/grammar/grammar.h"
#include "core/grammar/grammar_matcher.h"
#include "server/anthropic_request.h"
#include "server/api_error.h"
#include "server/completion_request.h"
#include "server/prompt_builder.h"
#include "server/tool_call_grammar.h"
#include "util/test_data.h"

namespace petrel::server {
namespace {

using json = nlohmann::json;

constexpr RequestLimits kLimits{256, 1000, 8, {}};

ApiResult Parse(const json& body, Endpoint endpoint = Endpoint::kCompletion,
                CompletionRequest* out = nullptr) {
  CompletionRequest request;
  ApiResult result = ParseCompletionRequest(body.dump(), endpoint, kLimits, &request);
  if (out) *out = request;
  return result;
}

json Base(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}
                                     : json{{"prompt", "hi"}};
}

struct Edge {
  const char* field;
  json lo, hi;        // accepted
  json below, above;  // refused (null: no such side)
  Endpoint endpoint = Endpoint::kCompletion;
};

TEST(ServerRequestTest, NumericFieldsAtTheirEdges) {
  const std::vector<Edge> edges = {
      {"n", 1, 8, 0, 9},
      {"max_tokens", 1, 256, 0, 257},
      {"max_completion_tokens", 1, 256, 0, 257, Endpoint::kChat},
      {"temperature", 0, 100, -0.01, 100.5},
      {"top_p", 0.001, 1, 0, 1.01},
      {"top_k", 0, 1 << 20, -1, (1 << 20) + 1},
      {"min_p", 0, 1, -0.1, 1.1},
      {"presence_penalty", -2, 2, -2.1, 2.1},
      {"frequency_penalty", -2, 2, -2.1, 2.1},
      {"repeat_penalty", 0.01, 10, 0, 10.5},
      {"logprobs", 0, 5, -1, 6},
      {"top_logprobs", 0, 20, -1, 21, Endpoint::kChat},
  };
  for (const Edge& edge : edges) {
    SCOPED_TRACE(edge.field);
    for (const json& good : {edge.lo, edge.hi}) {
      json body = Base(edge.endpoint);
      body[edge.field] = good;
      if (std::string(edge.field) == "top_logprobs") body["logprobs"] = true;
      EXPECT_FALSE(Parse(body, edge.endpoint)) << good;
    }
    for (const json& bad : {edge.below, edge.above, json("1"), json(true)}) {
      json body = Base(edge.endpoint);
      body[edge.field] = bad;
      if (std::string(edge.field) == "top_logprobs") body["logprobs"] = true;
      const ApiResult error = Parse(body, edge.endpoint);
      ASSERT_TRUE(error) << bad;
      EXPECT_EQ(error->status, 400);
      EXPECT_EQ(error->param, edge.field) << error->message;
    }
  }
}

// Every row of the sampler table (shared with the CLI's flags) is a request field of both
// endpoints, accepted at its edges and refused past them, and sets its SamplingParams member.
TEST(ServerRequestTest, EverySamplerFieldAtItsEdges) {
  for (const SamplingField& field : SamplingFields()) {
    SCOPED_TRACE(field.name);
    for (Endpoint endpoint : {Endpoint::kChat, Endpoint::kCompletion}) {
      std::vector<double> good = {field.lo_open ? field.lo + 0.25 : field.lo, field.hi};
      std::vector<double> bad = {field.lo_open ? field.lo : field.lo - 1, field.hi + 1};
      if (!field.choices.empty()) {
        good.assign(field.choices.begin(), field.choices.end());
        bad = {1, 3};
      }
      for (double value : good) {
        json body = Base(endpoint);
        body[field.name] = value;
        CompletionRequest request;
        ASSERT_FALSE(Parse(body, endpoint, &request)) << value;
        const double set = field.real ? double(request.sampling.*field.real)
                                      : double(request.sampling.*field.integer);
        EXPECT_FLOAT_EQ(float(set), float(value));
      }
      for (const json& value : {json(bad[0]), json(bad[1]), json("1"), json(true)}) {
        json body = Base(endpoint);
        body[field.name] = value;
        const ApiResult error = Parse(body, endpoint);
        ASSERT_TRUE(error) << value;
        EXPECT_EQ(error->status, 400);
        EXPECT_EQ(error->param, field.name) << error->message;
      }
      if (field.integer) {
        json body = Base(endpoint);
        body[field.name] = field.hi - 0.5;
        EXPECT_TRUE(Parse(body, endpoint)) << "a fraction";
      }
    }
  }
  json body = Base(Endpoint::kCompletion);
  body["dry_sequence_breakers"] = {"\n", "and"};
  CompletionRequest request;
  ASSERT_FALSE(Parse(body, Endpoint::kCompletion, &request));
  EXPECT_EQ(request.sampling.dry_sequence_breakers, (std::vector<std::string>{"\n", "and"}));
  for (const json& bad : {json("x"), json({""}), json({1}), json(std::vector<std::string>(33, "a"))}) {
    body["dry_sequence_breakers"] = bad;
    const ApiResult error = Parse(body, Endpoint::kCompletion);
    ASSERT_TRUE(error) << bad;
    EXPECT_EQ(error->param, "dry_sequence_breakers");
  }
}

TEST(ServerRequestTest, UnknownAndUnsupportedFieldsAreRefused) {
  for (const char* field : {"echo", "suffix", "best_of", "functions", "zzz"}) {
    json body = Base(Endpoint::kCompletion);
    body[field] = 1;
    const ApiResult error = Parse(body);
    ASSERT_TRUE(error) << field;
    EXPECT_EQ(error->param, field);
    EXPECT_EQ(error->code, "unsupported_parameter");
  }
  // Chat-only fields on completions and the other way round.
  json completion = Base(Endpoint::kCompletion);
  completion["messages"] = json::array();
  EXPECT_EQ(Parse(completion)->param, "messages");
  json chat = Base(Endpoint::kChat);
  chat["prompt"] = "x";
  EXPECT_EQ(Parse(chat, Endpoint::kChat)->param, "prompt");
  json options = Base(Endpoint::kChat);
  options["stream"] = true;
  options["stream_options"] = {{"include_usage", true}, {"other", 1}};
  EXPECT_EQ(Parse(options, Endpoint::kChat)->param, "stream_options.other");
}

// response_format, json_schema and grammar become the request's GBNF grammar; bad ones are a
// 400 naming the field, with the schema's pointer or the grammar's line:column.
TEST(ServerRequestTest, ConstrainedOutputFields) {
  for (const Endpoint endpoint : {Endpoint::kCompletion, Endpoint::kChat}) {
    CompletionRequest request;
    json body = Base(endpoint);
    EXPECT_FALSE(Parse(body, endpoint, &request));
    EXPECT_EQ(request.sampling.grammar, "");
    body["response_format"] = {{"type", "json_object"}};
    EXPECT_FALSE(Parse(body, endpoint, &request));
    EXPECT_NE(request.sampling.grammar.find("root ::= object"), std::string::npos);
    body["response_format"] = {{"type", "json_schema"},
                               {"json_schema",
                                {{"name", "x"},
                                 {"strict", true},
                                 {"schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}}}}}};
    EXPECT_FALSE(Parse(body, endpoint, &request));
    EXPECT_NE(request.sampling.grammar.find("\\\"a\\\""), std::string::npos) << request.sampling.grammar;
    body["response_format"] = {{"type", "text"}};
    EXPECT_FALSE(Parse(body, endpoint, &request));
    EXPECT_EQ(request.sampling.grammar, "");
  }
  struct Bad {
    json value;
    const char* field;
    const char* message;
  };
  const Bad bad[] = {
      {{{"response_format", 1}}, "response_format", "must be an object"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format", "'xml' is not supported"},
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format", "json_schema.schema' is missing"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "array"}, {"uniqueItems", true}}}}}}}},
       "response_format", "unsupported keyword 'uniqueItems' at /"},
      {{{"json_schema", {{"properties", {{"a", {{"not", json::object()}}}}}}}}, "json_schema", "at /properties/a"},
      {{{"grammar", "root ::= x"}}, "grammar", "1:10: undefined rule 'x'"},
      {{{"grammar", 5}}, "grammar", "must be a string"},
      {{{"grammar", "root ::= \"a\""}, {"json_schema", json::object()}}, "json_schema", "both constrain the output"},
  };
  for (const Bad& b : bad) {
    json body = Base(Endpoint::kCompletion);
    for (const auto& [key, value] : b.value.items()) body[key] = value;
    const ApiResult error = Parse(body);
    ASSERT_TRUE(error) << b.value.dump();
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->param, b.field) << error->message;
    EXPECT_NE(error->message.find(b.message), std::string::npos) << error->message;
  }
}

TEST(ServerRequestTest, StructuredFields) {
  auto param = [](json body, Endpoint endpoint = Endpoint::kCompletion) {
    ApiResult error = Parse(body, endpoint);
    return error ? error->param : std::string("(accepted)");
  };
  json body = Base(Endpoint::kCompletion);
  body["stop"] = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(param(body), "stop");
  body["stop"] = {""};
  EXPECT_EQ(param(body), "stop");
  body["stop"] = "\n\n";
  EXPECT_EQ(param(body), "(accepted)");
  body.erase("stop");
  body["logit_bias"] = {{"999", 100}};
  EXPECT_EQ(param(body), "(accepted)");
  body["logit_bias"] = {{"1000", 1}};  // outside the vocabulary of 1000
  EXPECT_EQ(param(body), "logit_bias");
  body["logit_bias"] = {{"5", 101}};
  EXPECT_EQ(param(body), "logit_bias");
  body["logit_bias"] = {{"x5", 1}};
  EXPECT_EQ(param(body), "logit_bias");
  body.erase("logit_bias");
  body["prompt"] = {1, 2, 3};
  EXPECT_EQ(param(body), "(accepted)");
  body["prompt"] = {"a", "b"};
  EXPECT_EQ(param(body), "prompt");
  body["prompt"] = json::array();
  EXPECT_EQ(param(body), "prompt");
  body["prompt"] = 5;
  EXPECT_EQ(param(body), "prompt");

  json chat = Base(Endpoint::kChat);
  chat["messages"] = json::array();
  EXPECT_EQ(param(chat, Endpoint::kChat), "messages");
  chat["messages"] = {{{"role", "user"}}};
  EXPECT_EQ(param(chat, Endpoint::kChat), "messages[0].content");
  chat["messages"] = {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}};
  EXPECT_EQ(param(chat, Endpoint::kChat), "messages[0].content");
  chat["messages"] = {{{"role", "user"}, {"content", 7}}};
  EXPECT_EQ(param(chat, Endpoint::kChat), "messages[0].content");
  chat["messages"] = {{{"role", "user"}, {"content", "x"}}};
  chat["tools"] = "none";
  EXPECT_EQ(param(chat, Endpoint::kChat), "tools");
  chat["tools"] = json::array();
  chat["tool_choice"] = 3;
  EXPECT_EQ(param(chat, Endpoint::kChat), "tool_choice");
  chat["tool_choice"] = "auto";
  chat["top_logprobs"] = 2;  // without logprobs
  EXPECT_EQ(param(chat, Endpoint::kChat), "top_logprobs");
}

TEST(ServerRequestTest, MalformedBodies) {
  CompletionRequest request;
  for (const char* body : {"", "{", "[1]", "\"x\"", "{\"prompt\": \"\xff\xfe\"}", "null"}) {
    const ApiResult error = ParseCompletionRequest(body, Endpoint::kCompletion, kLimits, &request);
    ASSERT_TRUE(error) << body;
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->code, "invalid_json");
  }
  // Nesting: 100 levels parse (and fail later, as a prompt of the wrong type), 101 do not; a
  // bracket inside a string does not count.
  auto nested = [](size_t depth) {
    return "{\"prompt\": \"[[[{{{\", \"x\": " + std::string(depth - 1, '[') +
           std::string(depth - 1, ']') + "}";
  };
  ApiResult error = ParseCompletionRequest(nested(100), Endpoint::kCompletion, kLimits, &request);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "x");
  error = ParseCompletionRequest(nested(101), Endpoint::kCompletion, kLimits, &request);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "invalid_json");
  EXPECT_NE(error->message.find("nested deeper than 100"), std::string::npos) << error->message;
}

TEST(ServerRequestTest, OpenAiDefaultsAndContent) {
  CompletionRequest request;
  json chat = {
      {"messages",
       {{{"role", "user"},
         {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
        {{"role", "assistant"}, {"tool_calls", json::array()}}}},
      {"seed", -3}};
  ASSERT_FALSE(Parse(chat, Endpoint::kChat, &request));
  EXPECT_EQ(request.messages[0]["content"], "ab");
  EXPECT_EQ(request.messages[1]["content"], "");  // null: "" for the templates
  EXPECT_EQ(request.n, 1u);
  EXPECT_EQ(request.max_tokens, 0u);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 1.0f);
  EXPECT_EQ(request.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(request.sampling.top_p, 1.0f);
  EXPECT_FLOAT_EQ(request.sampling.min_p, 0.0f);
  EXPECT_TRUE(request.seeded);
  EXPECT_EQ(request.sampling.seed, uint64_t(-3));
  json biased = Base(Endpoint::kCompletion);
  biased["logit_bias"] = {{"7", -100}};
  ASSERT_FALSE(Parse(biased, Endpoint::kCompletion, &request));
  EXPECT_TRUE(std::isinf(request.sampling.logit_bias.at(7)));
}

TEST(ServerRequestTest, ErrorJsonShape) {
  const json error = json::parse(ErrorJson(InvalidField("n", "bad n")));
  EXPECT_EQ(error["error"]["message"], "bad n");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(error["error"]["param"], "n");
  EXPECT_EQ(error["error"]["code"], "invalid_value");
  const json status = json::parse(ErrorJson(StatusError(429, "full")));
  EXPECT_TRUE(status["error"]["param"].is_null());
  EXPECT_TRUE(status["error"]["code"].is_null());
}

// The chat template sees the messages, `tools` and `tool_choice`; completion prompts of ids are
// checked against the vocabulary; a model without a template refuses chat.
TEST(ServerRequestTest, PromptsThroughTheTemplateAndTokenizer) {
  auto tokenizer = Tokenizer::FromHfFolder(testing::SharedDir() + "/models/story");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const size_t n_vocab = (*tokenizer)->n_vocab();
  auto chat = ChatPrompt::FromSource(
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
      "{% if tools %}tools: {% for t in tools %}{{ t.function.name }} {% endfor %}"
      "choice: {{ tool_choice }}\n{% endif %}assistant:",
      "", "");
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  CompletionRequest request;
  json body = {{"messages", {{{"role", "user"}, {"content", "Where is the cat?"}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "find_cat"}}}}}},
               {"tool_choice", "auto"}};
  ASSERT_FALSE(Parse(body, Endpoint::kChat, &request));
  std::vector<int32_t> ids;
  ASSERT_FALSE(BuildPrompt(request, **tokenizer, &*chat, n_vocab, &ids));
  EncodeOptions encode;
  encode.add_special = true;
  encode.parse_special = true;
  EXPECT_EQ(ids, (*tokenizer)
                     ->Encode("user: Where is the cat?\ntools: find_cat choice: auto\nassistant:",
                              encode));
  ApiResult no_template = BuildPrompt(request, **tokenizer, nullptr, n_vocab, &ids);
  ASSERT_TRUE(no_template);
  EXPECT_EQ(no_template->status, 400);

  json completion = {{"prompt", {1, int(n_vocab)}}};
  ASSERT_FALSE(Parse(completion, Endpoint::kCompletion, &request));
  ApiResult outside = BuildPrompt(request, **tokenizer, nullptr, n_vocab, &ids);
  ASSERT_TRUE(outside);
  EXPECT_EQ(outside->param, "prompt");
  completion["prompt"] = "Once upon a time";
  ASSERT_FALSE(Parse(completion, Endpoint::kCompletion, &request));
  ASSERT_FALSE(BuildPrompt(request, **tokenizer, nullptr, n_vocab, &ids));
  EXPECT_EQ(ids, (*tokenizer)->Encode("Once upon a time", encode));
}

// tool_choice against tools, and the forcing grammar of each format: it accepts a call in that
// format (two with parallel calls), which the format's parser reads back.
TEST(ServerRequestTest, ToolChoiceAndItsGrammar) {
  const json tools = {{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}}},
                           {"required", {"city"}}}}}}},
                      {{"type", "function"}, {"function", {{"name", "ping"}}}}};
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", tools}};
  CompletionRequest request;
  ASSERT_FALSE(Parse(body, Endpoint::kChat, &request));
  EXPECT_EQ(request.tool_mode.mode, ToolChoice::Mode::kAuto);
  EXPECT_TRUE(request.parallel_tool_calls);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  body["parallel_tool_calls"] = false;
  body["reasoning_effort"] = "high";
  body["reasoning_format"] = "deepseek";
  ASSERT_FALSE(Parse(body, Endpoint::kChat, &request));
  EXPECT_EQ(request.tool_mode.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(request.tool_mode.name, "get_weather");
  EXPECT_FALSE(request.parallel_tool_calls);
  EXPECT_EQ(request.reasoning_effort, "high");
  EXPECT_EQ(request.reasoning_format, "auto");
  body["parallel_tool_calls"] = "yes";
  EXPECT_EQ(Parse(body, Endpoint::kChat)->param, "parallel_tool_calls");

  const struct {
    ToolCallFormat format;
    std::string one_call;
    std::string two_calls;
  } cases[] = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\":\"ping\",\"arguments\":{}}\n</tool_call>"},
      {ToolCallFormat::kLlama3, "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\"}}",
       "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\"}}; "
       "{\"name\":\"ping\",\"parameters\":{}}"},
      {ToolCallFormat::kMistral, "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]",
       "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}, "
       "{\"name\":\"ping\",\"arguments\":{}}]"},
      {ToolCallFormat::kGeneric,
       "{\"tool_calls\": [{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]}",
       "{\"tool_calls\": [{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}, "
       "{\"name\":\"ping\",\"arguments\":{}}]}"},
  };
  auto accepts = [](const std::string& gbnf, const std::string& text) {
    auto grammar = CompileGrammar(gbnf);
    if (!grammar.ok()) return false;
    auto matcher = GrammarMatcher::Create(*grammar, nullptr);
    return matcher.ok() && (*matcher)->AcceptBytes(text).ok() && (*matcher)->CanEnd();
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(ToolCallFormatName(c.format));
    ToolChoice named{ToolChoice::Mode::kNamed, "get_weather"};
    auto single = ToolCallGrammar(c.format, tools, named, /*parallel=*/false);
    ASSERT_TRUE(single.ok()) << single.status().message();
    EXPECT_TRUE(accepts(*single, c.one_call)) << *single;
    EXPECT_FALSE(accepts(*single, c.two_calls));
    ToolChoice required{ToolChoice::Mode::kRequired, ""};
    auto any = ToolCallGrammar(c.format, tools, required, /*parallel=*/true);
    ASSERT_TRUE(any.ok()) << any.status().message();
    EXPECT_TRUE(accepts(*any, c.one_call));
    EXPECT_TRUE(accepts(*any, c.two_calls)) << *any;
    const ParsedToolCalls parsed = ParseToolCalls(c.format, c.two_calls, /*final=*/true);
    ASSERT_EQ(parsed.calls.size(), 2u);
    EXPECT_EQ(parsed.calls[0].name, "get_weather");
    EXPECT_EQ(parsed.calls[1].name, "ping");
    EXPECT_EQ(parsed.content, "");
  }

  // Harmony: one call ends the turn, whatever parallel_tool_calls says; the header is part of
  // the grammar and the parser reads the call back.
  const std::string harmony_call =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"city\":\"Paris\"}";
  for (bool parallel : {false, true}) {
    ToolChoice required{ToolChoice::Mode::kRequired, ""};
    auto any = ToolCallGrammar(ToolCallFormat::kHarmony, tools, required, parallel);
    ASSERT_TRUE(any.ok()) << any.status().message();
    EXPECT_TRUE(accepts(*any, harmony_call)) << *any;
    EXPECT_TRUE(accepts(*any,
                        "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>{}"));
    EXPECT_FALSE(accepts(*any, harmony_call + harmony_call));
    EXPECT_FALSE(accepts(*any,  // get_weather requires a city
                         "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                         "<|message|>{}"));
  }
  ToolChoice named{ToolChoice::Mode::kNamed, "ping"};
  auto ping = ToolCallGrammar(ToolCallFormat::kHarmony, tools, named, false);
  ASSERT_TRUE(ping.ok());
  EXPECT_FALSE(accepts(*ping, harmony_call));
  const ParsedToolCalls parsed = ParseToolCalls(ToolCallFormat::kHarmony, harmony_call, true);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");
}

}  // namespace
}  // namespace petrel::server

namespace petrel::server {
namespace {

// /v1/messages: Anthropic's blocks become the template's messages, its tools and tool_choice
// OpenAI's; max_tokens is required; unknown fields are refused.
TEST(ServerRequestTest, AnthropicMessagesBecomeChatMessages) {
  const json body = {
      {"model", "claude"},
      {"max_tokens", 32},
      {"system", {{{"type", "text"}, {"text", "Be "}}, {{"type", "text"}, {"text", "brief."}}}},
      {"tools",
       {{{"name", "get_weather"},
         {"description", "weather"},
         {"input_schema", {{"type", "object"}}}}}},
      {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}, {"disable_parallel_tool_use", true}}},
      {"stop_sequences", {"END"}},
      {"metadata", {{"user_id", "u"}}},
      {"top_k", 7},
      {"messages",
       {{{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "text"}, {"text", "Let me look."}},
           {{"type", "tool_use"},
            {"id", "toolu_1"},
            {"name", "get_weather"},
            {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content",
          {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "22C"}},
           {{"type", "text"}, {"text", "Thanks"}}}}}}}};
  CompletionRequest request;
  ASSERT_FALSE(ParseMessagesRequest(body.dump(), kLimits, &request));
  EXPECT_EQ(request.endpoint, Endpoint::kChat);
  EXPECT_EQ(request.max_tokens, 32u);
  EXPECT_EQ(request.sampling.top_k, 7);
  EXPECT_EQ(request.stop, std::vector<std::string>{"END"});
  const auto& messages = request.messages;
  ASSERT_EQ(messages.size(), 5u) << messages.dump();
  EXPECT_EQ(messages[0]["role"], "system");
  EXPECT_EQ(messages[0]["content"], "Be brief.");
  EXPECT_EQ(messages[1]["content"], "Weather?");
  EXPECT_EQ(messages[2]["role"], "assistant");
  EXPECT_EQ(messages[2]["content"], "Let me look.");
  EXPECT_EQ(messages[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(messages[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(messages[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(messages[3]["role"], "tool");
  EXPECT_EQ(messages[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(messages[3]["content"], "22C");
  EXPECT_EQ(messages[4]["role"], "user");
  EXPECT_EQ(messages[4]["content"], "Thanks");
  EXPECT_EQ(request.tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(request.tool_mode.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(request.tool_mode.name, "get_weather");
  EXPECT_FALSE(request.parallel_tool_calls);

  auto param = [&](json changed) {
    const ApiResult error = ParseMessagesRequest(changed.dump(), kLimits, &request);
    return error ? error->param : std::string("<accepted>");
  };
  json changed = body;
  changed.erase("max_tokens");
  EXPECT_EQ(param(changed), "max_tokens");
  changed = body;
  changed["max_tokens"] = 257;
  EXPECT_EQ(param(changed), "max_tokens");
  changed = body;
  changed["thinking"] = {{"type", "enabled"}};
  EXPECT_EQ(param(changed), "thinking");
  changed = body;
  changed["tool_choice"] = {{"type", "tool"}, {"name", "unknown"}};
  EXPECT_EQ(param(changed), "tool_choice");
  changed = body;
  changed["tool_choice"] = {{"type", "sometimes"}};
  EXPECT_EQ(param(changed), "tool_choice");
  changed = body;
  changed["tools"][0].erase("input_schema");
  EXPECT_EQ(param(changed), "tools[0]");
  changed = body;
  changed["messages"][1]["content"][1]["input"] = "not an object";
  EXPECT_EQ(param(changed), "messages[1].content[1]");
  changed = body;
  changed["messages"][2]["content"][0].erase("tool_use_id");
  EXPECT_EQ(param(changed), "messages[2].content[0].tool_use_id");
  changed = body;
  changed["messages"][0]["content"] = {{{"type", "image"}}};
  EXPECT_EQ(param(changed), "messages[0].content[0]");
  changed = body;
  changed["system"] = 3;
  EXPECT_EQ(param(changed), "system");
  changed = body;
  changed["metadata"] = "x";
  EXPECT_EQ(param(changed), "metadata");
  changed = body;
  changed["stop_sequences"] = {""};
  EXPECT_EQ(param(changed), "stop_sequences");
  changed = body;
  changed["messages"] = json::array();
  EXPECT_EQ(param(changed), "messages");
  EXPECT_EQ(ToolUseId("call_abc"), "toolu_abc");
}

TEST(ServerRequestTest, AnthropicErrorShape) {
  const json error = json::parse(ErrorJson(InvalidField("max_tokens", "'max_tokens' is required"),
                                           ErrorShape::kAnthropic));
  EXPECT_EQ(error, (json{{"type", "error"},
                         {"error",
                          {{"type", "invalid_request_error"},
                           {"message", "'max_tokens' is required"}}}}));
  EXPECT_EQ(json::parse(ErrorJson(StatusError(401, "no"), ErrorShape::kAnthropic))["error"]["type"],
            "authentication_error");
  EXPECT_EQ(json::parse(ErrorJson(StatusError(503, "no"), ErrorShape::kAnthropic))["error"]["type"],
            "overloaded_error");
  EXPECT_EQ(ErrorShapeOfPath("/v1/messages"), ErrorShape::kAnthropic);
  EXPECT_EQ(ErrorShapeOfPath("/v1/messages/count_tokens"), ErrorShape::kAnthropic);
  EXPECT_EQ(ErrorShapeOfPath("/v1/messagesx"), ErrorShape::kOpenAi);
  EXPECT_EQ(ErrorShapeOfPath("/v1/chat/completions"), ErrorShape::kOpenAi);
}

}  // namespace
}  // namespace petrel::server
