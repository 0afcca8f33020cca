// HandleMessages: Anthropic's Messages API over the chat endpoint's steps (handlers.h), with
// Anthropic's request fields, response shapes and error objects.
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/handlers.h"

namespace petrel::server {

void HandleMessages(const ServingModel& model, const std::string& model_name,
                    std::atomic<int>& open_streams, const httplib::Request& req,
                    httplib::Response& res) {
  CompletionRequest request;
  std::shared_ptr<Job> job;
  ApiResult error = RefuseEmbeddingsOnly(model);
  if (!error) error = ParseMessagesRequest(req.body, LimitsOf(model), &request);
  if (!error) error = PrepareJob(model, std::move(request), &job);
  if (error) {
    SendError(res, *error, ErrorShape::kAnthropic);
    return;
  }
  auto response =
      std::make_shared<AnthropicResponse>(job->request(), model_name, job->prompt().size());
  RunJob(model, std::move(job), std::move(response), open_streams, res);
}

}  // namespace petrel::server
