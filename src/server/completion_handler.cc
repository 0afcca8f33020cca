// HandleCompletion and the steps every generating endpoint shares: build the prompt, check it,
// queue the job, then relay its events to the client through the API's ResponseFormat: as
// Server-Sent Events while they come, or as one body at the end.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/generation/grammar_constraint.h"
#include "core/tokenizer/tokenizer.h"
#include "server/handlers.h"
#include "server/job.h"
#include "server/openai_response.h"
#include "server/prompt_builder.h"
#include "server/reply_setup.h"

namespace petrel::server {
namespace {

// How long a stream may be silent (a long prompt being prefilled, a queue) before a comment
// line goes out: a client that left is noticed by the failed write.
constexpr std::chrono::milliseconds kHeartbeat(1000);

void Respond(const std::shared_ptr<Job>& job, ResponseFormat& response, httplib::Response& res) {
  std::vector<JobEvent> events;
  for (;;) {
    job->Wait(kHeartbeat, &events);
    for (const JobEvent& event : events) {
      switch (event.kind) {
        case JobEvent::Kind::kDelta:
        case JobEvent::Kind::kChoiceEnd:
          response.Add(event);
          break;
        case JobEvent::Kind::kDone:
          res.set_content(response.Body(event.usage), "application/json");
          return;
        case JobEvent::Kind::kError:
          SendError(res, event.error, response.error_shape());
          return;
      }
    }
  }
}

void Stream(const std::shared_ptr<Job>& job, std::shared_ptr<ResponseFormat> response,
            std::atomic<int>& open_streams, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // Counts the stream as open until httplib has dropped the provider, i.e. written the stream
  // to its end or given up on the connection.
  ++open_streams;
  std::shared_ptr<void> open(nullptr, [&open_streams](void*) { --open_streams; });
  auto provider = [job, response, open, started = false, events = std::vector<JobEvent>()](
                      size_t, httplib::DataSink& sink) mutable {
    auto write = [&](const std::string& text) {
      return text.empty() || sink.write(text.data(), text.size());
    };
    if (!started) {
      started = true;
      if (!write(response->StreamStart())) {
        job->Cancel();
        return false;
      }
    }
    if (!job->Wait(kHeartbeat, &events)) {
      if (write(response->Heartbeat())) return true;
      job->Cancel();
      return false;
    }
    for (const JobEvent& event : events) {
      bool written = true;
      switch (event.kind) {
        case JobEvent::Kind::kDelta:
        case JobEvent::Kind::kChoiceEnd:
          written = write(response->StreamEvent(event));
          break;
        case JobEvent::Kind::kDone:
        case JobEvent::Kind::kError:
          written =
              write(event.kind == JobEvent::Kind::kDone ? response->StreamEnd(event.usage)
                                                        : response->StreamFailure(event.error));
          if (written) {
            sink.done();
            return true;
          }
          break;
      }
      if (!written) {
        // The client is gone: the scheduler frees its sequences at its next step.
        job->Cancel();
        return false;
      }
    }
    return true;
  };
  // Also when the connection ends any other way before the stream's end.
  auto release = [job](bool success) {
    if (!success) job->Cancel();
  };
  res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
}

// A grammar the vocabulary cannot start (it needs a character no token spells) is the
// request's fault: answered 400 before any streamed byte, rather than failing the stream.
ApiResult CheckGrammarAgainstVocabulary(const CompletionRequest& request,
                                        const Tokenizer& tokenizer, size_t n_vocab) {
  if (request.sampling.grammar.empty()) return std::nullopt;
  const std::string field = request.grammar_field.empty() ? "grammar" : request.grammar_field;
  auto matcher = CompileGrammarConstraint(request.sampling.grammar, tokenizer, n_vocab);
  if (!matcher.ok())
    return InvalidField(field, matcher.status().message(), "grammar_unsatisfiable");
  std::vector<uint8_t> allowed(n_vocab);
  const Status status = (*matcher)->ComputeMask(&allowed);
  if (!status.ok()) {
    return InvalidField(field,
                        status.message() +
                            " (the model's vocabulary cannot spell what the "
                            "grammar requires first)",
                        "grammar_unsatisfiable");
  }
  return std::nullopt;
}

}  // namespace

ApiResult PrepareJob(const ServingModel& model, CompletionRequest request,
                     std::shared_ptr<Job>* out) {
  Engine& engine = *model.engine;
  const size_t n_vocab = size_t(engine.config().n_vocab);
  std::vector<int32_t> prompt;
  PETREL_RETURN_IF_API_ERROR(
      BuildPrompt(request, *engine.tokenizer(), model.chat, n_vocab, &prompt));
  const bool chat = request.endpoint == Endpoint::kChat;
  if (prompt.size() > engine.context()) {
    // OpenAI's answer, which its clients recognise (and do not retry).
    return ApiError{400,
                    "This model's maximum context length is " + std::to_string(engine.context()) +
                        " tokens. However, your " + (chat ? "messages" : "prompt") +
                        " resulted in " + std::to_string(prompt.size()) + " tokens.",
                    "invalid_request_error", chat ? "messages" : "prompt",
                    "context_length_exceeded"};
  }
  if (chat) {
    // The prompt's last tokens, to see whether the template opened a think block.
    const size_t tail = std::min<size_t>(prompt.size(), 8);
    const std::string prompt_tail = engine.tokenizer()->Decode(
        std::vector<int32_t>(prompt.end() - tail, prompt.end()), /*skip_special=*/false);
    PETREL_RETURN_IF_API_ERROR(SetUpReplyParsing(model.chat->source(), model.tool_call_format,
                                                 model.reasoning_format, prompt_tail, &request));
  }
  PETREL_RETURN_IF_API_ERROR(CheckGrammarAgainstVocabulary(request, *engine.tokenizer(), n_vocab));
  *out = std::make_shared<Job>(std::move(request), std::move(prompt));
  return std::nullopt;
}

ApiResult RefuseEmbeddingsOnly(const ServingModel& model) {
  const Engine& engine = *model.engine;
  if (!engine.config().embeddings_only) return std::nullopt;
  return StatusError(400, "the model (" + engine.config().architecture +
                              ") gives embeddings only and cannot complete text; use "
                              "/v1/embeddings");
}

RequestLimits LimitsOf(const ServingModel& model) {
  const Engine& engine = *model.engine;
  return RequestLimits{engine.context(), size_t(engine.config().n_vocab),
                       model.scheduler->options().parallel, engine.options().lora};
}

void RunJob(const ServingModel& model, std::shared_ptr<Job> job,
            std::shared_ptr<ResponseFormat> response, std::atomic<int>& open_streams,
            httplib::Response& res) {
  if (ApiResult error = model.scheduler->Submit(job)) {
    SendError(res, *error, response->error_shape());
    return;
  }
  if (job->request().stream) {
    Stream(job, std::move(response), open_streams, res);
  } else {
    Respond(job, *response, res);
  }
}

void HandleCompletion(const ServingModel& model, const std::string& model_name, Endpoint endpoint,
                      std::atomic<int>& open_streams, const httplib::Request& req,
                      httplib::Response& res) {
  CompletionRequest request;
  std::shared_ptr<Job> job;
  ApiResult error = RefuseEmbeddingsOnly(model);
  if (!error) error = ParseCompletionRequest(req.body, endpoint, LimitsOf(model), &request);
  if (!error) error = PrepareJob(model, std::move(request), &job);
  if (error) {
    SendError(res, *error);
    return;
  }
  auto response =
      std::make_shared<OpenAiResponse>(job->request(), *model.engine->tokenizer(), model_name);
  RunJob(model, std::move(job), std::move(response), open_streams, res);
}

}  // namespace petrel::server
