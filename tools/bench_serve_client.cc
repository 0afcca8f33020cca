// BenchClient and StreamChecker: one streamed completion, timed and checked chunk by chunk.
#include "tools/bench_serve_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace petrel::tools {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

size_t SizeField(const json& object, const char* name) {
  const auto it = object.find(name);
  return it != object.end() && it->is_number_unsigned() ? it->get<size_t>() : 0;
}

}  // namespace

void StreamChecker::Fail(const std::string& why) {
  if (record_->check_failed.empty()) record_->check_failed = why;
}

void StreamChecker::Feed(const char* data, size_t size) {
  received_ = true;
  buffer_.append(data, size);
  for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos;) {
    const std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    if (event.empty() || event[0] == ':') continue;  // a keep-alive comment
    if (event.rfind("data: ", 0) != 0) {
      Fail("an event that is neither data nor a comment: " + event.substr(0, 80));
      continue;
    }
    Event(event.substr(6));
  }
}

void StreamChecker::Event(const std::string& data) {
  if (done_) {
    Fail("an event after data: [DONE]");
    return;
  }
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) {
    Fail("a chunk that is not a JSON object: " + data.substr(0, 80));
    return;
  }
  if (chunk.contains("error")) {
    const json& error = chunk["error"];
    record_->error =
        "error event: " +
        (error.is_object() && error.contains("message") ? error["message"].dump() : error.dump());
    return;
  }
  const json choices = chunk.value("choices", json::array());
  if (!choices.is_array()) {
    Fail("'choices' is not an array");
    return;
  }
  for (const json& choice : choices) {
    if (!choice.is_object() || choice.value("index", -1) != 0) {
      Fail("a choice with an index other than 0: " + choice.dump().substr(0, 80));
      continue;
    }
    if (usage_seen_) Fail("a choice after the usage chunk");
    if (!record_->finish_reason.empty()) Fail("a choice after the finish_reason");
    const std::string text = choice.contains("text") && choice["text"].is_string()
                                 ? choice["text"].get<std::string>()
                                 : std::string();
    size_t tokens = 0;
    const json& logprobs = choice.contains("logprobs") ? choice["logprobs"] : json();
    if (logprobs.is_object() && logprobs.contains("content")) {
      // The chat-style shape some servers (llama-server) also use for completions: one entry a
      // token, without offsets.
      const json& content = logprobs["content"];
      tokens = content.is_array() ? content.size() : 0;
    } else if (logprobs.is_object()) {
      const json& token_texts = logprobs.value("tokens", json::array());
      const json& offsets = logprobs.value("text_offset", json::array());
      tokens = token_texts.is_array() ? token_texts.size() : 0;
      // Each chunk's first token starts where the text received so far ends: a lost, repeated
      // or reordered chunk moves it.
      if (tokens > 0 && (!offsets.is_array() || offsets.empty() || !offsets[0].is_number() ||
                         offsets[0].get<size_t>() != record_->text.size())) {
        Fail("a chunk at text offset " +
             (offsets.is_array() && !offsets.empty() ? offsets[0].dump() : std::string("?")) +
             " after " + std::to_string(record_->text.size()) + " bytes of text");
      }
    } else if (text_chunk_is_token_) {
      tokens = text.empty() ? 0 : 1;
    } else if (!text.empty()) {
      Fail("a chunk with text but no logprobs");
    }
    if (!text.empty() && tokens == 0) Fail("a chunk with text but no tokens");
    record_->text += text;
    if (tokens > 0) {
      const Clock::time_point now = Clock::now();
      if (record_->token_chunks == 0) {
        record_->ttft_s = Seconds(now - sent_);
      } else {
        // A chunk of k tokens (held-back text released at once) counts as k gaps of 1/k.
        const double gap = Seconds(now - last_token_) / double(tokens);
        for (size_t i = 0; i < tokens; ++i) record_->inter_token_s.push_back(gap);
      }
      last_token_ = now;
      ++record_->token_chunks;
      record_->streamed_tokens += tokens;
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      record_->finish_reason = choice["finish_reason"].get<std::string>();
    }
  }
  // Usage last: a server may put it in the chunk that carries the last choice.
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    const json& usage = chunk["usage"];
    record_->prompt_tokens = SizeField(usage, "prompt_tokens");
    record_->completion_tokens = SizeField(usage, "completion_tokens");
    if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
      record_->cached_tokens = SizeField(usage["prompt_tokens_details"], "cached_tokens");
    }
    if (usage_seen_) Fail("two usage chunks");
    usage_seen_ = true;
  }
}

