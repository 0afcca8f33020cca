// Fuzz target: an HTTP request body, read by each of the server's request parsers in turn:
// /v1/chat/completions, /v1/completions and /v1/messages (every field checked for type and
// range, the grammar fields compiled). Each must answer a valid request or a 400, never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/anthropic_request.h"
#include "server/completion_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel::server;
  const std::string body(reinterpret_cast<const char*>(data), size);
  RequestLimits limits;
  limits.context = 4096;
  limits.n_vocab = 32000;
  limits.max_n = 4;
  for (Endpoint endpoint : {Endpoint::kChat, Endpoint::kCompletion}) {
    CompletionRequest request;
    (void)ParseCompletionRequest(body, endpoint, limits, &request);
  }
  CompletionRequest request;
  (void)ParseMessagesRequest(body, limits, &request);
  return 0;
}
