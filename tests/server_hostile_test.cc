// `petrel serve` against hostile clients: malformed and mistyped JSON, out-of-range numbers,
// oversized bodies, invalid UTF-8, a request written one byte at a time, a client that stops
// reading its stream, a thousand idle connections, and special-token text typed by a user. Each
// is answered with a 4xx or handled, and afterwards the server still answers /health and a
// normal completion.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "util/cli_runner.h"   // StoryF32Gguf
#include "util/pty_process.h"  // WriteChatTemplate
#include "util/loopback_socket.h"
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A connected loopback TCP socket (-1 on failure), closed on destruction.
class Socket {
 public:
  explicit Socket(int port, int receive_buffer = 0)
      : fd_(ConnectLoopback(port, receive_buffer)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool Send(const std::string& data) {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += size_t(n);
    }
    return true;
  }
  // Reads until the peer closes or `timeout` passes without data, at most `limit` bytes.
  std::string Receive(std::chrono::milliseconds timeout, size_t limit = size_t(1) << 20) {
    std::string data;
    char buffer[4096];
    while (data.size() < limit) {
      pollfd poll_fd{fd_, POLLIN, 0};
      if (poll(&poll_fd, 1, int(timeout.count())) <= 0) break;
      const ssize_t n = recv(fd_, buffer, std::min(sizeof(buffer), limit - data.size()), 0);
      if (n <= 0) break;
      data.append(buffer, size_t(n));
    }
    return data;
  }

 private:
  int fd_ = -1;
};

std::string HttpPost(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct Reply {
  int status = 0;
  json body;
};

Reply Post(httplib::Client& client, const std::string& path, const std::string& body) {
  auto res = client.Post(path.c_str(), body, "application/json");
  if (!res) return Reply{-1, json()};
  return Reply{res->status, json::parse(res->body, nullptr, false)};
}

// A 4xx in OpenAI's error shape; `param` (when given) named.
void ExpectClientError(const Reply& reply, int status, const std::string& param,
                       const std::string& what) {
  EXPECT_EQ(reply.status, status) << what << ": " << reply.body.dump();
  ASSERT_TRUE(reply.body.is_object() && reply.body.contains("error")) << what;
  EXPECT_TRUE(reply.body["error"]["message"].is_string()) << what;
  if (!param.empty()) {
    EXPECT_EQ(reply.body["error"]["param"], param) << what;
  }
}

const json kNormal = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};

class ServerHostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    template_path_ = new std::string(WriteChatTemplate("hostile"));
    // The GGUF story model: its tokenizer matches special tokens only when asked to, so a
    // user's "<|end_story|>" has a plain-text tokenization to compare with.
    server_ = new ServerProcess({"-m", StoryF32Gguf(), "--parallel", "4", "-c", "256",
                                 "--chat-template-file", *template_path_, "--max-body-kib", "1024",
                                 "-t", "2", "--no-access-log"});
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
  // After each test: still up, still serving.
  void TearDown() override {
    httplib::Client client = server_->Client();
    auto health = client.Get("/health");
    ASSERT_TRUE(health) << "the server is down";
    EXPECT_EQ(health->status, 200);
    const Reply normal = Post(client, "/v1/completions", kNormal.dump());
    EXPECT_EQ(normal.status, 200) << normal.body.dump();
    EXPECT_EQ(normal.body["usage"]["completion_tokens"], 8) << normal.body.dump();
  }

  static inline ServerProcess* server_ = nullptr;
  static inline std::string* template_path_ = nullptr;
};

TEST_F(ServerHostileTest, MalformedJson) {
  httplib::Client client = server_->Client();
  for (const std::string& body : std::vector<std::string>{
           "", "{", "}", "[1, 2]", "null", "\"prompt\"", "{\"prompt\": }", "{\"prompt\": \"a\",}",
           "{\"prompt\": \"a\"} trailing", "{\"prompt\": \"a\", \"prompt\": \"b\"", "\x01\x02\x03",
           std::string(10000, '[') + std::string(10000, ']'), "{\"prompt\": \"unterminated}"}) {
    const Reply reply = Post(client, "/v1/completions", body);
    ExpectClientError(reply, 400, "", body.substr(0, 40));
  }
}

