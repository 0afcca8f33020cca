// Anthropic's Messages API (/v1/messages) through a real `petrel serve` with Qwen3's chat
// template and a model that can write JSON: the message object, the stream's events in
// Anthropic's order, stop sequences, tool_use forced by tool_choice "any" (input that follows
// the schema) and its tool_result sent back, errors in Anthropic's shape, x-api-key. The
// official @anthropic-ai/sdk client reads all of it too.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
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

Reply Post(httplib::Client& client, const json& body, const httplib::Headers& headers = {}) {
  auto res = client.Post("/v1/messages", headers, body.dump(), "application/json");
  if (!res) return Reply{-1, json()};
  return Reply{res->status, json::parse(res->body, nullptr, false)};
}

struct Event {
  std::string name;  // the `event:` line
  json data;
};

std::vector<Event> PostStream(httplib::Client& client, json body) {
  body["stream"] = true;
  auto res = client.Post("/v1/messages", body.dump(), "application/json");
  std::vector<Event> events;
  if (!res) return events;
  size_t pos = 0;
  for (size_t end; (end = res->body.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string text = res->body.substr(pos, end - pos);
    const size_t newline = text.find('\n');
    if (text.rfind("event: ", 0) != 0 || newline == std::string::npos) continue;
    const std::string data = text.substr(newline + 1);
    if (data.rfind("data: ", 0) != 0) continue;
    events.push_back({text.substr(7, newline - 7), json::parse(data.substr(6), nullptr, false)});
  }
  return events;
}

json Story(int max_tokens = 24) {
  return {{"model", "petrel"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"system", "You tell short stories."},
          {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}};
}

json WeatherTool() {
  return {{"name", "get_weather"},
          {"description", "The weather in a city"},
          {"input_schema",
           {{"type", "object"},
            {"properties",
             {{"city", {{"type", "string"}, {"enum", {"Paris", "London", "Tokyo"}}}},
              {"unit", {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}}}}},
            {"required", {"city", "unit"}},
            {"additionalProperties", false}}}};
}

json AskWeather() {
  return {{"model", "petrel"},
          {"max_tokens", 160},
          {"temperature", 0},
          {"tools", {WeatherTool()}},
          {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
          {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}}};
}

void ExpectWeatherInput(const json& input) {
  ASSERT_TRUE(input.is_object()) << input.dump();
  EXPECT_EQ(input.size(), 2u) << input.dump();
  EXPECT_TRUE(input["city"] == "Paris" || input["city"] == "London" || input["city"] == "Tokyo")
      << input.dump();
  EXPECT_TRUE(input["unit"] == "celsius" || input["unit"] == "fahrenheit") << input.dump();
}

std::string TextOf(const json& content) {
  std::string text;
  for (const json& block : content) {
    if (block["type"] == "text") text += block["text"].get<std::string>();
  }
  return text;
}

class ServerMessagesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(JsonCapableStory());
    server_ =
        new ServerProcess({"-m", *model_, "--parallel", "2", "-c", "1024", "--chat-template-file",
                           SharedDir() + "/chat-templates/Qwen-Qwen3-0.6B.jinja"});
  }
  static void TearDownTestSuite() {
    if (server_->ok()) {
      EXPECT_EQ(server_->Stop(), 0) << server_->log();
    }
    delete server_;
    std::filesystem::remove_all(*model_);
    delete model_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }
  static inline ServerProcess* server_ = nullptr;
  static inline std::string* model_ = nullptr;
};

TEST_F(ServerMessagesTest, WholeMessage) {
  httplib::Client client = server_->Client();
  const Reply reply = Post(client, Story());
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  const json& body = reply.body;
  EXPECT_EQ(body["id"].get<std::string>().rfind("msg_", 0), 0u) << body.dump();
  EXPECT_EQ(body["type"], "message");
  EXPECT_EQ(body["role"], "assistant");
  EXPECT_TRUE(body["model"].is_string());
  ASSERT_TRUE(body["content"].is_array() && !body["content"].empty()) << body.dump();
  EXPECT_EQ(body["content"][0]["type"], "text");
  EXPECT_TRUE(body["stop_reason"] == "end_turn" || body["stop_reason"] == "max_tokens")
      << body.dump();
  EXPECT_TRUE(body["stop_sequence"].is_null());
  EXPECT_GT(body["usage"]["input_tokens"].get<int>(), 5);
  EXPECT_GT(body["usage"]["output_tokens"].get<int>(), 0);
  EXPECT_LE(body["usage"]["output_tokens"].get<int>(), 24);
}

