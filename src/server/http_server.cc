// HttpServer: routes, auth, limits, error bodies, access log.
#include "server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "server/connection_pool.h"
#include "server/handlers.h"
#include "server/lora_request.h"
#include "server/web_ui.h"

namespace petrel::server {
namespace {

using Clock = std::chrono::steady_clock;

// Each request is served start to end on one pool thread, so the pre-routing handler can leave
// its start time here for the access log.
thread_local Clock::time_point t_request_start;
thread_local bool t_request_started = false;

// Compares without an early exit, so the time taken does not tell how much of a guess was right.
bool SameSecret(const std::string& given, const std::string& secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ secret[i % (secret.empty() ? 1 : secret.size())]);
  }
  return diff == 0 && !secret.empty();
}

// cpp-httplib 0.11 listens with a backlog of 5 (a compile-time constant of the packaged
// library): a burst of connections, or a busy machine slow to run the accept thread, overflows
// it and the kernel drops the SYNs, which clients retry only after 1 s, 3 s, 7 s... Calling
// listen() again on a listening socket only sets its backlog, so the server finds its socket
// among its descriptors (listening, bound to `port`) and widens it.
void WidenListenBacklog(int port) {
  constexpr int kBacklog = 4096;  // the kernel caps it at net.core.somaxconn
  for (int fd = 0; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t size = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) continue;
    sockaddr_storage address{};
    socklen_t address_size = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &address_size) != 0) continue;
    int bound = -1;
    if (address.ss_family == AF_INET) {
      bound = ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
    } else if (address.ss_family == AF_INET6) {
      bound = ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
    }
    if (bound == port) listen(fd, kBacklog);
  }
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Metrics& metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::SetModel(const ServingModel& model) {
  model_ = model;
  ready_.store(true, std::memory_order_release);
}

