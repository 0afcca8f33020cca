// The HTTP side of `petrel serve`: cpp-httplib routes, bearer-token auth, the body limit, error
// bodies in OpenAI's shape, one access-log line per request, and the request counters.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/base/status.h"
#include "core/chat/chat_prompt.h"
#include "core/runtime/engine.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/tool_calls.h"

namespace httplib {
class Server;
}

namespace petrel::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: a free port (see port())
  std::string api_key;  // non-empty: every route but /health and the web page's files needs it
  size_t max_body_bytes = size_t(8) << 20;
  size_t threads = 32;                // connection threads that always run
  size_t max_threads = 4096;          // connections served at once at most (idle ones included)
  std::string model_name = "petrel";  // the id /v1/models reports
  bool access_log = true;             // one line per request on stderr
  bool web_ui = true;                 // the chat page at / (server/web_ui.h)
};

// What the model endpoints need once the model is loaded. Not owned.
struct ServingModel {
  Engine* engine = nullptr;
  Scheduler* scheduler = nullptr;
  const ChatPrompt* chat = nullptr;  // null: the model has no chat template
  // /v1/embeddings answers (serve --embeddings, or a model that gives only embeddings).
  bool embeddings = false;
  // --tool-call-format (null: the one the chat template shows) and --reasoning-format.
  std::optional<ToolCallFormat> tool_call_format;
  std::string reasoning_format = "auto";
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Metrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket and serves on a thread of its own; until SetModel, /health answers 503
  // and the model endpoints 503 too.
  Status Start();
  int port() const { return port_; }
  void SetModel(const ServingModel& model);
  // From now on /health answers 503 (a load balancer stops sending requests).
  void SetStopping() { stopping_.store(true); }
  // Waits until every streamed response has been written to its end (or its client left), at
  // most `timeout`: Stop() would cut streams short, and after Scheduler::Shutdown their last
  // events may still be on the way.
  void DrainStreams(std::chrono::milliseconds timeout);
  // Closes the socket and waits for the connections being served.
  void Stop();

 private:
  void Route();
  const ServingModel* model() const {
    return ready_.load(std::memory_order_acquire) ? &model_ : nullptr;
  }

  const HttpServerOptions options_;
  Metrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  ServingModel model_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_streams_{0};
};

}  // namespace petrel::server