// The events in Anthropic's order, with indexes that match, and the text of the whole message.
TEST_F(ServerMessagesTest, StreamedEventsInAnthropicOrder) {
  httplib::Client client = server_->Client();
  const Reply whole = Post(client, Story());
  ASSERT_EQ(whole.status, 200);
  const std::vector<Event> events = PostStream(client, Story());
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.front().data["message"]["usage"]["input_tokens"],
            whole.body["usage"]["input_tokens"]);
  EXPECT_TRUE(events.front().data["message"]["content"].empty());
  EXPECT_EQ(events.back().name, "message_stop");
  EXPECT_EQ(events[events.size() - 2].name, "message_delta");
  const json& delta = events[events.size() - 2].data;
  EXPECT_EQ(delta["delta"]["stop_reason"], whole.body["stop_reason"]);
  EXPECT_EQ(delta["usage"]["output_tokens"], whole.body["usage"]["output_tokens"]);
  std::string text;
  int open = -1;
  int next = 0;
  for (const Event& event : events) {
    EXPECT_EQ(event.data["type"], event.name);  // each event's data names its type
    if (event.name == "content_block_start") {
      EXPECT_EQ(open, -1);
      EXPECT_EQ(event.data["index"], next);
      open = next;
    } else if (event.name == "content_block_delta") {
      EXPECT_EQ(event.data["index"], open);
      if (event.data["delta"]["type"] == "text_delta")
        text += event.data["delta"]["text"].get<std::string>();
    } else if (event.name == "content_block_stop") {
      EXPECT_EQ(event.data["index"], open);
      open = -1;
      ++next;
    }
  }
  EXPECT_EQ(open, -1);
  EXPECT_EQ(text, TextOf(whole.body["content"]));
}

TEST_F(ServerMessagesTest, StopSequence) {
  httplib::Client client = server_->Client();
  const Reply whole = Post(client, Story(48));
  ASSERT_EQ(whole.status, 200);
  const std::string text = TextOf(whole.body["content"]);
  ASSERT_GT(text.size(), 12u) << text;
  const std::string stop = text.substr(6, 4);
  json body = Story(48);
  body["stop_sequences"] = {stop};
  const Reply stopped = Post(client, body);
  ASSERT_EQ(stopped.status, 200) << stopped.body.dump();
  EXPECT_EQ(stopped.body["stop_reason"], "stop_sequence") << stopped.body.dump();
  EXPECT_EQ(stopped.body["stop_sequence"], stop);
  EXPECT_EQ(TextOf(stopped.body["content"]), text.substr(0, text.find(stop)));
}

