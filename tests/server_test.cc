// `petrel serve` end to end: a real server on a free loopback port, spoken to over HTTP. Greedy
// text matches `petrel run`, every error path answers OpenAI's error shape with the right status,
// a client that disconnects frees its KV blocks, and 16 concurrent greedy requests give what
// each gives alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "util/cli_runner.h"
#include "util/openai_client.h"
#include "util/pty_process.h"  // WriteChatTemplate
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;
constexpr const char* kKey = "test-key";

httplib::Headers Auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

struct Reply {
  int status = 0;
  json body;
};

Reply Post(httplib::Client& client, const std::string& path, const std::string& body,
           const httplib::Headers& headers = Auth()) {
  auto res = client.Post(path.c_str(), headers, body, "application/json");
  if (!res) return Reply{-1, json()};
  return Reply{res->status, json::parse(res->body, nullptr, false)};
}

Reply Post(httplib::Client& client, const std::string& path, const json& body) {
  return Post(client, path, body.dump());
}

struct Streamed {
  int status = 0;
  std::vector<json> chunks;  // every data: event but [DONE]
  bool done = false;         // data: [DONE] came
  std::string text;          // the content of choice 0, concatenated
};

// POSTs `body` and reads the SSE stream; `keep_reading(chunks so far)` false disconnects.
Streamed PostStream(httplib::Client& client, const std::string& path, const json& body,
                    const std::function<bool(size_t)>& keep_reading = nullptr) {
  Streamed out;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = Auth();
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // a comment (keep-alive)
      const std::string data = event.substr(6);
      if (data == "[DONE]") {
        out.done = true;
        continue;
      }
      json chunk = json::parse(data, nullptr, false);
      for (const json& choice : chunk.value("choices", json::array())) {
        if (choice["index"] != 0) continue;
        if (choice.contains("text")) out.text += choice["text"].get<std::string>();
        if (choice.contains("delta") && choice["delta"].contains("content") &&
            choice["delta"]["content"].is_string()) {
          out.text += choice["delta"]["content"].get<std::string>();
        }
      }
      out.chunks.push_back(std::move(chunk));
    }
    return !keep_reading || keep_reading(out.chunks.size());
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  client.send(req, res, error);
  out.status = res.status;
  return out;
}

// What `petrel run` prints for a greedy continuation, less the newline it ends the output with.
std::string RunText(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run", "-m", StoryHf(), "--temp", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Output output = Petrel(args);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  std::string text = output.out;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// One gauge or counter from /metrics.
double Metric(httplib::Client& client, const std::string& name) {
  auto res = client.Get("/metrics", Auth());
  if (!res) return -1;
  const std::regex line("(^|\n)" + name + " ([0-9.e+-]+)");
  std::smatch match;
  if (!std::regex_search(res->body, match, line)) return -1;
  return std::stod(match[2]);
}

void ExpectError(const Reply& reply, int status, const std::string& param = "") {
  EXPECT_EQ(reply.status, status) << reply.body.dump();
  ASSERT_TRUE(reply.body.is_object() && reply.body.contains("error")) << reply.body.dump();
  const json& error = reply.body["error"];
  EXPECT_TRUE(error["message"].is_string() && !error["message"].get<std::string>().empty());
  EXPECT_TRUE(error["type"].is_string());
  EXPECT_TRUE(error.contains("code"));
  if (!param.empty()) {
    EXPECT_EQ(error["param"], param) << reply.body.dump();
  } else {
    EXPECT_TRUE(error.contains("param"));
  }
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    template_path_ = new std::string(WriteChatTemplate("server"));
    server_ = new ServerProcess({"-m", StoryHf(), "--parallel", "16", "-c", "256", "--api-key",
                                 kKey, "--chat-template-file", *template_path_, "--max-body-kib",
                                 "64", "-t", "2"});
  }
  static void TearDownTestSuite() {
    if (server_->ok()) {
      EXPECT_EQ(server_->Stop(), 0) << server_->log();
    }
    delete server_;
    std::remove(template_path_->c_str());
    delete template_path_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }

  static inline ServerProcess* server_ = nullptr;
  static inline std::string* template_path_ = nullptr;
};

TEST_F(ServerTest, HealthModelsAndTokenizer) {
  httplib::Client client = server_->Client();
  auto health = client.Get("/health");  // no key needed
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = client.Get("/v1/models", Auth());
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "story");
  const Reply tokens = Post(client, "/tokenize", json{{"content", "Once upon a time"}});
  ASSERT_EQ(tokens.status, 200) << tokens.body.dump();
  ASSERT_GT(tokens.body["tokens"].size(), 0u);
  const Reply text = Post(client, "/detokenize", json{{"tokens", tokens.body["tokens"]}});
  ASSERT_EQ(text.status, 200);
  EXPECT_EQ(text.body["content"], "Once upon a time");
}

