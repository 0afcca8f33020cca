// petrel bench-serve's stream checks on hand-written event streams: petrel's completion chunks
// (tokens and text offsets), the chat-style logprobs shape llama-server sends, usage in the last
// choice's chunk, and the faults each check exists to catch.
#include <gtest/gtest.h>

#include <string>

#include "tools/bench_serve_client.h"
#include "tools/bench_serve_report.h"

namespace petrel::tools {
namespace {

StreamRecord Check(const std::string& body, size_t max_tokens = 2, bool text_chunk_is_token = false) {
  StreamRecord record;
  record.status = 200;
  StreamChecker checker(&record, max_tokens, std::chrono::steady_clock::now(), text_chunk_is_token);
  checker.Feed(body.data(), body.size());
  checker.Finish();
  return record;
}

std::string Event(const std::string& json) { return "data: " + json + "\n\n"; }

std::string PetrelChunk(const std::string& text, size_t offset) {
  return Event(R"({"choices":[{"index":0,"text":")" + text +
               R"(","logprobs":{"tokens":[")" + text + R"("],"text_offset":[)" +
               std::to_string(offset) + R"(]},"finish_reason":null}]})");
}

TEST(BenchServeCheckerTest, PetrelChunksPass) {
  const StreamRecord record = Check(
      PetrelChunk("Once", 0) + PetrelChunk(" upon", 4) +
      Event(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})") +
      Event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})") +
      "data: [DONE]\n\n");
  EXPECT_EQ(record.check_failed, "");
  EXPECT_EQ(record.streamed_tokens, 2u);
  EXPECT_EQ(record.text, "Once upon");
}

TEST(BenchServeCheckerTest, LlamaServerShapeWithUsageInTheLastChoicePasses) {
  const std::string token = R"({"choices":[{"index":0,"text":"ab","logprobs":{"content":[{"id":7,"token":"ab","logprob":-1.0}]},"finish_reason":null}]})";
  const StreamRecord record = Check(
      Event(token) + Event(token) +
      Event(R"({"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2}})") +
      "data: [DONE]\n\n");
  EXPECT_EQ(record.check_failed, "");
  EXPECT_EQ(record.streamed_tokens, 2u);
  EXPECT_EQ(record.completion_tokens, 2u);
}

TEST(BenchServeCheckerTest, WithoutLogprobsEachTextChunkIsOneToken) {
  const std::string token = R"({"choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":null}]})";
  const std::string end =
      R"({"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2}})";
  const StreamRecord record = Check(Event(token) + Event(token) + Event(end) + "data: [DONE]\n\n", 2, true);
  EXPECT_EQ(record.check_failed, "");
  EXPECT_EQ(record.streamed_tokens, 2u);
  // Two tokens sent as one chunk no longer add up.
  EXPECT_NE(Check(Event(token) + Event(end) + "data: [DONE]\n\n", 2, true).check_failed, "");
}

TEST(BenchServeCheckerTest, LostChunkRepeatedUsageAndMissingLogprobsFail) {
  const std::string length_end =
      R"({"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":)";
  auto fails_with = [](const StreamRecord& record, const std::string& what) {
    return record.check_failed.find(what) != std::string::npos;
  };
  EXPECT_PRED2(fails_with,
               Check(PetrelChunk("Once", 0) + PetrelChunk(" time", 9) + Event(length_end + "2}}") +
                     "data: [DONE]\n\n"),
               "text offset 9");
  EXPECT_PRED2(fails_with,
               Check(PetrelChunk("Once", 0) + Event(length_end + "1}}") +
                         Event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})") +
                         "data: [DONE]\n\n",
                     1),
               "two usage chunks");
  EXPECT_PRED2(fails_with,
               Check(Event(R"({"choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})") +
                         "data: [DONE]\n\n",
                     1),
               "no logprobs");
  EXPECT_PRED2(fails_with,
               Check(PetrelChunk("Once", 0) + Event(length_end + "5}}") + "data: [DONE]\n\n", 1),
               "usage says");
}

// A finished greedy request of prompt 0: `text` over `tokens` tokens, ended by `reason` ("" for
// a client that hung up).
FinishedRequest Greedy(const std::string& text, size_t tokens, const std::string& reason) {
  FinishedRequest request;
  request.record.status = 200;
  request.record.text = text;
  request.record.finish_reason = reason;
  request.record.cancelled = reason.empty();
  request.record.streamed_tokens = tokens;
  request.record.completion_tokens = reason.empty() ? 0 : tokens;
  return request;
}

TEST(BenchServeReportTest, GreedyCompletionsOfAPromptAreTheStartOfOneAnother) {
  // Cut by max_tokens or by a hang-up, each is the start of the longest.
  const BenchReport agree = Summarize({Greedy("Once upon", 2, "length"), Greedy("Once", 1, ""),
                                       Greedy("Once upon a time", 4, "length"),
                                       Greedy("Once upon a", 3, "length")},
                                      1.0, true);
  EXPECT_EQ(agree.check_failures, 0u) << agree.first_problems[0];
  EXPECT_EQ(agree.repeated_prompts, 3u);
  EXPECT_EQ(agree.ok, 3u);
  EXPECT_EQ(agree.cancelled, 1u);
  // Another text at the same place fails, whichever came first.
  EXPECT_EQ(Summarize({Greedy("Once upon", 2, "length"), Greedy("Once under", 2, "length")}, 1.0,
                      true)
                .check_failures,
            1u);
  EXPECT_EQ(
      Summarize({Greedy("Once upon a", 3, "length"), Greedy("Twice", 1, "")}, 1.0, true)
          .check_failures,
      1u);
  // One that stopped by itself ends every longer one there.
  EXPECT_EQ(Summarize({Greedy("Once", 2, "stop"), Greedy("Once upon", 3, "length")}, 1.0, true)
                .check_failures,
            1u);
  // A hung-up request is not a failure, and sampled requests are not compared.
  EXPECT_EQ(Summarize({Greedy("a", 1, ""), Greedy("b", 1, "")}, 1.0, false).check_failures, 0u);
}

}  // namespace
}  // namespace petrel::tools