TEST_F(ServerMessagesTest, ToolUseAndItsResult) {
  httplib::Client client = server_->Client();
  const Reply reply = Post(client, AskWeather());
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  EXPECT_EQ(reply.body["stop_reason"], "tool_use") << reply.body.dump();
  json use;
  for (const json& block : reply.body["content"]) {
    if (block["type"] == "tool_use") use = block;
  }
  ASSERT_TRUE(use.is_object()) << reply.body.dump();
  EXPECT_EQ(use["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(use["name"], "get_weather");
  ExpectWeatherInput(use["input"]);

  // Streamed: the tool_use block's input arrives as input_json_delta.
  std::string partial;
  std::string stop_reason;
  for (const Event& event : PostStream(client, AskWeather())) {
    if (event.name == "content_block_start") {
      if (event.data["content_block"]["type"] == "tool_use") {
        EXPECT_EQ(event.data["content_block"]["name"], "get_weather");
        EXPECT_EQ(event.data["content_block"]["input"], json::object());
      }
    } else if (event.name == "content_block_delta" &&
               event.data["delta"]["type"] == "input_json_delta") {
      partial += event.data["delta"]["partial_json"].get<std::string>();
    } else if (event.name == "message_delta") {
      stop_reason = event.data["delta"]["stop_reason"].get<std::string>();
    }
  }
  EXPECT_EQ(stop_reason, "tool_use");
  EXPECT_EQ(json::parse(partial, nullptr, false), use["input"]) << partial;

  // The call and its result back through the template, then an answer in text.
  json next = AskWeather();
  next.erase("tool_choice");
  next["max_tokens"] = 8;
  next["messages"].push_back({{"role", "assistant"}, {"content", reply.body["content"]}});
  next["messages"].push_back(
      {{"role", "user"},
       {"content",
        {{{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "22 degrees"}}}}});
  next["tool_choice"] = {{"type", "none"}};
  const Reply answer = Post(client, next);
  ASSERT_EQ(answer.status, 200) << answer.body.dump();
  for (const json& block : answer.body["content"]) EXPECT_EQ(block["type"], "text");
}

TEST_F(ServerMessagesTest, ErrorsInAnthropicShape) {
  httplib::Client client = server_->Client();
  auto expect_error = [&](const json& body, const std::string& mention) {
    const Reply reply = Post(client, body);
    EXPECT_EQ(reply.status, 400) << body.dump();
    EXPECT_EQ(reply.body["type"], "error") << reply.body.dump();
    EXPECT_EQ(reply.body["error"]["type"], "invalid_request_error") << reply.body.dump();
    EXPECT_NE(reply.body["error"]["message"].get<std::string>().find(mention), std::string::npos)
        << reply.body.dump();
  };
  json body = Story();
  body.erase("max_tokens");
  expect_error(body, "max_tokens");
  body = Story();
  body["frobnicate"] = 1;
  expect_error(body, "frobnicate");
  body = Story();
  body["messages"][0]["role"] = "system";
  expect_error(body, "messages[0].role");
  body = Story();
  body["messages"][0]["content"] = {{{"type", "image"}, {"source", json::object()}}};
  expect_error(body, "messages[0].content[0]");
  body = Story();
  body["tool_choice"] = {{"type", "any"}};
  expect_error(body, "tool_choice");
  body = Story();
  body["temperature"] = -1;
  expect_error(body, "temperature");
  const Reply broken = Post(client, json("not an object"));
  EXPECT_EQ(broken.status, 400);
  EXPECT_EQ(broken.body["type"], "error");
  auto missing = client.Post("/v1/messages/count_tokens", Story().dump(), "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body, nullptr, false)["error"]["type"], "not_found_error")
      << missing->body;
}

TEST(ServerMessagesAuthTest, XApiKeyOrBearer) {
  ServerProcess server({"-m", StoryHf(), "-c", "256", "--api-key", "sesame", "--chat-template-file",
                        SharedDir() + "/chat-templates/Qwen-Qwen3-0.6B.jinja"});
  ASSERT_TRUE(server.ok()) << server.log();
  httplib::Client client = server.Client();
  json body = Story(2);
  const Reply none = Post(client, body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["type"], "error") << none.body.dump();
  EXPECT_EQ(none.body["error"]["type"], "authentication_error");
  EXPECT_EQ(Post(client, body, {{"x-api-key", "wrong"}}).status, 401);
  EXPECT_EQ(Post(client, body, {{"x-api-key", "sesame"}}).status, 200);
  EXPECT_EQ(Post(client, body, {{"Authorization", "Bearer sesame"}}).status, 200);
  // x-api-key opens the OpenAI routes too.
  auto res = client.Get("/v1/models", {{"x-api-key", "sesame"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST_F(ServerMessagesTest, OfficialAnthropicClient) {
  std::string skip;
  const std::string dir = OpenAiClientDir(&skip);
  if (dir.empty()) GTEST_SKIP() << skip;
  const json result = RunOpenAiScript(dir, "messages.mjs", server_->port());
  ASSERT_TRUE(result.is_object()) << "see " << dir << "/messages.mjs.json.log";
  EXPECT_EQ(result["plain"]["type"], "message") << result.dump();
  EXPECT_EQ(result["plain"]["role"], "assistant");
  EXPECT_FALSE(result["plain"]["text"].get<std::string>().empty()) << result.dump();
  // Greedy: the streamed text is the whole message's, raw and through MessageStream.
  EXPECT_EQ(result["stream"]["text"], result["plain"]["text"]) << result.dump();
  EXPECT_EQ(result["message_stream"]["text"], result["plain"]["text"]) << result.dump();
  EXPECT_EQ(result["message_stream"]["stop_reason"], result["plain"]["stop_reason"]);
  EXPECT_EQ(result["message_stream"]["usage"]["output_tokens"],
            result["plain"]["usage"]["output_tokens"]);
  const json& events = result["stream"]["events"];
  ASSERT_GE(events.size(), 4u) << result.dump();
  EXPECT_EQ(events.front(), "message_start");
  EXPECT_EQ(events.back(), "message_stop");
  EXPECT_EQ(result["tool"]["stop_reason"], "tool_use") << result.dump();
  EXPECT_EQ(result["tool"]["name"], "get_weather");
  ExpectWeatherInput(result["tool"]["input"]);
  EXPECT_EQ(result["tool_stream"]["stop_reason"], "tool_use") << result.dump();
  EXPECT_EQ(result["tool_stream"]["input"], result["tool"]["input"]);
  EXPECT_TRUE(result["answer"]["stop_reason"].is_string()) << result.dump();
  EXPECT_EQ(result["missing_max_tokens"]["status"], 400) << result.dump();
  EXPECT_EQ(result["missing_max_tokens"]["body"]["type"], "error") << result.dump();
  EXPECT_EQ(result["missing_max_tokens"]["body"]["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace petrel::testing
