// `petrel serve` against clients that reset their connections (SO_LINGER 0, then close: the
// kernel sends RST instead of FIN) after every byte of a request and after every byte of a
// streamed response. Afterwards the server must answer a normal request as before, and hold no
// more file descriptors than it did before the resets (no socket leaked by an aborted read or
// write).
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "util/cli_runner.h"  // StoryF32Gguf
#include "util/loopback_socket.h"
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

// A loopback connection that ends with a reset, never a FIN.
class ResettingSocket {
 public:
  explicit ResettingSocket(int port) : fd_(ConnectLoopback(port)) {}
  // The reset: linger on with a zero timeout makes close() abort the connection.
  ~ResettingSocket() {
    if (fd_ < 0) return;
    const linger abort_on_close{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
    close(fd_);
  }
  ResettingSocket(const ResettingSocket&) = delete;
  ResettingSocket& operator=(const ResettingSocket&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool Send(const std::string& data) {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += size_t(n);
    }
    return true;
  }
  // Reads until `limit` bytes came, the peer closed, or 10 s passed without data.
  std::string Receive(size_t limit) {
    std::string data;
    char buffer[4096];
    while (data.size() < limit) {
      pollfd poll_fd{fd_, POLLIN, 0};
      if (poll(&poll_fd, 1, 10000) <= 0) break;
      const ssize_t n = recv(fd_, buffer, std::min(sizeof(buffer), limit - data.size()), 0);
      if (n <= 0) break;
      data.append(buffer, size_t(n));
    }
    return data;
  }

 private:
  int fd_ = -1;
};

size_t OpenDescriptors(int pid) {
  size_t count = 0;
  if (DIR* dir = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

// The streamed completion every connection asks for: greedy, two tokens, so the response is a
// few hundred bytes and each one costs milliseconds.
std::string StreamRequest() {
  const std::string body = json{
      {"prompt", "Once upon a time"},
      {"max_tokens", 2},
      {"temperature", 0},
      {"stream", true}}.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         "Connection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The text of a non-streamed greedy completion, or "" when the server did not answer it.
std::string Complete(const ServerProcess& server) {
  httplib::Client client = server.Client();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
  auto res = client.Post("/v1/completions", body.dump(), "application/json");
  if (!res || res->status != 200) return "";
  const json reply = json::parse(res->body, nullptr, false);
  return reply.is_object() ? reply["choices"][0]["text"].get<std::string>() : "";
}

TEST(ServerResetTest, SurvivesResetsAtEveryByteOfRequestAndResponse) {
  ServerProcess server({"-m", StoryF32Gguf(), "-c", "256", "--parallel", "2"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::string expected = Complete(server);
  ASSERT_FALSE(expected.empty()) << server.log();
  const std::string request = StreamRequest();
  std::string full_response;
  {
    ResettingSocket whole(server.port());
    ASSERT_TRUE(whole.ok() && whole.Send(request));
    full_response = whole.Receive(size_t(1) << 20);
  }
  ASSERT_NE(full_response.find("data: [DONE]"), std::string::npos) << full_response;
  const size_t descriptors_before = OpenDescriptors(server.pid());

  // Reset after each prefix of the request: the server is still reading it.
  for (size_t sent = 0; sent < request.size(); ++sent) {
    ResettingSocket client(server.port());
    ASSERT_TRUE(client.ok()) << "connection refused after a reset at request byte " << sent;
    client.Send(request.substr(0, sent));
  }
  // Reset after each prefix of the response: the server is generating or writing it.
  for (size_t received = 0; received < full_response.size(); ++received) {
    ResettingSocket client(server.port());
    ASSERT_TRUE(client.ok()) << "connection refused after a reset at response byte " << received;
    ASSERT_TRUE(client.Send(request));
    client.Receive(received);
  }

  EXPECT_EQ(Complete(server), expected) << server.log();
  // The server closes its side of each reset connection on its own threads: give it a moment.
  size_t descriptors_after = OpenDescriptors(server.pid());
  for (int wait = 0; wait < 200 && descriptors_after > descriptors_before; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    descriptors_after = OpenDescriptors(server.pid());
  }
  EXPECT_LE(descriptors_after, descriptors_before)
      << "after " << request.size() << " request resets and " << full_response.size()
      << " response resets";
  std::printf("%zu resets inside the request, %zu inside the response; %zu descriptors\n",
              request.size(), full_response.size(), descriptors_after);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace
}  // namespace petrel::testing