TEST_F(ServerHostileTest, WrongTypes) {
  httplib::Client client = server_->Client();
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"prompt", 5}}, "prompt"},
      {{{"prompt", "a"}, {"max_tokens", "10"}}, "max_tokens"},
      {{{"prompt", "a"}, {"max_tokens", 1.5}}, "max_tokens"},
      {{{"prompt", "a"}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", "a"}, {"stream", "yes"}}, "stream"},
      {{{"prompt", "a"}, {"n", json::array({1})}}, "n"},
      {{{"prompt", "a"}, {"stop", 7}}, "stop"},
      {{{"prompt", "a"}, {"logit_bias", "none"}}, "logit_bias"},
      {{{"prompt", "a"}, {"stream_options", true}, {"stream", true}}, "stream_options"},
      {{{"prompt", json::array({"a", 1})}}, "prompt"},
      {{{"prompt", "a"}, {"seed", "x"}}, "seed"},
  };
  for (const auto& [body, param] : cases) {
    ExpectClientError(Post(client, "/v1/completions", body.dump()), 400, param, body.dump());
  }
  const json chat_cases[] = {
      {{"messages", "hi"}},
      {{"messages", json::array({json{{"role", "user"}, {"content", 3}}})}},
      {{"messages", json::array({json{{"role", 1}, {"content", "x"}}})}},
      {{"messages", json::array({"not an object"})}},
  };
  for (const json& body : chat_cases) {
    ExpectClientError(Post(client, "/v1/chat/completions", body.dump()), 400, "", body.dump());
  }
}

TEST_F(ServerHostileTest, HugeNumbers) {
  httplib::Client client = server_->Client();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "a", "max_tokens": 1000000000000})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 1e300})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 18446744073709551616})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "a", "n": 1000000})", "n"},
      {R"({"prompt": "a", "n": 9223372036854775807})", "n"},
      {R"({"prompt": "a", "logprobs": 1000000})", "logprobs"},
      {R"({"prompt": "a", "temperature": 1e308})", "temperature"},
      {R"({"prompt": "a", "top_k": 99999999999})", "top_k"},
  };
  for (const auto& [body, param] : cases) {
    ExpectClientError(Post(client, "/v1/completions", body), 400, param, body);
  }
  const std::string chat =
      R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 1000000})";
  ExpectClientError(Post(client, "/v1/chat/completions", chat), 400, "top_logprobs", chat);
}

TEST_F(ServerHostileTest, TenMegabyteBodyIs413) {
  // Over --max-body-kib 1024: refused from its Content-Length, before it is read.
  const std::string body = "{\"prompt\": \"" + std::string(10 << 20, 'a') + "\"}";
  httplib::Client client = server_->Client();
  const Reply reply = Post(client, "/v1/completions", body);
  ExpectClientError(reply, 413, "", "10 MB body");
  // Without a Content-Length (chunked), the limit holds as the body arrives.
  Socket socket(server_->port());
  ASSERT_TRUE(socket.ok());
  std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  socket.Send(request);
  const std::string chunk(1 << 20, 'a');
  char size_line[32];
  std::snprintf(size_line, sizeof(size_line), "%zx\r\n", chunk.size());
  for (int i = 0; i < 10; ++i) {
    if (!socket.Send(size_line + chunk + "\r\n")) break;  // the server may close early
  }
  socket.Send("0\r\n\r\n");
  const std::string response = socket.Receive(std::chrono::milliseconds(5000));
  EXPECT_EQ(response.rfind("HTTP/1.1 413", 0), 0u) << response.substr(0, 200);
}

TEST_F(ServerHostileTest, InvalidUtf8IsRejected) {
  httplib::Client client = server_->Client();
  for (const std::string text :
       std::vector<std::string>{"\xff\xfe", "a\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\x80"}) {
    const std::string completion = "{\"prompt\": \"" + text + "\", \"max_tokens\": 2}";
    ExpectClientError(Post(client, "/v1/completions", completion), 400, "", "completion");
    const std::string chat =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"" + text + "\"}], \"max_tokens\": 2}";
    ExpectClientError(Post(client, "/v1/chat/completions", chat), 400, "", "chat");
    const std::string tokenize = "{\"content\": \"" + text + "\"}";
    ExpectClientError(Post(client, "/tokenize", tokenize), 400, "", "tokenize");
  }
}