void HttpServer::Route() {
  httplib::Server& server = *server_;
  const size_t threads = options_.threads, max_threads = options_.max_threads;
  server.new_task_queue = [threads, max_threads] {
    return new ConnectionPool(threads, max_threads);
  };
  // An idle connection holds a thread until this timeout; a client that reuses its connection
  // (a benchmark, a proxy) should not have to reconnect every few requests.
  server.set_keep_alive_timeout(5);
  server.set_keep_alive_max_count(1000);
  server.set_payload_max_length(options_.max_body_bytes);
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    t_request_started = true;
    if (options_.api_key.empty() || req.path == "/health") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    // The page's files are public (see RouteWebUi); what the page asks of the API is not.
    const bool page_file = options_.web_ui && (req.method == "GET" || req.method == "HEAD") &&
                           FindWebUiFile(req.path).has_value();
    if (page_file) return httplib::Server::HandlerResponse::Unhandled;
    // OpenAI's clients send the key as a bearer token, Anthropic's as x-api-key: either will do
    // on every route.
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool bearer = header.compare(0, prefix.size(), prefix) == 0;
    const bool x_api_key = req.has_header("x-api-key");
    if ((bearer && SameSecret(header.substr(prefix.size()), options_.api_key)) ||
        (x_api_key && SameSecret(req.get_header_value("x-api-key"), options_.api_key))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(res,
              StatusError(401, bearer || x_api_key ? "the API key is not valid"
                                                   : "an API key is required (Authorization: "
                                                     "Bearer KEY, or x-api-key: KEY)"),
              ErrorShapeOfPath(req.path));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Bodies for the errors httplib answers itself (404, 413, ...).
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                  httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "no such route";
        if (res.status == 413) {
          message = "the request body is larger than " + std::to_string(options_.max_body_bytes) +
                    " bytes";
        } else if (res.status != 404) {
          message = "the request failed with HTTP status " + std::to_string(res.status);
        }
        SendError(res, StatusError(res.status, message), ErrorShapeOfPath(req.path));
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.CountRequest(res.status);
    if (!options_.access_log) return;
    char when[32];
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
    const double ms =
        t_request_started
            ? std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count()
            : 0.0;
    t_request_started = false;
    std::fprintf(stderr, "%s %s %s %s %d %zu %.1fms\n", when, req.remote_addr.c_str(),
                 req.method.c_str(), req.path.c_str(), res.status, res.body.size(), ms);
  });

  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = model() && !stopping_.load();
    res.status = up ? 200 : 503;
    res.set_content(up                 ? R"({"status":"ok"})"
                    : stopping_.load() ? R"({"status":"shutting down"})"
                                       : R"({"status":"loading model"})",
                    "application/json");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
  });
  // The running sequences and the queued requests, as of the scheduler's last step.
  server.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json slots = nlohmann::json::array();
    for (const SlotInfo& slot : metrics_.slots()) {
      slots.push_back({{"id", slot.id},
                       {"request_id", slot.request_id},
                       {"choice", slot.choice},
                       {"state", slot.state},
                       {"position", slot.position},
                       {"n_prompt", slot.n_prompt},
                       {"n_generated", slot.n_generated},
                       {"n_cached", slot.n_cached}});
    }
    res.set_content(slots.dump(), "application/json");
  });
  // The model routes answer 503 until the model is loaded.
  auto with_model = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      const ServingModel* serving = model();
      if (!serving) {
        SendError(res, StatusError(503, "the model is still loading"), ErrorShapeOfPath(req.path));
        return;
      }
      handler(*serving, req, res);
    };
  };
  server.Get("/v1/models", with_model([this](const ServingModel&, const httplib::Request&,
                                             httplib::Response& res) {
               nlohmann::json body = {{"object", "list"},
                                      {"data",
                                       {{{"id", options_.model_name},
                                         {"object", "model"},
                                         {"created", 0},
                                         {"owned_by", "petrel"}}}}};
               res.set_content(body.dump(), "application/json");
             }));
  // llama-server's listing of the adapters a request's `lora` may pick.
  server.Get("/lora-adapters", with_model([](const ServingModel& serving, const httplib::Request&,
                                             httplib::Response& res) {
               res.set_content(LoraAdaptersJson(serving.engine->options().lora).dump(),
                               "application/json");
             }));
  // POST bodies are read here, bounded as they arrive: cpp-httplib 0.11 checks its payload
  // limit against a Content-Length only (it then skips the body and sets 413), and would
  // collect a chunked body of any size. Past the limit the rest is read and dropped, so that the
  // client, still sending, gets the 413 instead of a reset connection.
  auto bounded = [this](auto handler) {
    return httplib::Server::HandlerWithContentReader(
        [this, handler](const httplib::Request& req, httplib::Response& res,
                        const httplib::ContentReader& reader) {
          const size_t limit = options_.max_body_bytes;
          httplib::Request with_body = req;
          bool over = false;
          const bool read = reader([&](const char* data, size_t size) {
            over = over || with_body.body.size() + size > limit;
            if (over) {
              with_body.body.clear();
            } else {
              with_body.body.append(data, size);
            }
            return true;
          });
          if (over || res.status == 413) {
            SendError(res,
                      StatusError(413, "the request body is larger than " +
                                           std::to_string(limit) + " bytes"),
                      ErrorShapeOfPath(req.path));
            return;
          }
          if (!read) {
            SendError(res, StatusError(400, "the request body could not be read"),
                      ErrorShapeOfPath(req.path));
            return;
          }
          handler(with_body, res);
        });
  };
  const std::string model_name = options_.model_name;
  server.Post(
      "/v1/chat/completions",
      bounded(with_model([this, model_name](const ServingModel& serving,
                                            const httplib::Request& req, httplib::Response& res) {
        HandleCompletion(serving, model_name, Endpoint::kChat, open_streams_, req, res);
      })));
  server.Post("/v1/completions", bounded(with_model([this, model_name](const ServingModel& serving,
                                                                       const httplib::Request& req,
                                                                       httplib::Response& res) {
                HandleCompletion(serving, model_name, Endpoint::kCompletion, open_streams_, req,
                                 res);
              })));
  server.Post("/v1/messages", bounded(with_model([this, model_name](const ServingModel& serving,
                                                                    const httplib::Request& req,
                                                                    httplib::Response& res) {
                HandleMessages(serving, model_name, open_streams_, req, res);
              })));
  server.Post("/v1/embeddings", bounded(with_model([model_name](const ServingModel& serving,
                                                                 const httplib::Request& req,
                                                                 httplib::Response& res) {
                HandleEmbeddings(serving, model_name, req, res);
              })));
  server.Post("/tokenize", bounded(with_model(&HandleTokenize)));
  if (options_.web_ui) RouteWebUi(server);
  server.Post("/detokenize", bounded(with_model(&HandleDetokenize)));
}

Status HttpServer::Start() {
  Route();
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ <= 0) return Error("cannot listen on %s (any port)", options_.host.c_str());
  } else {
    if (!server_->bind_to_port(options_.host, options_.port)) {
      return Error("cannot listen on %s:%d (in use, or not an address of this machine)",
                   options_.host.c_str(), options_.port);
    }
    port_ = options_.port;
  }
  WidenListenBacklog(port_);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return Status::Ok();
}

void HttpServer::DrainStreams(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (open_streams_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace petrel::server
