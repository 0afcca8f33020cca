// The endpoints that need the model: completions (streamed or whole) and the tokenizer routes.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/completion_request.h"
#include "server/http_server.h"  // ServingModel
#include "server/job.h"
#include "server/response_format.h"

namespace petrel::server {

void SendError(httplib::Response& res, const ApiError& error,
               ErrorShape shape = ErrorShape::kOpenAi);

// The steps of every endpoint that generates, whatever API shape it answers in:
// a 400 for a model that gives only embeddings;
ApiResult RefuseEmbeddingsOnly(const ServingModel& model);
// what the model allows a request to ask for;
RequestLimits LimitsOf(const ServingModel& model);
// the prompt (through the chat template for chat requests), its length against the context, the
// reply parsing (tool calls, reasoning) and the grammar against the vocabulary: the job, or the
// error to answer with;
ApiResult PrepareJob(const ServingModel& model, CompletionRequest request,
                     std::shared_ptr<Job>* out);
// the scheduler, then the events relayed in `response`'s shapes, whole or streamed.
void RunJob(const ServingModel& model, std::shared_ptr<Job> job,
            std::shared_ptr<ResponseFormat> response, std::atomic<int>& open_streams,
            httplib::Response& res);

// POST /v1/chat/completions and /v1/completions. `open_streams` counts the streamed responses
// not yet fully written.
void HandleCompletion(const ServingModel& model, const std::string& model_name, Endpoint endpoint,
                      std::atomic<int>& open_streams, const httplib::Request& req,
                      httplib::Response& res);
// POST /v1/messages: Anthropic's Messages API on the same scheduler, template and reply
// parsers as /v1/chat/completions.
void HandleMessages(const ServingModel& model, const std::string& model_name,
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