TEST_F(ServerHostileTest, RequestWrittenOneByteAtATime) {
  Socket socket(server_->port());
  ASSERT_TRUE(socket.ok());
  const std::string request = HttpPost("/v1/completions", kNormal.dump());
  for (char c : request) {
    ASSERT_TRUE(socket.Send(std::string(1, c)));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const std::string response = socket.Receive(std::chrono::milliseconds(30000));
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response.substr(0, 200);
  EXPECT_NE(response.find("\"completion_tokens\":8"), std::string::npos) << response;
}

TEST_F(ServerHostileTest, SlowReaderDoesNotBlockOthers) {
  // A stream whose client reads nothing: its socket buffers fill and the server's writes block.
  Socket slow(server_->port(), /*receive_buffer=*/1024);
  ASSERT_TRUE(slow.ok());
  json stream = {{"prompt", "Once upon a time"},
                 {"max_tokens", 200},
                 {"temperature", 0},
                 {"stream", true},
                 {"logprobs", 5}};
  ASSERT_TRUE(slow.Send(HttpPost("/v1/completions", stream.dump())));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Meanwhile others are served at their usual pace.
  httplib::Client client = server_->Client();
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point start = Clock::now();
    const Reply reply = Post(client, "/v1/completions", kNormal.dump());
    EXPECT_EQ(reply.status, 200);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3)) << "request " << i;
  }
  // Reading a little now and then: the server either finishes the stream or gives up on it.
  std::string got;
  for (int i = 0; i < 5; ++i) {
    got += slow.Receive(std::chrono::milliseconds(200), 512);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 200);
}

TEST_F(ServerHostileTest, ThousandIdleConnections) {
  // This process needs the descriptors too.
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 1200) {
    if (files.rlim_max < 1200) GTEST_SKIP() << "the descriptor limit is " << files.rlim_max;
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4096);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  }
  std::vector<Socket> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.emplace_back(server_->port());
    ASSERT_TRUE(idle.back().ok()) << "connection " << i;
  }
  // Some half-written requests among them.
  for (int i = 0; i < 1000; i += 10) idle[size_t(i)].Send("POST /v1/completions HTTP/1.1\r\n");
  // Real requests are served while the idle ones hold their threads (with a fixed pool of
  // --parallel + --max-queue + 16 threads they would wait about a minute). cpp-httplib's idle
  // connections poll every 10 ms, which on a busy machine slows everything a little: hence a
  // bound of seconds rather than milliseconds.
  httplib::Client client = server_->Client();
  for (int i = 0; i < 3; ++i) {
    const Clock::time_point start = Clock::now();
    auto health = client.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    const Reply reply = Post(client, "/v1/completions", kNormal.dump());
    EXPECT_EQ(reply.status, 200);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << "request " << i;
  }
}

TEST_F(ServerHostileTest, SpecialTokenTextInMessagesStaysText) {
  httplib::Client client = server_->Client();
  auto prompt_tokens = [&](const std::string& content) {
    const json body = {{"messages", {{{"role", "user"}, {"content", content}}}},
                       {"max_tokens", 1},
                       {"temperature", 0}};
    const Reply reply = Post(client, "/v1/chat/completions", body.dump());
    EXPECT_EQ(reply.status, 200) << reply.body.dump();
    return reply.body["usage"]["prompt_tokens"].get<int>();
  };
  auto plain_tokens = [&](const std::string& content) {
    const Reply reply = Post(client, "/tokenize", json{{"content", content}}.dump());
    EXPECT_EQ(reply.status, 200) << reply.body.dump();
    return int(reply.body["tokens"].size());
  };
  for (const std::string special :
       std::vector<std::string>{"<|end_story|>", "<|start_story|>", "</s>", "<unk>"}) {
    const std::string once = "hello " + special, twice = "hello " + special + special;
    const int chat_delta = prompt_tokens(twice) - prompt_tokens(once);
    const int plain_delta = plain_tokens(twice) - plain_tokens(once);
    EXPECT_EQ(chat_delta, plain_delta) << special;
    if (special == "<|end_story|>") {
      // As one token it would be the end-of-story control token.
      EXPECT_GT(chat_delta, 1) << special;
    }
  }
}

}  // namespace
}  // namespace petrel::testing
