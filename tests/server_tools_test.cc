// Tool calls and reasoning through a real `petrel serve` with a real model's chat template
// (Qwen3's, from ../shared/chat-templates): `tool_choice` "required" and a named function make
// the grammar write a call whose arguments parse against the tool's schema, returned as
// `tool_calls` (whole and streamed as OpenAI's deltas); the call and its result go back through
// the template; "none" leaves text alone; a think block comes back as `reasoning_content`; bad
// tool requests are 400s naming the field. The official openai npm client reads the calls too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "util/cli_runner.h"
#include "util/json_capable_story.h"
#include "util/openai_client.h"
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

struct Reply {
  int status = 0;
  json body;
};

Reply Post(httplib::Client& client, const json& body) {
  auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!res) return Reply{-1, json()};
  return Reply{res->status, json::parse(res->body, nullptr, false)};
}

// The data: events of a streamed reply, [DONE] left out.
std::vector<json> PostStream(httplib::Client& client, json body) {
  body["stream"] = true;
  auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  std::vector<json> chunks;
  if (!res) return chunks;
  size_t pos = 0;
  for (size_t end; (end = res->body.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string event = res->body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
    chunks.push_back(json::parse(event.substr(6), nullptr, false));
  }
  return chunks;
}

json WeatherTools() {
  const json city = {{"type", "string"}, {"enum", {"Paris", "London", "Tokyo"}}};
  const json unit = {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}};
  return json::array({{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", city}, {"unit", unit}}},
                           {"required", {"city", "unit"}},
                           {"additionalProperties", false}}}}}},
                      {{"type", "function"},
                       {"function",
                        {{"name", "get_time"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", city}}},
                           {"required", {"city"}},
                           {"additionalProperties", false}}}}}}});
}

json Ask(const json& tool_choice) {
  json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
               {"tools", WeatherTools()},
               {"max_tokens", 160},
               {"temperature", 0},
               // One call: the grammar then ends the reply (with parallel calls a small model
               // may go on writing calls until max_tokens cuts the last one).
               {"parallel_tool_calls", false}};
  if (!tool_choice.is_null()) body["tool_choice"] = tool_choice;
  return body;
}

// Arguments that parse and follow the schema (enum values, the required keys, no others).
void ExpectArguments(const std::string& name, const std::string& arguments) {
  const json args = json::parse(arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << arguments;
  const std::vector<std::string> cities = {"Paris", "London", "Tokyo"};
  ASSERT_TRUE(args.contains("city")) << arguments;
  EXPECT_NE(std::find(cities.begin(), cities.end(), args["city"]), cities.end()) << arguments;
  if (name == "get_weather") {
    EXPECT_EQ(args.size(), 2u) << arguments;
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << arguments;
  } else {
    EXPECT_EQ(name, "get_time");
    EXPECT_EQ(args.size(), 1u) << arguments;
  }
}

class ServerToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    template_ = new std::string(SharedDir() + "/chat-templates/Qwen-Qwen3-0.6B.jinja");
    model_ = new std::string(JsonCapableStory());
    server_ = new ServerProcess(
        {"-m", *model_, "--parallel", "4", "-c", "1024", "--chat-template-file", *template_});
  }
  static void TearDownTestSuite() {
    if (server_->ok()) {
      EXPECT_EQ(server_->Stop(), 0) << server_->log();
    }
    delete server_;
    delete template_;
    std::filesystem::remove_all(*model_);
    delete model_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }
  static inline ServerProcess* server_ = nullptr;
  static inline std::string* template_ = nullptr;
  static inline std::string* model_ = nullptr;
};

