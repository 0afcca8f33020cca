// How a job's events go back to the client in the shapes of the API it called (OpenAI's chat and
// completions, Anthropic's messages): whole at the end, or streamed as Server-Sent Events. The
// handler that relays the events is the same for every API; only this side differs.
#pragma once

#include <string>

#include "server/api_error.h"
#include "server/job.h"

namespace petrel::server {

class ResponseFormat {
 public:
  virtual ~ResponseFormat() = default;

  // Streaming, in this order: the start (before any event), then the text of each kDelta and
  // kChoiceEnd event ("" for none), then the end or an error; each is whole SSE events. A
  // heartbeat goes out while the stream is silent.
  virtual std::string StreamStart() { return ""; }
  virtual std::string StreamEvent(const JobEvent& event) = 0;
  virtual std::string StreamEnd(const Usage& usage) = 0;
  virtual std::string StreamFailure(const ApiError& error) = 0;
  virtual std::string Heartbeat() const = 0;

  // Whole response: every event added, then the body.
  virtual void Add(const JobEvent& event) = 0;
  virtual std::string Body(const Usage& usage) const = 0;

  // The shape of the errors answered before the response starts.
  virtual ErrorShape error_shape() const = 0;
};

}  // namespace petrel::server
