// Speculative decoding end to end: `run` and `chat` with --draft and --lookup-ngram give the
// plain greedy output with acceptance figures in the timings and the stats line; `bench` compares
// the two; bad draft models and flag combinations are one-line errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/cli_runner.h"
#include "util/pty_process.h"  // WriteChatTemplate
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::SharedDir;
using testing::StoryF32Gguf;
using testing::StoryQ8Gguf;

nlohmann::json RunJson(std::vector<std::string> extra, const std::string& prompt) {
  std::vector<std::string> args = {"run", "-m",           StoryF32Gguf(), "-p", prompt,
                                   "-n",  "48",           "--temp",       "0",  "-t",
                                   "2",   "--ignore-eos", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Output output = Petrel(args);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  auto json = nlohmann::json::parse(output.out, nullptr, false);
  EXPECT_TRUE(json.is_object()) << output.out;
  return json;
}

TEST(CliSpeculative, RunGreedyOutputIsPlainDecodingsWithEitherSource) {
  for (const std::string prompt :
       {"Once upon a time, there was a cat", "Sam said: go, go, go, go, go"}) {
    const nlohmann::json plain = RunJson({}, prompt);
    for (const std::vector<std::string>& extra :
         std::vector<std::vector<std::string>>{{"--draft", StoryQ8Gguf(), "--draft-max", "5"},
                                               {"--draft", StoryF32Gguf(), "--draft-min", "2"},
                                               {"--lookup-ngram", "3", "--draft-max", "4"}}) {
      const nlohmann::json spec = RunJson(extra, prompt);
      EXPECT_EQ(spec["new_ids"], plain["new_ids"]) << extra[0] << " " << extra[1];
      EXPECT_EQ(spec["text"], plain["text"]);
      const auto& timings = spec["timings"];
      ASSERT_TRUE(timings.contains("acceptance_rate")) << timings.dump();
      EXPECT_GE(timings["acceptance_rate"].get<double>(), 0.0);
      EXPECT_LE(timings["acceptance_rate"].get<double>(), 1.0);
      EXPECT_GE(timings["tokens_per_target_pass"].get<double>(), 1.0);
      if (extra[1] == StoryF32Gguf()) {
        EXPECT_EQ(timings["acceptance_rate"].get<double>(), 1.0);  // the draft is the model
        EXPECT_GT(timings["tokens_per_target_pass"].get<double>(), 2.0);
      }
    }
    EXPECT_EQ(plain["timings"]["tokens_per_target_pass"].get<double>(), 1.0);
    EXPECT_FALSE(plain["timings"].contains("acceptance_rate"));
  }
}

TEST(CliSpeculative, StatsLineReportsAcceptance) {
  const Output output =
      Petrel({"run", "-m", StoryF32Gguf(), "-p", "Lily and Tom", "-n", "24", "--temp", "0.7",
              "--seed", "3", "-t", "2", "--draft", StoryQ8Gguf()});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  EXPECT_NE(output.err.find("accepted"), std::string::npos) << output.err;
  EXPECT_NE(output.err.find("tokens per pass"), std::string::npos) << output.err;
}

TEST(CliSpeculative, ChatRepliesAreThoseOfPlainDecoding) {
  const std::string chat_template = testing::WriteChatTemplate("cli_speculative");
  auto chat = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"chat",        "-m", StoryF32Gguf(), "--chat-template-file",
                                     chat_template, "-n", "16",           "--ignore-eos",
                                     "--temp",      "0",  "-t",           "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Output output = Petrel(args, "Tell me a story\nAnd another one\n/exit\n");
    EXPECT_EQ(output.exit_code, 0) << output.err;
    EXPECT_NE(output.err.find("reply: 16 tokens"), std::string::npos) << output.err;
    return output;
  };
  const Output plain = chat({});
  const Output lookup = chat({"--lookup-ngram", "2"});
  const Output draft = chat({"--draft", StoryQ8Gguf(), "--draft-max", "4"});
  EXPECT_EQ(lookup.out, plain.out);
  EXPECT_EQ(draft.out, plain.out);
  EXPECT_NE(draft.err.find("accepted"), std::string::npos) << draft.err;
  std::remove(chat_template.c_str());
}

