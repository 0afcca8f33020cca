// `petrel serve` and /v1/embeddings: the OpenAI request shapes (a string, strings, token ids,
// lists of them), base64, `dimensions`, usage, the same vectors as `petrel embed`; hostile
// inputs as 4xx with a message; chat models with and without --embeddings, an embedding model
// asked for completions; and the official `openai` npm client against the server.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "util/cli_runner.h"  // Petrel, StoryF32Gguf
#include "util/openai_client.h"
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

std::string BertGguf() { return SharedDir() + "/models/synth-arch2/bert.gguf"; }

struct Reply {
  int status = 0;
  json body;
};

Reply Post(int port, const std::string& path, const std::string& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  auto res = client.Post(path.c_str(), body, "application/json");
  if (!res) return Reply{-1, json()};
  return Reply{res->status, json::parse(res->body, nullptr, false)};
}
Reply Post(int port, const std::string& path, const json& body) {
  return Post(port, path, body.dump());
}

// A 4xx whose body is OpenAI's error object with a message holding `needle`.
void Expect4xx(const Reply& reply, const std::string& needle) {
  EXPECT_GE(reply.status, 400) << reply.body.dump();
  EXPECT_LT(reply.status, 500) << reply.body.dump();
  ASSERT_TRUE(reply.body.is_object() && reply.body.contains("error")) << reply.body.dump();
  const std::string message = reply.body["error"].value("message", "");
  EXPECT_NE(message.find(needle), std::string::npos) << message;
}

std::vector<std::vector<float>> EmbedCli(const std::string& model, const std::string& lines) {
  const Output out = Petrel({"embed", "-m", model, "-p", lines});
  EXPECT_EQ(out.exit_code, 0) << out.err;
  std::vector<std::vector<float>> vectors;
  std::istringstream stream(out.out);
  std::string line;
  while (std::getline(stream, line)) vectors.push_back(json::parse(line).get<std::vector<float>>());
  return vectors;
}

std::vector<float> FromBase64(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string bytes;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) break;
    buffer = buffer << 6 | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(char(buffer >> bits & 0xFF));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST(ServerEmbeddings, RequestShapesMatchTheCommand) {
  ServerProcess server({"-m", BertGguf(), "--no-access-log"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::vector<std::vector<float>> cli = EmbedCli(BertGguf(), "Hello world\nA second line");
  ASSERT_EQ(cli.size(), 2u);

  const Reply one = Post(server.port(), "/v1/embeddings", json{{"input", "Hello world"}});
  ASSERT_EQ(one.status, 200) << one.body.dump();
  EXPECT_EQ(one.body["object"], "list");
  EXPECT_EQ(one.body["data"][0]["object"], "embedding");
  EXPECT_EQ(one.body["data"][0]["index"], 0);
  const auto vector = one.body["data"][0]["embedding"].get<std::vector<float>>();
  ASSERT_EQ(vector.size(), 64u);
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(vector[i], cli[0][i], 1e-6);
  EXPECT_EQ(one.body["usage"]["prompt_tokens"], 5);  // [CLS] hello world [SEP]: 5 ids
  EXPECT_EQ(one.body["usage"]["total_tokens"], 5);

  const Reply two = Post(server.port(), "/v1/embeddings",
                         json{{"input", {"Hello world", "A second line"}}, {"model", "any"}});
  ASSERT_EQ(two.status, 200) << two.body.dump();
  ASSERT_EQ(two.body["data"].size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(two.body["data"][r]["index"], r);
    const auto v = two.body["data"][r]["embedding"].get<std::vector<float>>();
    for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(v[i], cli[r][i], 1e-6);
  }

  // Token ids: one list, and a list of lists; the same ids as the text give the same vector.
  const std::vector<int32_t> ids = {2, 1219, 78, 227, 3};
  const Reply tokens = Post(server.port(), "/v1/embeddings", json{{"input", ids}});
  ASSERT_EQ(tokens.status, 200) << tokens.body.dump();
  const auto from_ids = tokens.body["data"][0]["embedding"].get<std::vector<float>>();
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(from_ids[i], cli[0][i], 1e-6);
  const Reply lists =
      Post(server.port(), "/v1/embeddings", json{{"input", {ids, std::vector<int32_t>{2, 3}}}});
  ASSERT_EQ(lists.status, 200) << lists.body.dump();
  EXPECT_EQ(lists.body["data"].size(), 2u);
  EXPECT_EQ(lists.body["usage"]["prompt_tokens"], 7);

  // base64: the same float32 bytes.
  const Reply b64 = Post(server.port(), "/v1/embeddings",
                         json{{"input", "Hello world"}, {"encoding_format", "base64"}});
  ASSERT_EQ(b64.status, 200) << b64.body.dump();
  const std::vector<float> decoded =
      FromBase64(b64.body["data"][0]["embedding"].get<std::string>());
  ASSERT_EQ(decoded.size(), 64u);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(decoded[i], vector[i]);

  // `dimensions`: the model's own is accepted, another is a 400.
  EXPECT_EQ(
      Post(server.port(), "/v1/embeddings", json{{"input", "Hello"}, {"dimensions", 64}}).status,
      200);
  Expect4xx(Post(server.port(), "/v1/embeddings", json{{"input", "Hello"}, {"dimensions", 32}}),
            "cannot be shortened to 32");

  // An embedding model has no completions.
  Expect4xx(Post(server.port(), "/v1/completions", json{{"prompt", "Hello"}}),
            "gives embeddings only");
  Expect4xx(Post(server.port(), "/v1/chat/completions",
                 json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}),
            "gives embeddings only");
}

TEST(ServerEmbeddings, HostileInputsAre4xx) {
  ServerProcess server({"-m", BertGguf(), "--no-access-log"});
  ASSERT_TRUE(server.ok()) << server.log();
  const int port = server.port();
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", json::array()}}), "empty array");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", ""}}), "empty string");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", {"a", ""}}}), "'input[1]' is an empty");
  Expect4xx(Post(port, "/v1/embeddings", json::object()), "'input' is required");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", 5}}), "must be a string");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", {json::object()}}}), "must be a string");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", {1, 99999}}}), "not a token id");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", {{1, 2}, {-4}}}}), "not a token id");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", {{1, 2}, json::array()}}}),
            "'input[1]' is an empty array");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", std::vector<std::string>(10000, "x")}}),
            "at most 2048");
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "word ";
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", long_text}}), "more than the 128");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", std::vector<int32_t>(129, 7)}}),
            "more than the 128");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", "x"}, {"encoding_format", "int8"}}),
            "\"float\" or \"base64\"");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", "x"}, {"dimensions", -3}}), "dimensions");
  Expect4xx(Post(port, "/v1/embeddings", json{{"input", "x"}, {"temperature", 1}}),
            "'temperature' is not supported");
  Expect4xx(Post(port, "/v1/embeddings", std::string("{\"input\": [1,")), "JSON object");
  // Still serving.
  EXPECT_EQ(Post(port, "/v1/embeddings", json{{"input", "fine"}}).status, 200);
}

