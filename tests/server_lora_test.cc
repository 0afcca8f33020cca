// Per-request LoRA in `petrel serve`: requests under different adapters (and none) running
// together in one batch each give the greedy text `petrel run --lora` gives alone, the prefix
// cache never hands one adapter set's K/V to another, GET /lora-adapters lists the adapters,
// and a bad `lora` field is a 400 naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/format/gguf_writer.h"
#include "util/cli_runner.h"
#include "util/server_process.h"
#include "util/story_lora_adapter.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

std::string Scratch(const std::string& name) {
  return ScratchDir() + "/server_lora_" + std::to_string(getpid()) + "_" + name;
}

// A random rank-4 adapter of the story model (different seeds change the text differently).
std::string WriteStoryAdapter(const std::string& name, unsigned seed) {
  const std::string path = Scratch(name + ".gguf");
  WriteStoryLoraAdapter(path, seed);
  return path;
}

constexpr int kNewTokens = 24;

// `petrel run`'s greedy text, alone, with `extra` (the --lora options).
std::string RunText(const std::string& prompt, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "run", "-m", StoryF32Gguf(), "--temp", "0", "-p", prompt, "-n", std::to_string(kNewTokens)};
  args.insert(args.end(), extra.begin(), extra.end());
  const Output output = Petrel(args);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  std::string text = output.out;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

struct Reply {
  int status = 0;
  json body;
};

Reply Post(const ServerProcess& server, const json& body) {
  httplib::Client client = server.Client();
  auto res = client.Post("/v1/completions", body.dump(), "application/json");
  if (!res) return Reply{-1, json()};
  return Reply{res->status, json::parse(res->body, nullptr, false)};
}

json Completion(const std::string& prompt, const json& lora) {
  json body = {{"prompt", prompt}, {"max_tokens", kNewTokens}, {"temperature", 0}};
  if (!lora.is_null()) body["lora"] = lora;
  return body;
}

class ServerLoraTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    adapter_a_ = new std::string(WriteStoryAdapter("a", 5));
    adapter_b_ = new std::string(WriteStoryAdapter("b", 11));
    // Slow steps, so that requests sent together are admitted into the same batches.
    setenv("PETREL_SERVE_TEST_STEP_DELAY_MS", "20", 1);
    server_ = new ServerProcess({"-m", StoryF32Gguf(), "--parallel", "4", "--lora",
                                 "first=" + *adapter_a_, "--lora", *adapter_b_ + ":0.5"});
    unsetenv("PETREL_SERVE_TEST_STEP_DELAY_MS");
  }
  static void TearDownTestSuite() {
    delete server_;
    std::remove(adapter_a_->c_str());
    std::remove(adapter_b_->c_str());
    delete adapter_a_;
    delete adapter_b_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }

  static inline ServerProcess* server_ = nullptr;
  static inline std::string* adapter_a_ = nullptr;
  static inline std::string* adapter_b_ = nullptr;
};

TEST_F(ServerLoraTest, ListsTheAdapters) {
  httplib::Client client = server_->Client();
  auto res = client.Get("/lora-adapters");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const json list = json::parse(res->body);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  EXPECT_EQ(list[0]["id"], 0);
  EXPECT_EQ(list[0]["name"], "first");
  EXPECT_EQ(list[0]["path"], *adapter_a_);
  EXPECT_EQ(list[0]["scale"], 1.0);
  EXPECT_EQ(list[1]["id"], 1);
  EXPECT_EQ(list[1]["name"], "server_lora_" + std::to_string(getpid()) + "_b");  // the stem
  EXPECT_EQ(list[1]["scale"], 0.5);
}

// Four adapter sets in one batch: only A, only B at another scale, none, and the server's
// default (both at their --lora scales). Each gives its solo `petrel run` text.
TEST_F(ServerLoraTest, DifferentAdaptersInOneBatchGiveTheirSoloText) {
  const std::string prompt = "Once upon a time";
  const struct {
    json lora;
    std::vector<std::string> run_options;
  } cases[] = {
      {json::array({{{"id", 0}}}), {"--lora", *adapter_a_}},
      {json::array({{{"name", "server_lora_" + std::to_string(getpid()) + "_b"}, {"scale", 1.5}}}),
       {"--lora", *adapter_b_ + ":1.5"}},
      {json::array(), {}},
      {json(), {"--lora", *adapter_a_, "--lora", *adapter_b_ + ":0.5"}},
  };
  std::vector<std::string> expected;
  for (const auto& c : cases) expected.push_back(RunText(prompt, c.run_options));
  // The adapters change the text, so that a mixed-up batch shows.
  EXPECT_NE(expected[0], expected[2]);
  EXPECT_NE(expected[1], expected[2]);
  EXPECT_NE(expected[0], expected[1]);
  for (int round = 0; round < 2; ++round) {
    std::vector<Reply> replies(std::size(cases));
    std::vector<std::thread> clients;
    for (size_t i = 0; i < std::size(cases); ++i) {
      clients.emplace_back(
          [&, i] { replies[i] = Post(*server_, Completion(prompt, cases[i].lora)); });
    }
    for (std::thread& client : clients) client.join();
    for (size_t i = 0; i < std::size(cases); ++i) {
      ASSERT_EQ(replies[i].status, 200) << replies[i].body.dump();
      EXPECT_EQ(replies[i].body["choices"][0]["text"], expected[i]) << "case " << i;
    }
  }
}