TEST(CliSpeculative, BenchComparesPlainAndSpeculative) {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--lookup-ngram", "2"}, {"--draft", StoryQ8Gguf(), "--draft-max", "4"}}) {
    std::vector<std::string> args = {"bench", "-m", StoryF32Gguf(), "-n", "24",
                                     "-r",    "1",  "-t",           "2",  "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Output output = Petrel(args);
    ASSERT_EQ(output.exit_code, 0) << output.err;
    std::vector<nlohmann::json> lines;
    size_t start = 0;
    for (size_t end; (end = output.out.find('\n', start)) != std::string::npos; start = end + 1) {
      lines.push_back(nlohmann::json::parse(output.out.substr(start, end - start), nullptr, false));
    }
    ASSERT_EQ(lines.size(), 2u) << output.out;
    EXPECT_EQ(lines[0]["test"], "tg24");
    EXPECT_GT(lines[0]["tokens_per_second"].get<double>(), 0.0);
    EXPECT_GT(lines[1]["tokens_per_second"].get<double>(), 0.0);
    EXPECT_TRUE(lines[1]["identical_output"].get<bool>());
    EXPECT_TRUE(lines[1].contains("acceptance_rate"));
    EXPECT_GE(lines[1]["tokens_per_target_pass"].get<double>(), 1.0);
  }
}

TEST(CliSpeculative, BadDraftsAndFlagsAreOneLineErrors) {
  // Byte vocabularies: one of the story model's size whose token texts differ, one smaller.
  const std::string same_size = testing::ScratchDir() + "/speculative_byte2048.gguf";
  const std::string smaller = testing::ScratchDir() + "/speculative_byte300.gguf";
  ASSERT_EQ(
      Petrel({"synth", "--shape", "64x1x2x2x128", "--n-vocab", "2048", "-o", same_size}).exit_code,
      0);
  ASSERT_EQ(
      Petrel({"synth", "--shape", "64x1x2x2x128", "--n-vocab", "300", "-o", smaller}).exit_code, 0);
  ExpectOneLineError(
      Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "-n", "4", "--draft", same_size}),
      "token 1 is \"<s>\" in the draft model but \"<|start_story|>\" in the model");
  ExpectOneLineError(
      Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "-n", "4", "--draft", smaller}),
      "the draft model's vocabulary has 300 tokens, the model's 2048");
  ExpectOneLineError(Petrel({"bench", "-m", StoryF32Gguf(), "-n", "4", "--draft", smaller}),
                     "vocabulary has 300 tokens");
  std::remove(same_size.c_str());
  std::remove(smaller.c_str());
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "-n", "4", "--draft",
                             SharedDir() + "/no/such/draft.gguf"}),
                     "--draft");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "--draft-max", "4"}),
                     "--draft-max needs --draft or --lookup-ngram");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "--lookup-ngram", "2",
                             "--draft-min", "5", "--draft-max", "2"}),
                     "--draft-min 5 is above --draft-max 2");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "--lookup-ngram", "2",
                             "--draft-threads", "2"}),
                     "--draft-threads needs --draft");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "--lookup-ngram", "0"}),
                     "--lookup-ngram");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "--lookup-ngram", "2",
                             "--draft", StoryQ8Gguf()}),
                     "--lookup-ngram");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "Hi", "--beams", "2", "-n", "4",
                             "--lookup-ngram", "2"}),
                     "--beams");
  ExpectOneLineError(Petrel({"bench", "-m", StoryF32Gguf(), "--prompt", "Hi"}),
                     "--prompt needs --draft or --lookup-ngram");
}

}  // namespace
}  // namespace petrel