TEST_F(ServerTest, CompletionMatchesPetrelRun) {
  const std::string expected = RunText({"-p", "Once upon a time", "-n", "24"});
  httplib::Client client = server_->Client();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  const Reply whole = Post(client, "/v1/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body.dump();
  EXPECT_EQ(whole.body["object"], "text_completion");
  EXPECT_EQ(whole.body["choices"][0]["text"], expected);
  EXPECT_EQ(whole.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole.body["usage"]["completion_tokens"], 24);

  json streaming = body;
  streaming["stream"] = true;
  streaming["stream_options"] = {{"include_usage", true}};
  const Streamed stream = PostStream(client, "/v1/completions", streaming);
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.done);
  EXPECT_EQ(stream.text, expected);
  ASSERT_GE(stream.chunks.size(), 3u);
  // Several chunks (tokens as they come), the finish reason, then the usage chunk.
  EXPECT_EQ(stream.chunks.back()["usage"]["completion_tokens"], 24);
  EXPECT_EQ(stream.chunks.back()["choices"].size(), 0u);
  EXPECT_EQ(stream.chunks[stream.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, ChatMatchesPetrelRun) {
  const std::string expected =
      RunText({"--chat", "--chat-template-file", *template_path_, "--system", "You tell stories.",
               "-p", "Tell me about a cat.", "-n", "20"});
  httplib::Client client = server_->Client();
  json body = {{"messages",
                {{{"role", "system"}, {"content", "You tell stories."}},
                 {{"role", "user"}, {"content", "Tell me about a cat."}}}},
               {"max_tokens", 20},
               {"temperature", 0}};
  const Reply whole = Post(client, "/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body.dump();
  EXPECT_EQ(whole.body["object"], "chat.completion");
  EXPECT_EQ(whole.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole.body["choices"][0]["message"]["content"], expected);

  body["stream"] = true;
  const Streamed stream = PostStream(client, "/v1/chat/completions", body);
  EXPECT_TRUE(stream.done);
  EXPECT_EQ(stream.text, expected);
  ASSERT_FALSE(stream.chunks.empty());
  EXPECT_EQ(stream.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(stream.chunks[0]["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(ServerTest, LogprobsAndForkedChoices) {
  httplib::Client client = server_->Client();
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"max_tokens", 6},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 3},
                     {"logit_bias", {{"2", -100}}}};  // no end of story: all 6 tokens come
  const Reply reply = Post(client, "/v1/chat/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  const json& content = reply.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u) << reply.body.dump();
  for (const json& token : content) {
    EXPECT_LE(token["logprob"].get<double>(), 0.0);
    EXPECT_EQ(token["top_logprobs"].size(), 3u);
  }
  // n = 3 greedy choices forked from one prefilled prompt are all the single greedy reply.
  json three = body;
  three["n"] = 3;
  three.erase("logprobs");
  three.erase("top_logprobs");
  const Reply forked = Post(client, "/v1/chat/completions", three);
  ASSERT_EQ(forked.status, 200) << forked.body.dump();
  ASSERT_EQ(forked.body["choices"].size(), 3u);
  for (const json& choice : forked.body["choices"]) {
    EXPECT_EQ(choice["message"]["content"], reply.body["choices"][0]["message"]["content"]);
  }
  EXPECT_EQ(forked.body["usage"]["completion_tokens"], 18);
}

TEST_F(ServerTest, ErrorPaths) {
  httplib::Client client = server_->Client();
  const std::string path = "/v1/completions";
  ExpectError(Post(client, path, std::string("{\"prompt\": \"x\",")), 400);
  ExpectError(Post(client, path, std::string("[1, 2]")), 400);
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"temperature", "hot"}}), 400,
              "temperature");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"max_tokens", 1.5}}), 400, "max_tokens");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"frobnicate", 1}}), 400, "frobnicate");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"echo", true}}), 400, "echo");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"max_tokens", 1000000000}}), 400,
              "max_tokens");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"n", 1000}}), 400, "n");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"temperature", -1}}), 400, "temperature");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"logprobs", 50}}), 400, "logprobs");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"logit_bias", {{"99999999", 1}}}}), 400,
              "logit_bias");
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"stream_options", json::object()}}), 400,
              "stream_options");
  ExpectError(Post(client, path, json{{"max_tokens", 4}}), 400, "prompt");
  ExpectError(Post(client, "/v1/chat/completions",
                   json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                        {"top_logprobs", 100},
                        {"logprobs", true}}),
              400, "top_logprobs");
  ExpectError(Post(client, "/v1/chat/completions",
                   json{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}),
              400, "messages[0].role");
  // Authentication.
  ExpectError(Post(client, path, json{{"prompt", "x"}}.dump(), httplib::Headers()), 401);
  ExpectError(Post(client, path, json{{"prompt", "x"}}.dump(),
                   httplib::Headers{{"Authorization", "Bearer wrong"}}),
              401);
  // Too large: the body (--max-body-kib 64), and a prompt longer than the context (-c 256).
  ExpectError(Post(client, path, json{{"prompt", std::string(100 << 10, 'a')}}), 413);
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "the cat sat. ";
  // A prompt over the context: OpenAI's 400 context_length_exceeded, which its SDKs do not retry.
  const Reply too_long = Post(client, path, json{{"prompt", long_prompt}});
  ExpectError(too_long, 400, "prompt");
  EXPECT_EQ(too_long.body["error"]["code"], "context_length_exceeded") << too_long.body.dump();
  // What SDKs and agent frameworks send by default is accepted (and ignored: docs/SERVER.md).
  const Reply sdk_fields =
      Post(client, "/v1/chat/completions",
           json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                {"max_tokens", 2},
                {"store", false},
                {"metadata", {{"k", "v"}}},
                {"service_tier", "auto"},
                {"parallel_tool_calls", true},
                {"reasoning_effort", "low"},
                {"user", "u"}});
  EXPECT_EQ(sdk_fields.status, 200) << sdk_fields.body.dump();
  // A schema the vocabulary cannot spell ("é": the story model has no such token and no byte
  // tokens) is a 400 naming the character, before a stream starts.
  for (const bool stream : {false, true}) {
    json schema_body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stream", stream}};
    schema_body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "n"}, {"schema", {{"enum", json::array({"\u00e9"})}}}}}};
    const Reply unspellable = Post(client, "/v1/chat/completions", schema_body);
    ExpectError(unspellable, 400, "response_format");
    EXPECT_EQ(unspellable.body["error"]["code"], "grammar_unsatisfiable") << unspellable.body.dump();
    EXPECT_NE(unspellable.body["error"]["message"].get<std::string>().find("U+00E9"), std::string::npos)
        << unspellable.body.dump();
  }
  // Anything else still is not.
  ExpectError(Post(client, path, json{{"prompt", "x"}, {"frobnicate", 1}}), 400, "frobnicate");
  // The server is still well.
  const Reply fine = Post(client, path, json{{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(fine.status, 200) << fine.body.dump();
  auto missing = client.Get("/nowhere", Auth());
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

// The official `openai` npm client (tests/openai_client/errors.mjs): an over-long prompt and an
// unspellable schema are APIErrors 400 with OpenAI's codes, streamed or not, before any chunk.
TEST_F(ServerTest, OfficialOpenAiClientSeesTheErrorCodes) {
  std::string skip;
  const std::string dir = OpenAiClientDir(&skip);
  if (dir.empty()) GTEST_SKIP() << skip;
  setenv("PETREL_API_KEY", kKey, 1);
  const json result = RunOpenAiScript(dir, "errors.mjs", server_->port());
  ASSERT_TRUE(result.is_object()) << "see " << dir << "/errors.mjs.json.log";
  for (const char* mode : {"plain", "stream"}) {
    const json& context = result[std::string("context_") + mode];
    EXPECT_EQ(context["status"], 400) << result.dump();
    EXPECT_EQ(context["code"], "context_length_exceeded") << result.dump();
    EXPECT_EQ(context["chunks"], 0) << result.dump();
    const json& schema = result[std::string("schema_") + mode];
    EXPECT_EQ(schema["status"], 400) << result.dump();
    EXPECT_EQ(schema["code"], "grammar_unsatisfiable") << result.dump();
    EXPECT_EQ(schema["chunks"], 0) << result.dump();
  }
}

TEST_F(ServerTest, DisconnectedClientFreesItsBlocks) {
  httplib::Client client = server_->Client();
  httplib::Client observer = server_->Client();
  // Long enough to be running when the client leaves: the end-of-story token is banned.
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 200},
                     {"temperature", 0},
                     {"logit_bias", {{"2", -100}}},
                     {"stream", true}};
  double used_while_running = -1;
  const Streamed stream = PostStream(client, "/v1/completions", body, [&](size_t chunks) {
    if (chunks == 3) used_while_running = Metric(observer, "petrel_kv_blocks_used");
    return chunks < 5;
  });
  EXPECT_FALSE(stream.done);
  EXPECT_GT(used_while_running, 0);
  double used = -1, running = -1;
  for (int i = 0; i < 200; ++i) {
    used = Metric(observer, "petrel_kv_blocks_used");
    running = Metric(observer, "petrel_running_sequences");
    if (used == 0 && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(running, 0);
}

TEST_F(ServerTest, ConcurrentGreedyRequestsMatchTheirSoloRuns) {
  constexpr int kRequests = 16;
  const std::vector<std::string> openings = {
      "Once upon a time", "Tom had a ball",  "The sun",        "Lily and Ben",
      "A big dog",        "One day, a bird", "Sue liked cake", "The little car"};
  auto body = [&](int i) {
    return json{{"prompt", openings[size_t(i) % openings.size()] + (i >= 8 ? " and" : "")},
                {"max_tokens", 32},
                {"temperature", 0}};
  };
  httplib::Client client = server_->Client();
  std::vector<std::string> alone(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    const Reply reply = Post(client, "/v1/completions", body(i));
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    alone[size_t(i)] = reply.body["choices"][0]["text"];
  }
  std::vector<std::string> together(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client own = server_->Client();
      // Half streamed, half whole: both go through the same scheduler steps.
      if (i % 2 == 0) {
        json streamed = body(i);
        streamed["stream"] = true;
        together[size_t(i)] = PostStream(own, "/v1/completions", streamed).text;
      } else {
        const Reply reply = Post(own, "/v1/completions", body(i));
        if (reply.status == 200) together[size_t(i)] = reply.body["choices"][0]["text"];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(together[size_t(i)], alone[size_t(i)]) << i;
}

// A second chat turn repeats the first turn's prompt: its blocks come from the prefix cache.
TEST_F(ServerTest, SecondChatTurnReusesTheFirstTurnsBlocks) {
  httplib::Client client = server_->Client();
  const std::string system =
      "You tell short stories for small children. Every story has a cat, a dog and a bird. The "
      "cat is called Tom, the dog is called Max and the bird is called Sue. They live in a "
      "little house by the sea and they play in the sun every day.";
  json messages = {{{"role", "system"}, {"content", system}},
                   {{"role", "user"}, {"content", "Tell me about the cat."}}};
  const double hits_before = Metric(client, "petrel_prefix_cache_hit_tokens_total");
  const Reply first = Post(client, "/v1/chat/completions",
                           json{{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(first.status, 200) << first.body.dump();
  const size_t first_prompt = first.body["usage"]["prompt_tokens"];
  ASSERT_GT(first_prompt, 48u);
  messages.push_back(
      {{"role", "assistant"}, {"content", first.body["choices"][0]["message"]["content"]}});
  messages.push_back({{"role", "user"}, {"content", "And the dog?"}});
  const Reply second = Post(client, "/v1/chat/completions",
                            json{{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(second.status, 200) << second.body.dump();
  const size_t prompt = second.body["usage"]["prompt_tokens"];
  const size_t cached = second.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  // The first turn's prompt and most of its reply were cached, up to the last whole block.
  EXPECT_GE(cached, first_prompt - 16) << second.body.dump();
  EXPECT_LT(prompt - cached, prompt / 3) << second.body.dump();
  EXPECT_GE(Metric(client, "petrel_prefix_cache_hit_tokens_total") - hits_before, double(cached));
  EXPECT_GT(Metric(client, "petrel_prefix_cache_hit_blocks_total"), 0);
}

// Batch invariance across the cache: the same greedy request gives the same tokens whether its
// prompt was computed or came from the cache, alone or with n = 2 forked choices.
TEST_F(ServerTest, GreedyOutputIsTheSameWithAndWithoutACacheHit) {
  httplib::Client client = server_->Client();
  const std::string prompt =
      "Once upon a time there was a little fox who lived in a big green forest. Every morning "
      "the fox ran to the river to drink and to look at the fish. One day the fox saw";
  const json body = {{"prompt", prompt}, {"max_tokens", 32}, {"temperature", 0}};
  const Reply computed = Post(client, "/v1/completions", body);
  ASSERT_EQ(computed.status, 200) << computed.body.dump();
  EXPECT_EQ(computed.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string expected = RunText({"-p", prompt, "-n", "32"});
  EXPECT_EQ(computed.body["choices"][0]["text"], expected);
  const Reply hit = Post(client, "/v1/completions", body);
  ASSERT_EQ(hit.status, 200) << hit.body.dump();
  const size_t prompt_tokens = hit.body["usage"]["prompt_tokens"];
  EXPECT_GE(size_t(hit.body["usage"]["prompt_tokens_details"]["cached_tokens"]),
            prompt_tokens - 16);
  EXPECT_EQ(hit.body["choices"][0]["text"], expected);
  json forked = body;
  forked["n"] = 2;
  const Reply both = Post(client, "/v1/completions", forked);
  ASSERT_EQ(both.status, 200) << both.body.dump();
  EXPECT_GT(size_t(both.body["usage"]["prompt_tokens_details"]["cached_tokens"]), 0u);
  for (const json& choice : both.body["choices"]) EXPECT_EQ(choice["text"], expected);
}

// A pool of 16 blocks of 16 tokens: cached prefixes are evicted to make room, and every request
// still gets what it gets alone.
TEST(ServerPrefixCacheTest, EvictionUnderASmallPool) {
  ServerProcess server({"-m", StoryHf(), "--parallel", "2", "-c", "128", "--kv-blocks", "16",
                        "--api-key", kKey, "-t", "2"});
  ASSERT_TRUE(server.ok()) << server.log();
  httplib::Client client = server.Client();
  const std::vector<std::string> openings = {"Once upon a time", "Tom had a ball",
                                             "The sun",          "Lily and Ben",
                                             "A big dog",        "One day, a bird"};
  auto body = [&](const std::string& opening) {
    std::string prompt;
    for (int i = 0; i < 8; ++i) prompt += opening + " and a friend played all day. ";
    return json{{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}};
  };
  std::vector<std::string> first;
  for (const std::string& opening : openings) {
    const Reply reply = Post(client, "/v1/completions", body(opening));
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    first.push_back(reply.body["choices"][0]["text"]);
  }
  EXPECT_LE(Metric(client, "petrel_kv_blocks_cached"), 16);
  // The first prompts' blocks were evicted by the later ones; the last one is still cached.
  const Reply again_first = Post(client, "/v1/completions", body(openings.front()));
  ASSERT_EQ(again_first.status, 200);
  EXPECT_EQ(again_first.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(again_first.body["choices"][0]["text"], first.front());
  const Reply again_last = Post(client, "/v1/completions", body(openings.back()));
  ASSERT_EQ(again_last.status, 200);
  EXPECT_GT(again_last.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(again_last.body["choices"][0]["text"], first.back());
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// A pool of 20 blocks (320 tokens) for four requests of about 130 tokens each: blocks run out
// while they decode, the newest are preempted and recomputed, and every request still completes
// with the tokens it gets alone.
TEST(ServerPreemptionTest, EveryRequestCompletesUnderASmallPool) {
  ServerProcess server({"-m", StoryHf(), "--parallel", "4", "-c", "256", "--kv-blocks", "20",
                        "--api-key", kKey, "-t", "2"});
  ASSERT_TRUE(server.ok()) << server.log();
  httplib::Client client = server.Client();
  const std::vector<std::string> openings = {"Once upon a time", "Tom had a ball", "The sun",
                                             "Lily and Ben"};
  auto body = [&](size_t i) {
    // The end-of-story token is banned, so that every request grows to its max_tokens.
    return json{{"prompt", openings[i] + " went to the park to play with a friend."},
                {"max_tokens", 110},
                {"temperature", 0},
                {"logit_bias", {{"2", -100}}}};
  };
  std::vector<std::string> alone(openings.size());
  for (size_t i = 0; i < openings.size(); ++i) {
    const Reply reply = Post(client, "/v1/completions", body(i));
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    alone[i] = reply.body["choices"][0]["text"];
  }
  EXPECT_EQ(Metric(client, "petrel_preempted_sequences_total"), 0);
  std::vector<Reply> together(openings.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < openings.size(); ++i) {
    threads.emplace_back([&, i] {
      httplib::Client own = server.Client();
      together[i] = Post(own, "/v1/completions", body(i));
    });
  }
  // The running gauge leaves preempted sequences out: they have a gauge of their own, and the
  // two together never pass --parallel.
  std::atomic<bool> finished{false};
  double most_preempted = 0, most_together = 0;
  std::thread watcher([&] {
    httplib::Client own = server.Client();
    // Both gauges from one /metrics answer: two reads would straddle a preemption.
    auto gauge = [](const std::string& text, const std::string& name) {
      std::smatch match;
      const std::regex line("(^|\n)" + name + " ([0-9.e+-]+)");
      return std::regex_search(text, match, line) ? std::stod(match[2]) : -1.0;
    };
    while (!finished) {
      auto res = own.Get("/metrics", Auth());
      if (!res) break;
      const double running = gauge(res->body, "petrel_running_sequences");
      const double preempted = gauge(res->body, "petrel_preempted_sequences");
      most_preempted = std::max(most_preempted, preempted);
      most_together = std::max(most_together, running + preempted);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (std::thread& thread : threads) thread.join();
  finished = true;
  watcher.join();
  EXPECT_GT(most_preempted, 0);
  EXPECT_LE(most_together, 4);
  for (size_t i = 0; i < openings.size(); ++i) {
    ASSERT_EQ(together[i].status, 200) << together[i].body.dump();
    EXPECT_EQ(together[i].body["choices"][0]["text"], alone[i]) << i;
    EXPECT_EQ(together[i].body["usage"]["completion_tokens"], 110) << i;
  }
  EXPECT_GT(Metric(client, "petrel_preempted_sequences_total"), 0);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// The server listens before it loads: /health and the model routes answer 503 until it is
// ready. The load is stretched by a variable that only tests set.
TEST(ServerHealthTest, Answers503WhileLoading) {
  setenv("PETREL_SERVE_TEST_LOAD_DELAY_MS", "2000", 1);
  ServerProcess server({"-m", StoryHf(), "-c", "256", "-t", "1", "--api-key", kKey},
                       /*wait_ready=*/false);
  unsetenv("PETREL_SERVE_TEST_LOAD_DELAY_MS");
  ASSERT_NE(server.port(), 0) << server.log();
  httplib::Client client = server.Client();
  auto loading = client.Get("/health");
  ASSERT_TRUE(loading);
  EXPECT_EQ(loading->status, 503);
  EXPECT_NE(loading->body.find("loading"), std::string::npos) << loading->body;
  ExpectError(Post(client, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}}), 503);
  int status = 0;
  for (int i = 0; i < 3000 && status != 200; ++i) {
    auto health = client.Get("/health");
    status = health ? health->status : -1;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200) << server.log();
  EXPECT_EQ(Post(client, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}}).status, 200);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// A server of one slot and one queue place: the third request is refused with 429.
TEST(ServerQueueTest, FullQueueAnswers429) {
  // 400 tokens of the story model take well under a second on a fast machine: a pause after
  // each step keeps the first request running while the test fills the queue behind it.
  setenv("PETREL_SERVE_TEST_STEP_DELAY_MS", "10", 1);
  ServerProcess server({"-m", StoryHf(), "--parallel", "1", "--max-queue", "1", "-c", "512",
                        "--api-key", kKey, "-t", "1"});
  unsetenv("PETREL_SERVE_TEST_STEP_DELAY_MS");
  ASSERT_TRUE(server.ok()) << server.log();
  const json long_body = {{"prompt", "Once upon a time"},
                          {"max_tokens", 400},
                          {"temperature", 0},
                          {"logit_bias", {{"2", -100}}},
                          {"stream", true}};
  std::atomic<int> phase{0};
  // The first request runs; once it streams, the second waits in the queue.
  std::thread first([&] {
    httplib::Client client = server.Client();
    PostStream(client, "/v1/completions", long_body, [&](size_t chunks) {
      if (chunks == 1) phase = 1;
      return phase < 3;
    });
  });
  while (phase < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread second([&] {
    httplib::Client client = server.Client();
    PostStream(client, "/v1/completions", long_body, [&](size_t) { return phase < 3; });
  });
  httplib::Client client = server.Client();
  for (int i = 0; i < 500 && Metric(client, "petrel_queue_depth") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(Metric(client, "petrel_queue_depth"), 1);
  ExpectError(Post(client, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}}), 429);
  phase = 3;
  first.join();
  second.join();
  EXPECT_EQ(server.Stop(), 0) << server.log();
  EXPECT_NE(server.log().find(" 429 "), std::string::npos);
}

// GET /slots (behind the API key) shows the running sequence of a slow stream and the request
// queued behind it; /metrics's queue-time histogram and per-request token histograms count
// both requests once they finish.
TEST(ServerSlotsTest, SlotsAndQueueTimeHistogram) {
  setenv("PETREL_SERVE_TEST_STEP_DELAY_MS", "10", 1);
  ServerProcess server({"-m", StoryHf(), "--parallel", "1", "-c", "512", "--api-key", kKey, "-t",
                        "1"});
  unsetenv("PETREL_SERVE_TEST_STEP_DELAY_MS");
  ASSERT_TRUE(server.ok()) << server.log();
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 60},
                     {"temperature", 0},
                     {"logit_bias", {{"2", -100}}},
                     {"stream", true}};
  std::atomic<int> streaming{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&] {
      httplib::Client client = server.Client();
      const Streamed streamed = PostStream(client, "/v1/completions", body, [&](size_t chunks) {
        if (chunks == 1) ++streaming;
        return true;
      });
      EXPECT_TRUE(streamed.done);
    });
  }
  httplib::Client client = server.Client();
  EXPECT_EQ(client.Get("/slots")->status, 401);
  json slots;
  for (int i = 0; i < 500; ++i) {
    auto res = client.Get("/slots", Auth());
    ASSERT_TRUE(res && res->status == 200);
    slots = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(slots.is_array()) << res->body;
    bool decoding = false, waiting = false;
    for (const json& slot : slots) {
      decoding |= slot["state"] == "decode" && slot["n_generated"] > 0;
      waiting |= slot["state"] == "waiting";
    }
    if (decoding && waiting) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(slots.size(), 2u) << slots.dump();
  const json* running = nullptr;
  for (const json& slot : slots) {
    if (slot["state"] == "decode") running = &slot;
  }
  ASSERT_NE(running, nullptr) << slots.dump();
  EXPECT_GE((*running)["id"], 0);
  EXPECT_GT((*running)["request_id"], 0);
  EXPECT_GT((*running)["n_prompt"], 0);
  EXPECT_EQ((*running)["n_cached"], 0);
  EXPECT_GE((*running)["position"], (*running)["n_prompt"]);
  EXPECT_LE((*running)["n_generated"], 60);
  for (std::thread& thread : clients) thread.join();
  // Finished: no slot left, and each request counted once.
  for (int i = 0; i < 200 && json::parse(client.Get("/slots", Auth())->body).size() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(json::parse(client.Get("/slots", Auth())->body), json::array());
  EXPECT_EQ(Metric(client, "petrel_request_queue_seconds_count"), 2);
  // The second request waited for the first one's 60 slowed steps.
  EXPECT_GT(Metric(client, "petrel_request_queue_seconds_sum"), 0.3);
  EXPECT_EQ(Metric(client, "petrel_request_prompt_tokens_count"), 2);
  EXPECT_EQ(Metric(client, "petrel_request_generated_tokens_sum"), 120);
  EXPECT_EQ(Metric(client, "petrel_request_cached_tokens_count"), 2);
  // Each of the 120 tokens came from a step; the step's time is split by part.
  EXPECT_GE(Metric(client, "petrel_steps_total"), 120);
  EXPECT_GT(Metric(client, "petrel_step_seconds_total\\{part=\"engine\"\\}"), 0);
  EXPECT_GE(Metric(client, "petrel_step_seconds_total\\{part=\"consume\"\\}"), 0);
  EXPECT_GE(Metric(client, "petrel_step_seconds_total\\{part=\"scheduling\"\\}"), 0);
  const std::string text = client.Get("/metrics", Auth())->body;
  EXPECT_NE(text.find("# TYPE petrel_request_queue_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("petrel_request_queue_seconds_bucket{le=\"+Inf\"} 2"), std::string::npos);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// SIGTERM lets a running stream finish, then the server exits 0; with no time to finish
// (--shutdown-timeout 0) the stream ends with an error event and [DONE].
TEST(ServerShutdownTest, SigtermFinishesOrEndsRunningStreams) {
  for (const char* timeout : {"30", "0"}) {
    SCOPED_TRACE(std::string("--shutdown-timeout ") + timeout);
    ServerProcess server({"-m", StoryHf(), "--parallel", "2", "--api-key", kKey,
                          "--shutdown-timeout", timeout, "-t", "1"});
    ASSERT_TRUE(server.ok()) << server.log();
    const json body = {{"prompt", "Once upon a time"},
                       {"max_tokens", 300},
                       {"temperature", 0},
                       {"logit_bias", {{"2", -100}}},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    httplib::Client client = server.Client();
    const Streamed stream = PostStream(client, "/v1/completions", body, [&](size_t chunks) {
      if (chunks == 2) server.Signal(SIGTERM);
      return true;
    });
    EXPECT_TRUE(stream.done);
    ASSERT_FALSE(stream.chunks.empty());
    if (std::string(timeout) == "30") {
      EXPECT_EQ(stream.chunks.back()["usage"]["completion_tokens"], 300);
    } else {
      EXPECT_TRUE(stream.chunks.back().contains("error")) << stream.chunks.back().dump();
    }
    EXPECT_EQ(server.WaitExit(), 0) << server.log();
    EXPECT_NE(server.log().find("petrel serve: stopped"), std::string::npos) << server.log();
  }
}

// `petrel bench-serve` on the story model: 4 clients, 12 requests over 3 prompts, every stream
// checked and the greedy repeats compared; and its option errors, one line each.
TEST(BenchServeTest, ChecksEveryStreamAndReports) {
  const Output run = Petrel({"bench-serve", "-m", StoryHf(), "--clients", "4", "--requests", "12",
                             "--prompt-set", "3", "--prompt-tokens", "20", "--max-tokens", "16",
                             "-t", "2", "--serve-arg=-c", "--serve-arg=256", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  const json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out << run.err;
  EXPECT_EQ(report["requests_ok"], 12) << report.dump();
  EXPECT_EQ(report["requests_failed"], 0);
  EXPECT_EQ(report["check_failures"], 0) << report["problems"].dump();
  EXPECT_EQ(report["repeated_prompts_compared"], 9);
  // /tokenize sized each prompt to about 20 tokens (whole words), and usage agreed (a check).
  EXPECT_GE(report["prompt_tokens"].get<int>(), 12 * 20);
  EXPECT_LE(report["prompt_tokens"].get<int>(), 12 * 24);
  EXPECT_GT(report["generation_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(report["ttft_ms"]["p50"].get<double>(), 0);
  EXPECT_GT(report["server_rss_peak_mib"].get<double>(), 0);

  const Output text = Petrel({"bench-serve", "-m", StoryHf(), "--clients", "2", "--requests", "2",
                              "--prompt-tokens", "10", "--max-tokens", "4", "-t", "1"});
  EXPECT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("requests: 2 ok, 0 failed"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("PASS"), std::string::npos) << text.out;
}

TEST(BenchServeTest, OptionErrors) {
  ExpectOneLineError(Petrel({"bench-serve"}), "needs --url");
  ExpectOneLineError(Petrel({"bench-serve", "--url", "http://127.0.0.1:1", "-t", "2"}),
                     "-t applies to a server started with -m");
  ExpectOneLineError(Petrel({"bench-serve", "-m", "/nonexistent/model.gguf"}),
                     "/nonexistent/model.gguf");
  ExpectOneLineError(
      Petrel({"bench-serve", "-m", StoryHf(), "--prompt-tokens", "10", "--shared-prefix", "10"}),
      "--shared-prefix");
  ExpectOneLineError(Petrel({"bench-serve", "--url", "http://127.0.0.1:1", "--clients", "0"}),
                     "--clients");
  // Nothing listens on port 1: the prompt set cannot be sized.
  ExpectOneLineError(Petrel({"bench-serve", "--url", "http://127.0.0.1:1", "--requests", "1"}),
                     "/tokenize");
}

// Server-wide speculation (--draft, --lookup-ngram): a request running alone verifies drafts;
// its greedy text is plain decoding's, and /metrics counts the drafted and accepted tokens.
TEST(ServerSpeculative, GreedyTextIsPlainDecodingsAndMetricsCountDrafts) {
  const std::string expected = RunText({"-p", "Once upon a time", "-n", "32"});
  for (const std::vector<std::string>& draft : std::vector<std::vector<std::string>>{
           {"--draft", StoryQ8Gguf(), "--draft-max", "4"}, {"--lookup-ngram", "2"}}) {
    std::vector<std::string> args = {"-m", StoryHf(), "-c", "256", "--api-key", kKey, "-t", "2"};
    args.insert(args.end(), draft.begin(), draft.end());
    ServerProcess server(args);
    ASSERT_TRUE(server.ok()) << server.log();
    httplib::Client client = server.Client();
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 32}, {"temperature", 0}};
    const Reply reply = Post(client, "/v1/completions", body);
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    EXPECT_EQ(reply.body["choices"][0]["text"], expected) << draft[0];
    EXPECT_GT(Metric(client, "petrel_speculative_passes_total"), 0.0) << draft[0];
    EXPECT_GE(Metric(client, "petrel_draft_tokens_total"),
              Metric(client, "petrel_draft_accepted_tokens_total"));
    // Sampled requests speculate too (point-mass drafts), and still finish.
    const json sampled = {
        {"prompt", "The dog"}, {"max_tokens", 16}, {"temperature", 0.9}, {"seed", 5}};
    const Reply again = Post(client, "/v1/completions", sampled);
    ASSERT_EQ(again.status, 200) << again.body.dump();
    EXPECT_GT(again.body["usage"]["completion_tokens"].get<int>(), 0);
    EXPECT_LE(again.body["usage"]["completion_tokens"].get<int>(), 16);
    EXPECT_EQ(server.Stop(), 0) << server.log();
  }
}

}  // namespace
}  // namespace petrel::testing