TEST_F(ServerToolsTest, RequiredCallIsParsedAndItsResultGoesBack) {
  httplib::Client client = server_->Client();
  const Reply reply = Post(client, Ask("required"));
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  const json& choice = reply.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << reply.body.dump();
  const json& message = choice["message"];
  EXPECT_TRUE(message["content"].is_null()) << message.dump();
  ASSERT_TRUE(message["tool_calls"].is_array() && !message["tool_calls"].empty()) << message.dump();
  for (const json& call : message["tool_calls"]) {
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    ExpectArguments(call["function"]["name"], call["function"]["arguments"]);
  }
  // The call and its result back through the template, then an answer in text.
  json next = Ask("none");
  next["messages"].push_back(message);
  next["messages"].push_back({{"role", "tool"},
                              {"tool_call_id", message["tool_calls"][0]["id"]},
                              {"content", "{\"temperature\": 22}"}});
  next["max_tokens"] = 8;
  const Reply answer = Post(client, next);
  ASSERT_EQ(answer.status, 200) << answer.body.dump();
  EXPECT_TRUE(answer.body["choices"][0]["message"]["content"].is_string());
  EXPECT_FALSE(answer.body["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ServerToolsTest, NamedFunctionAndSingleCall) {
  httplib::Client client = server_->Client();
  const json body = Ask({{"type", "function"}, {"function", {{"name", "get_time"}}}});
  const Reply reply = Post(client, body);
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  const json& calls = reply.body["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << reply.body.dump();
  EXPECT_EQ(calls[0]["function"]["name"], "get_time");
  ExpectArguments("get_time", calls[0]["function"]["arguments"]);
}

// Sampled (not greedy) calls under "required": the arguments always parse against the schema.
TEST_F(ServerToolsTest, RequiredArgumentsAlwaysParse) {
  // 100 sampled replies at a high temperature, four at a time (the server's --parallel).
  constexpr int kSamples = 100, kClients = 4;
  std::vector<std::thread> clients;
  for (int first = 0; first < kClients; ++first) {
    clients.emplace_back([first] {
      httplib::Client client = server_->Client();
      for (int seed = first; seed < kSamples; seed += kClients) {
        json body = Ask("required");
        body["temperature"] = 1.5;
        body["seed"] = seed;
        body["parallel_tool_calls"] = seed % 2 == 0;  // with parallel calls the last may be cut
        body["max_tokens"] = 200;
        const Reply reply = Post(client, body);
        EXPECT_EQ(reply.status, 200) << reply.body.dump();
        if (reply.status != 200) continue;
        const json& calls = reply.body["choices"][0]["message"]["tool_calls"];
        EXPECT_TRUE(calls.is_array() && !calls.empty()) << "seed " << seed << " " << reply.body.dump();
        if (!calls.is_array()) continue;
        for (const json& call : calls) {
          ExpectArguments(call["function"]["name"], call["function"]["arguments"]);
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
}

// Streamed: a delta with index, id, type and name (arguments ""), then the arguments; the
// concatenated fragments are the whole reply's arguments.
TEST_F(ServerToolsTest, StreamedCallDeltas) {
  httplib::Client client = server_->Client();
  const Reply whole = Post(client, Ask("required"));
  ASSERT_EQ(whole.status, 200) << whole.body.dump();
  const std::vector<json> chunks = PostStream(client, Ask("required"));
  ASSERT_FALSE(chunks.empty());
  std::map<int, json> calls;  // index -> {id, name, arguments}
  std::string finish;
  std::string content;
  for (const json& chunk : chunks) {
    const json& choice = chunk["choices"][0];
    if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
    const json& delta = choice["delta"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
    if (!delta.contains("tool_calls")) continue;
    for (const json& call : delta["tool_calls"]) {
      const int index = call["index"];
      if (call.contains("id")) {
        ASSERT_FALSE(calls.count(index)) << "second head for call " << index;
        EXPECT_EQ(call["type"], "function");
        EXPECT_EQ(call["function"]["arguments"], "");
        calls[index] = {{"id", call["id"]}, {"name", call["function"]["name"]}, {"arguments", ""}};
      } else {
        ASSERT_TRUE(calls.count(index)) << "arguments before the head of call " << index;
        calls[index]["arguments"] = calls[index]["arguments"].get<std::string>() +
                                    call["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(content, "");
  const json& expected = whole.body["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), expected.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[int(i)]["name"], expected[i]["function"]["name"]);
    EXPECT_EQ(calls[int(i)]["arguments"], expected[i]["function"]["arguments"]);
  }
}

// tool_choice "none", and "auto" where the model writes no call: plain content.
TEST_F(ServerToolsTest, NoneAndAutoLeaveTextAlone) {
  httplib::Client client = server_->Client();
  for (const char* mode : {"none", "auto"}) {
    json body = Ask(mode);
    body["max_tokens"] = 12;
    const Reply reply = Post(client, body);
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    const json& message = reply.body["choices"][0]["message"];
    EXPECT_TRUE(message["content"].is_string()) << mode;
    EXPECT_FALSE(message.contains("tool_calls")) << mode;
    EXPECT_NE(reply.body["choices"][0]["finish_reason"], "tool_calls");
  }
}

// A think block (written here by a grammar) comes back as reasoning_content, whole and streamed;
// reasoning_format "none" leaves it in the content.
TEST_F(ServerToolsTest, ThinkBlockIsReasoningContent) {
  httplib::Client client = server_->Client();
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"grammar", "root ::= \"<think>\\nthe cat\\n</think>\\n\\nA dog.\""},
               {"max_tokens", 64},
               {"temperature", 0}};
  Reply reply = Post(client, body);
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  EXPECT_EQ(reply.body["choices"][0]["message"]["reasoning_content"], "the cat");
  EXPECT_EQ(reply.body["choices"][0]["message"]["content"], "A dog.");
  std::string reasoning, content;
  for (const json& chunk : PostStream(client, body)) {
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
  }
  EXPECT_EQ(reasoning, "the cat");
  EXPECT_EQ(content, "A dog.");
  body["reasoning_format"] = "none";
  reply = Post(client, body);
  EXPECT_EQ(reply.body["choices"][0]["message"]["content"], "<think>\nthe cat\n</think>\n\nA dog.");
  EXPECT_FALSE(reply.body["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(ServerToolsTest, BadToolRequestsAre400s) {
  httplib::Client client = server_->Client();
  auto expect_400 = [&](const json& body, const std::string& param) {
    const Reply reply = Post(client, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " -> " << reply.body.dump();
    EXPECT_EQ(reply.body["error"]["param"], param) << reply.body.dump();
  };
  expect_400(Ask({{"type", "function"}, {"function", {{"name", "nope"}}}}), "tool_choice");
  expect_400(Ask("sometimes"), "tool_choice");
  json no_tools = Ask("required");
  no_tools.erase("tools");
  expect_400(no_tools, "tool_choice");
  json bad_tool = Ask("auto");
  bad_tool["tools"] = json::array({{{"type", "function"}, {"function", {{"parameters", 3}}}}});
  expect_400(bad_tool, "tools[0]");
  json unsupported = Ask("required");
  unsupported["tools"][0]["function"]["parameters"]["properties"]["city"] = {{"type", "array"},
                                                                             {"uniqueItems", true}};
  expect_400(unsupported, "tools");
  json with_grammar = Ask("required");
  with_grammar["grammar"] = "root ::= \"x\"";
  expect_400(with_grammar, "tool_choice");
  json effort = Ask("auto");
  effort["reasoning_effort"] = "extreme";
  expect_400(effort, "reasoning_effort");
  json format = Ask("auto");
  format["reasoning_format"] = "xml";
  expect_400(format, "reasoning_format");
  // Recursive schemas become recursive rules; many tools are refused past the limit.
  json recursive = Ask("required");
  recursive["tools"][1]["function"]["parameters"] = {{"type", "object"},
                                                     {"properties", {{"child", {{"$ref", "#"}}}}}};
  EXPECT_EQ(Post(client, recursive).status, 200);
  json many = Ask("auto");
  for (int i = 0; i < 10000; ++i) many["tools"].push_back(many["tools"][0]);
  expect_400(many, "tools");
}

// Tool schemas a client may get wrong or make hostile: each a 400 naming the field (and the
// limit), answered at once, and the server answers a normal request afterwards.
TEST_F(ServerToolsTest, HostileToolSchemasAre400s) {
  httplib::Client client = server_->Client();
  auto expect_400 = [&](const json& body, const std::string& param, const std::string& words) {
    const auto start = std::chrono::steady_clock::now();
    const Reply reply = Post(client, body);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(reply.status, 400) << reply.body.dump().substr(0, 400);
    EXPECT_EQ(reply.body["error"]["param"], param) << reply.body.dump().substr(0, 400);
    EXPECT_NE(reply.body["error"]["message"].get<std::string>().find(words), std::string::npos)
        << reply.body.dump().substr(0, 400);
    EXPECT_LT(seconds, 5.0) << param;
  };
  const std::string at = "tools[1].function.parameters";
  for (const char* mode : {"auto", "required"}) {
    SCOPED_TRACE(mode);
    json body = Ask(mode);
    body["tools"][1]["function"]["parameters"] = "object";
    expect_400(body, at, "JSON schema object");
    body["tools"][1]["function"]["parameters"] = {{"type", "object"}, {"properties", 5}};
    expect_400(body, at, "properties' must be an object");
    body["tools"][1]["function"]["parameters"] = {{"type", "object"},
                                                  {"properties", {{"city", "string"}}}};
    expect_400(body, at, "properties.city");
    body["tools"][1]["function"]["parameters"] = {{"type", 7}};
    expect_400(body, at, "type");
    body["tools"][1]["function"]["parameters"] = {{"type", "object"}, {"required", "city"}};
    expect_400(body, at, "required");
    // Nested deeper than the templates and the grammar converter are allowed to walk; and so
    // deep that the body itself is refused before parsing ("properties" sorts before "type":
    // a key after a large member, the slow case of ordered JSON objects).
    json deep = {{"type", "string"}};
    for (int i = 0; i < 5000; ++i) {
      deep = {{"type", "object"}, {"properties", {{"x", std::move(deep)}}}};
      if (i == 40) {
        body["tools"][1]["function"]["parameters"] = deep;
        expect_400(body, at, "nested deeper than 64");
      }
    }
    body["tools"][1]["function"]["parameters"] = deep;
    const auto start = std::chrono::steady_clock::now();
    const Reply too_deep = Post(client, body);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              5.0);
    EXPECT_EQ(too_deep.status, 400);
    EXPECT_NE(too_deep.body["error"]["message"].get<std::string>().find(
                  "nested deeper than 100 levels"),
              std::string::npos)
        << too_deep.body.dump();
    // 10,000 functions: refused before any is looked at.
    json many = Ask(mode);
    for (int i = 0; i < 10000; ++i) many["tools"].push_back(many["tools"][0]);
    expect_400(many, "tools", "more than 128 functions");
  }
  // Keywords the grammar cannot enforce and $ref cycles that no character breaks: refused
  // when a grammar is made ("required"); "auto" hands the schema to the template only.
  json unsupported = Ask("required");
  unsupported["tools"][1]["function"]["parameters"]["properties"]["city"] = {
      {"type", "string"}, {"pattern", "^(a+)+$"}, {"contentEncoding", "base64"}};
  const Reply refused = Post(client, unsupported);
  EXPECT_EQ(refused.status, 400) << refused.body.dump();
  json cycle = Ask("required");
  cycle["tools"][1]["function"]["parameters"] = {
      {"$ref", "#/$defs/a"},
      {"$defs", {{"a", {{"$ref", "#/$defs/b"}}}, {"b", {{"$ref", "#/$defs/a"}}}}}};
  expect_400(cycle, "tools", "cycle");
  json mutual = Ask("required");  // recursion through properties: a recursive rule
  mutual["tools"][1]["function"]["parameters"] = {
      {"type", "object"},
      {"properties", {{"node", {{"$ref", "#/$defs/node"}}}}},
      {"$defs",
       {{"node",
         {{"type", "object"},
          {"properties", {{"next", {{"$ref", "#/$defs/node"}}}}}}}}}};
  mutual["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  mutual["max_tokens"] = 24;
  const Reply recursive = Post(client, mutual);
  EXPECT_EQ(recursive.status, 200) << recursive.body.dump();
  for (const char* mode : {"auto", "required"}) {
    json cyclic_auto = cycle;
    cyclic_auto["tool_choice"] = mode;
    cyclic_auto["max_tokens"] = 4;
    EXPECT_EQ(Post(client, cyclic_auto).status, std::string(mode) == "auto" ? 200 : 400);
  }
  EXPECT_EQ(Post(client, Ask("required")).status, 200);
}

// Replies the parsers must survive: a call opened and never closed (cut by max_tokens, or ended
// by the grammar inside its JSON) stays content with a "length"/"stop" finish, never
// "tool_calls"; a think block never closed is all reasoning_content. Whole and streamed alike.
TEST_F(ServerToolsTest, UnclosedCallsAndThinkBlocks) {
  httplib::Client client = server_->Client();
  struct Case {
    const char* grammar;
    int max_tokens;
    const char* finish;
    std::string content_prefix;
    std::string reasoning_prefix;
  };
  const Case cases[] = {
      {"root ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {\" [a-z ]{300}",
       40, "length", "<tool_call>\n{\"name\": \"get_weather\"", ""},
      {"root ::= \"<tool_call>\\n{\\\"name\\\"\"", 64, "stop", "<tool_call>\n{\"name\"", ""},
      {"root ::= \"<think>\\nthe cat\" [a-z ]{300}", 40, "length", "", "the cat"},
      {"root ::= \"<think>\\nthe cat <tool_call>\"", 64, "stop", "", "the cat <tool_call>"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.grammar);
    json body = Ask("auto");
    body["grammar"] = c.grammar;
    body["max_tokens"] = c.max_tokens;
    const Reply reply = Post(client, body);
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    const json& choice = reply.body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], c.finish) << reply.body.dump();
    const json& message = choice["message"];
    EXPECT_FALSE(message.contains("tool_calls")) << message.dump();
    const std::string content = message["content"].is_string() ? message["content"] : "";
    const std::string reasoning =
        message.contains("reasoning_content") ? message["reasoning_content"] : "";
    EXPECT_EQ(content.rfind(c.content_prefix, 0), 0u) << message.dump();
    EXPECT_EQ(reasoning.rfind(c.reasoning_prefix, 0), 0u) << message.dump();
    if (c.content_prefix.empty()) {
      EXPECT_EQ(content, "") << message.dump();
    }
    std::string streamed_content, streamed_reasoning, finish;
    for (const json& chunk : PostStream(client, body)) {
      const json& streamed = chunk["choices"][0];
      if (streamed["finish_reason"].is_string()) finish = streamed["finish_reason"];
      const json& delta = streamed["delta"];
      EXPECT_FALSE(delta.contains("tool_calls")) << delta.dump();
      if (delta.contains("content") && delta["content"].is_string()) {
        streamed_content += delta["content"];
      }
      if (delta.contains("reasoning_content")) streamed_reasoning += delta["reasoning_content"];
    }
    EXPECT_EQ(finish, c.finish);
    EXPECT_EQ(streamed_content, content);
    EXPECT_EQ(streamed_reasoning, reasoning);
  }
  EXPECT_EQ(Post(client, Ask("required")).status, 200);
}

// gpt-oss's harmony template: channels written by a grammar come back as reasoning_content and
// content, whole and streamed; "required" makes the grammar write a commentary message to a
// function, read back as a call; an analysis never closed is all reasoning.
TEST(ServerHarmonyTest, ChannelsAndForcedCalls) {
  const std::string model = JsonCapableStory();
  ServerProcess server({"-m", model, "--parallel", "2", "-c", "1024", "--chat-template-file",
                        SharedDir() + "/chat-templates/openai-gpt-oss-120b.jinja"});
  ASSERT_TRUE(server.ok()) << server.log();
  httplib::Client client = server.Client();
  auto collect = [&](const json& body) {
    json whole = Post(client, body).body;
    std::string reasoning, content;
    for (const json& chunk : PostStream(client, body)) {
      const json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
      if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
    }
    return std::make_tuple(whole, reasoning, content);
  };
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"grammar",
                "root ::= \"<|channel|>analysis<|message|>the cat<|end|><|start|>assistant"
                "<|channel|>final<|message|>A dog.\""},
               {"max_tokens", 200},
               {"temperature", 0}};
  auto [whole, reasoning, content] = collect(body);
  ASSERT_TRUE(whole.contains("choices")) << whole.dump();
  EXPECT_EQ(whole["choices"][0]["message"]["reasoning_content"], "the cat") << whole.dump();
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "A dog.") << whole.dump();
  EXPECT_EQ(reasoning, "the cat");
  EXPECT_EQ(content, "A dog.");

  body["grammar"] = "root ::= \"<|channel|>analysis<|message|>the cat\" [a-z ]{300}";
  body["max_tokens"] = 30;
  std::tie(whole, reasoning, content) = collect(body);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["choices"][0]["message"]["reasoning_content"].get<std::string>().rfind(
                "the cat", 0),
            0u)
      << whole.dump();
  EXPECT_EQ(reasoning, whole["choices"][0]["message"]["reasoning_content"]);
  EXPECT_EQ(content, "");

  for (const json& choice : {json("required"), json{{"type", "function"},
                                                    {"function", {{"name", "get_time"}}}}}) {
    SCOPED_TRACE(choice.dump());
    json ask = Ask(choice);
    for (json& tool : ask["tools"]) tool["function"]["description"] = "weather";  // gpt-oss reads it
    const Reply reply = Post(client, ask);
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    EXPECT_EQ(reply.body["choices"][0]["finish_reason"], "tool_calls") << reply.body.dump();
    const json& calls = reply.body["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << reply.body.dump();
    ExpectArguments(calls[0]["function"]["name"], calls[0]["function"]["arguments"]);
    if (choice.is_object()) {
      EXPECT_EQ(calls[0]["function"]["name"], "get_time");
    }
  }
  EXPECT_EQ(server.Stop(), 0) << server.log();
  std::filesystem::remove_all(model);
}

TEST_F(ServerToolsTest, OfficialOpenAiClientReadsToolCalls) {
  std::string skip;
  const std::string dir = OpenAiClientDir(&skip);
  if (dir.empty()) GTEST_SKIP() << skip;
  const json result = RunOpenAiScript(dir, "tools.mjs", server_->port());
  ASSERT_TRUE(result.is_object()) << "see " << dir << "/tools.mjs.json.log";
  for (const char* mode : {"plain", "stream"}) {
    const json& call = result[mode];
    EXPECT_EQ(call["finish_reason"], "tool_calls") << result.dump();
    EXPECT_EQ(call["name"], "get_weather") << result.dump();
    ExpectArguments("get_weather", call["arguments"]);
  }
  EXPECT_TRUE(result["answer"].is_string()) << result.dump();
}

}  // namespace
}  // namespace petrel::testing
