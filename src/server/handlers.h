// The endpoints that need the model: completions (streamed or whole) and the tokenizer routes.
#pragma once

#include <httplib.h>

#include <atomic>
#include <string>

#include "server/api_error.h"
#include "server/completion_request.h"
#include "server/http_server.h"  // ServingModel

namespace petrel::server {

void SendError(httplib::Response& res, const ApiError& error);

// POST /v1/chat/completions and /v1/completions. `open_streams` counts the streamed responses
// not yet fully written.
void HandleCompletion(const ServingModel& model, const std::string& model_name, Endpoint endpoint,
                      std::atomic<int>& open_streams, const httplib::Request& req,
                      httplib::Response& res);
// POST /v1/embeddings.
void HandleEmbeddings(const ServingModel& model, const std::string& model_name,
                      const httplib::Request& req, httplib::Response& res);
// POST /tokenize {"content", "add_special"?} -> {"tokens"}.
void HandleTokenize(const ServingModel& model, const httplib::Request& req, httplib::Response& res);
// POST /detokenize {"tokens"} -> {"content"}.
void HandleDetokenize(const ServingModel& model, const httplib::Request& req,
                      httplib::Response& res);

}  // namespace petrel::server
