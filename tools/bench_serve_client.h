// One streaming /v1/completions request of `petrel bench-serve`, spoken over HTTP, with the
// timings and checks of its stream: every chunk's tokens (from its `logprobs`) are counted as
// they arrive and must add up to `usage.completion_tokens` (which also counts an
// end-of-generation token, never streamed, when the finish_reason is "stop"), each chunk must start
// where the text so far ends (no chunk lost, repeated or out of order), and the stream must end
// with a finish_reason, the usage chunk and `data: [DONE]`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace petrel::tools {

struct BenchRequest {
  std::string prompt;
  size_t max_tokens = 64;
  double temperature = 0.0;
  // The request's `logprobs`: its chunks' tokens are what the checks count. -1: none asked for,
  // and each chunk with text counts as one token (a server that sends one chunk a token).
  int64_t logprobs = 0;
  int64_t seed = -1;     // -1: none sent
  // The client hangs up once this many tokens have streamed (0: it reads the whole stream), as a
  // user who stops a reply does; the server must free what the request held.
  size_t cancel_after_tokens = 0;
};

struct StreamRecord {
  int status = 0;            // HTTP status; 0 when no response came (connection failed)
  std::string error;         // the request failed: the transport error or the error body/event
  std::string check_failed;  // the stream broke a rule (see above); empty when it did not
  std::string text;          // the completion, concatenated from the chunks
  std::string finish_reason;
  size_t token_chunks = 0;     // chunks that carried tokens
  size_t streamed_tokens = 0;  // tokens counted over the chunks
  size_t prompt_tokens = 0;    // usage
  size_t completion_tokens = 0;
  size_t cached_tokens = 0;
  double ttft_s = 0.0;                        // request sent → first token chunk received
  std::vector<double> inter_token_s;          // between consecutive token chunks, per token
  double latency_s = 0.0;                     // request sent → stream ended
  bool retried = false;  // sent again after the connection closed before any answer
  bool cancelled = false;  // the client hung up after cancel_after_tokens (not a failure)
  std::chrono::steady_clock::time_point end;  // when it ended

  bool ok() const { return error.empty() && status == 200; }
};

// A keep-alive connection to one server, used by one client thread.
class BenchClient {
 public:
  // `url`: http://HOST:PORT. `api_key`: sent as a bearer token when not empty.
  BenchClient(const std::string& url, const std::string& api_key);
  ~BenchClient();
  BenchClient(const BenchClient&) = delete;
  BenchClient& operator=(const BenchClient&) = delete;

  StreamRecord Complete(const BenchRequest& request);

 private:
  std::unique_ptr<httplib::Client> client_;
  std::string api_key_;
};

// Parses the stream `events` (the SSE data lines, [DONE] excluded) into `record`; the part of
// Complete() that does not need a connection, for tests.
class StreamChecker {
 public:
  StreamChecker(StreamRecord* record, size_t max_tokens, std::chrono::steady_clock::time_point sent,
                bool text_chunk_is_token = false)
      : record_(record), max_tokens_(max_tokens), sent_(sent),
        text_chunk_is_token_(text_chunk_is_token) {}
  // Takes more bytes of the response body.
  void Feed(const char* data, size_t size);
  // The body has ended: checks what must have come.
  void Finish();
  bool received() const { return received_; }

 private:
  void Event(const std::string& data);
  void Fail(const std::string& why);

  StreamRecord* record_;
  size_t max_tokens_;
  bool received_ = false;
  std::chrono::steady_clock::time_point sent_;
  bool text_chunk_is_token_;
  std::chrono::steady_clock::time_point last_token_;
  std::string buffer_;
  bool done_ = false;
  bool usage_seen_ = false;
};

}  // namespace petrel::tools