void StreamChecker::Finish() {
  if (!record_->error.empty()) return;
  if (!buffer_.empty()) Fail("the stream ended inside an event");
  if (!done_) Fail("no data: [DONE]");
  if (!usage_seen_) Fail("no usage chunk");
  if (record_->finish_reason.empty()) Fail("no finish_reason");
  // An end-of-generation token counts in usage but has no text and is not streamed.
  const bool end_token = record_->finish_reason == "stop" &&
                         record_->streamed_tokens + 1 == record_->completion_tokens;
  if (record_->streamed_tokens != record_->completion_tokens && !end_token) {
    Fail(std::to_string(record_->streamed_tokens) + " tokens streamed, usage says " +
         std::to_string(record_->completion_tokens));
  }
  if (record_->completion_tokens > max_tokens_) {
    Fail(std::to_string(record_->completion_tokens) + " tokens, more than max_tokens " +
         std::to_string(max_tokens_));
  }
  if (record_->finish_reason == "length" && record_->completion_tokens != max_tokens_) {
    Fail("finish_reason length after " + std::to_string(record_->completion_tokens) +
         " of max_tokens " + std::to_string(max_tokens_) + " tokens");
  }
}

BenchClient::BenchClient(const std::string& url, const std::string& api_key)
    : client_(std::make_unique<httplib::Client>(url)), api_key_(api_key) {
  client_->set_keep_alive(true);
  client_->set_connection_timeout(30, 0);
  client_->set_read_timeout(600, 0);
  client_->set_write_timeout(60, 0);
}

BenchClient::~BenchClient() = default;

StreamRecord BenchClient::Complete(const BenchRequest& request) {
  StreamRecord record;
  json body = {{"model", "bench"},
               {"prompt", request.prompt},
               {"max_tokens", request.max_tokens},
               {"temperature", request.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  // The sampled tokens of each chunk: what the checks count.
  if (request.logprobs >= 0) body["logprobs"] = request.logprobs;
  if (request.seed >= 0) body["seed"] = request.seed;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  if (!api_key_.empty()) req.set_header("Authorization", "Bearer " + api_key_);
  req.body = body.dump();
  const Clock::time_point sent = Clock::now();
  StreamChecker checker(&record, request.max_tokens, sent, request.logprobs < 0);
  std::string error_body;
  req.response_handler = [&](const httplib::Response& res) {
    record.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (record.status == 200) {
      checker.Feed(data, size);
      if (request.cancel_after_tokens > 0 &&
          record.streamed_tokens >= request.cancel_after_tokens && record.error.empty()) {
        record.cancelled = true;
        return false;  // cpp-httplib closes the connection: the server sees the client go
      }
    } else if (error_body.size() < 4096) {
      error_body.append(data, size);
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool sent_ok = client_->send(req, res, error);
  if (!sent_ok && record.status == 0 && !checker.received()) {
    // A keep-alive connection the server had closed (cpp-httplib servers close one after a
    // fixed number of requests): nothing was answered, so the request goes again on a new one.
    record.retried = true;
    error = httplib::Error::Success;
    sent_ok = client_->send(req, res, error);
  }
  record.end = Clock::now();
  record.latency_s = Seconds(record.end - sent);
  // The chunks before the hang-up were checked as they came; the end of the stream never came.
  if (record.cancelled) return record;
  if (!sent_ok || error != httplib::Error::Success) {
    record.error = "HTTP: " + httplib::to_string(error);
    if (record.status == 0) return record;
  }
  if (record.status != 200) {
    const json parsed = json::parse(error_body, nullptr, false);
    record.error = "HTTP " + std::to_string(record.status) + ": " +
                   (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object() &&
                            parsed["error"].contains("message")
                        ? parsed["error"]["message"].get<std::string>()
                        : error_body.substr(0, 200));
    return record;
  }
  if (record.error.empty()) checker.Finish();
  return record;
}

}  // namespace petrel::tools