TEST(ServerEmbeddings, ChatModelNeedsTheFlag) {
  {
    ServerProcess server({"-m", StoryF32Gguf(), "--no-access-log", "-c", "256"});
    ASSERT_TRUE(server.ok()) << server.log();
    Expect4xx(Post(server.port(), "/v1/embeddings", json{{"input", "Once"}}), "--embeddings");
  }
  ServerProcess server({"-m", StoryF32Gguf(), "--no-access-log", "-c", "256", "--embeddings"});
  ASSERT_TRUE(server.ok()) << server.log();
  const Reply reply =
      Post(server.port(), "/v1/embeddings", json{{"input", {"Once upon", "a time"}}});
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  ASSERT_EQ(reply.body["data"].size(), 2u);
  const auto v = reply.body["data"][0]["embedding"].get<std::vector<float>>();
  double norm = 0;
  for (float x : v) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  // The same server still completes text.
  const Reply completion =
      Post(server.port(), "/v1/completions", json{{"prompt", "Once upon"}, {"max_tokens", 4}});
  EXPECT_EQ(completion.status, 200) << completion.body.dump();
}

// `petrel embed` itself: raw float32 output equals the JSON one, and bad options or inputs are
// one error line.
TEST(EmbedCommand, OutputsAndErrors) {
  const std::vector<std::vector<float>> json_vectors = EmbedCli(BertGguf(), "Hello world\nSecond");
  ASSERT_EQ(json_vectors.size(), 2u);
  const Output raw =
      Petrel({"embed", "-m", BertGguf(), "-p", "Hello world\nSecond", "--output", "f32"});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  ASSERT_EQ(raw.out.size(), 2 * 64 * sizeof(float));
  std::vector<float> values(2 * 64);
  std::memcpy(values.data(), raw.out.data(), raw.out.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(values[i], json_vectors[i / 64][i % 64]);
  // Without normalisation the vector keeps its length.
  const Output raw_norm =
      Petrel({"embed", "-m", BertGguf(), "-p", "Hello world", "--embd-normalize", "-1"});
  ASSERT_EQ(raw_norm.exit_code, 0) << raw_norm.err;
  const auto unnormalised = json::parse(raw_norm.out).get<std::vector<float>>();
  double norm = 0;
  for (float x : unnormalised) norm += double(x) * x;
  EXPECT_GT(std::fabs(norm - 1.0), 1e-3);
  ExpectOneLineError(Petrel({"embed", "-m", BertGguf(), "-p", "x", "--pooling", "max"}),
                     "--pooling");
  ExpectOneLineError(Petrel({"embed", "-m", BertGguf()}), "give -p TEXT or -f FILE");
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "word ";
  ExpectOneLineError(Petrel({"embed", "-m", BertGguf(), "-p", long_text}), "learned positions");
  ExpectOneLineError(Petrel({"run", "-m", BertGguf(), "-p", "x", "-n", "2"}), "no output head");
}

// The official `openai` npm client (tests/openai_client/embeddings.mjs, installed on demand
// into the scratch folder) against the server, checked against `petrel embed`.
TEST(ServerEmbeddings, OfficialOpenAiClient) {
  std::string skip;
  const std::string client_dir = OpenAiClientDir(&skip);
  if (client_dir.empty()) GTEST_SKIP() << skip;
  ServerProcess server({"-m", BertGguf(), "--no-access-log"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::string lines = "The quick brown fox jumps over the lazy dog.\nHello world";
  const std::vector<std::vector<float>> cli = EmbedCli(BertGguf(), lines);
  const json result = RunOpenAiScript(client_dir, "embeddings.mjs", server.port());
  ASSERT_TRUE(result.is_object()) << "see " << client_dir << "/embeddings.mjs.json.log";
  for (const char* format : {"float", "base64"}) {
    const json& vectors = result[format];
    ASSERT_EQ(vectors.size(), 2u) << format;
    for (size_t r = 0; r < 2; ++r) {
      const auto v = vectors[r].get<std::vector<float>>();
      ASSERT_EQ(v.size(), 64u);
      for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(v[i], cli[r][i], 1e-6) << format << " " << r;
    }
  }
  EXPECT_EQ(result["usage"]["prompt_tokens"], 22 + 5);
  EXPECT_EQ(result["bad_status"], 400);  // the client's APIError for dimensions 32
}

}  // namespace
}  // namespace petrel::testing