// A prompt computed under one adapter set is never reused under another; under the same set it is.
TEST_F(ServerLoraTest, PrefixCacheKeysOnTheAdapterSet) {
  const std::string prompt =
      "Once upon a time there was a little fox who lived in a big green forest. Every morning "
      "the fox ran to the river to drink and to look at the fish. One day the fox saw";
  const json only_a = json::array({{{"id", 0}}});
  const json only_b = json::array({{{"id", 1}, {"scale", 1.0}}});
  const Reply first = Post(*server_, Completion(prompt, only_a));
  ASSERT_EQ(first.status, 200) << first.body.dump();
  EXPECT_EQ(first.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (const auto& [lora, run_options] :
       {std::pair{only_b, std::vector<std::string>{"--lora", *adapter_b_}},
        std::pair{json::array(), std::vector<std::string>{}}}) {
    const Reply other = Post(*server_, Completion(prompt, lora));
    ASSERT_EQ(other.status, 200) << other.body.dump();
    EXPECT_EQ(other.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << lora.dump();
    EXPECT_EQ(other.body["choices"][0]["text"], RunText(prompt, run_options)) << lora.dump();
  }
  // The same set again: the cache serves it, and the text is still A's.
  const Reply again = Post(*server_, Completion(prompt, only_a));
  ASSERT_EQ(again.status, 200) << again.body.dump();
  EXPECT_GT(size_t(again.body["usage"]["prompt_tokens_details"]["cached_tokens"]), 0u);
  EXPECT_EQ(again.body["choices"][0]["text"], first.body["choices"][0]["text"]);
  EXPECT_EQ(first.body["choices"][0]["text"], RunText(prompt, {"--lora", *adapter_a_}));
}

TEST_F(ServerLoraTest, BadLoraFieldsAre400NamingTheField) {
  const struct {
    json lora;
    const char* param;
  } cases[] = {
      {json("first"), "lora"},
      {json::array({1}), "lora[0]"},
      {json::array({json::object()}), "lora[0]"},
      {json::array({{{"id", 0}, {"name", "first"}}}), "lora[0]"},
      {json::array({{{"id", 2}}}), "lora[0].id"},
      {json::array({{{"id", -1}}}), "lora[0].id"},
      {json::array({{{"id", "0"}}}), "lora[0].id"},
      {json::array({{{"name", "nope"}}}), "lora[0].name"},
      {json::array({{{"id", 0}, {"scale", "high"}}}), "lora[0].scale"},
      {json::array({{{"id", 0}, {"scale", 1e39}}}), "lora[0].scale"},
      {json::array({{{"id", 0}}, {{"name", "first"}}}), "lora[1]"},
      {json::array({{{"id", 0}, {"weight", 1}}}), "lora[0].weight"},
  };
  for (const auto& c : cases) {
    const Reply reply = Post(*server_, Completion("x", c.lora));
    EXPECT_EQ(reply.status, 400) << c.lora.dump() << " " << reply.body.dump();
    EXPECT_EQ(reply.body["error"]["param"], c.param) << c.lora.dump();
  }
  // A scale past float's range, as raw JSON text.
  httplib::Client client = server_->Client();
  auto res =
      client.Post("/v1/completions", R"({"prompt": "x", "lora": [{"id": 0, "scale": 1e400}]})",
                  "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
}

TEST(ServerLoraNames, DuplicateNamesAreRefused) {
  const std::string adapter = WriteStoryAdapter("dup", 3);
  const Output out = Petrel({"serve", "-m", StoryF32Gguf(), "--port", "0", "--lora", adapter,
                             "--lora", adapter + ":0.5"});
  ExpectOneLineError(out, "is taken by");
  std::remove(adapter.c_str());
}

}  // namespace
}  // namespace petrel::testing
