// `petrel run --prompt-ids`: token ids fed as given (no BOS added), so a continuation can be
// compared with another engine's; the ids of `petrel tokenize` continue as the text does; bad
// ids are one-line errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/cli_runner.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::StoryF32Gguf;

nlohmann::json RunJson(const std::vector<std::string>& prompt_args) {
  std::vector<std::string> args = {"run",    "-m", StoryF32Gguf(), "-n", "24",
                                   "--temp", "0",  "--json"};
  args.insert(args.end(), prompt_args.begin(), prompt_args.end());
  const Output out = Petrel(args);
  EXPECT_EQ(out.exit_code, 0) << out.err;
  return out.exit_code == 0 ? nlohmann::json::parse(out.out) : nlohmann::json::object();
}

std::string Join(const std::vector<int>& ids) {
  std::string text;
  for (const int id : ids) text += (text.empty() ? "" : ",") + std::to_string(id);
  return text;
}

TEST(PromptIds, TokenizedIdsContinueAsTheText) {
  const std::string text = "Once upon a time, there was a little dog";
  const Output tokens = Petrel({"tokenize", "-m", StoryF32Gguf(), text});
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  const auto ids = nlohmann::json::parse(tokens.out).get<std::vector<int>>();
  ASSERT_EQ(ids.front(), 1) << "tokenize includes the BOS token";
  const auto from_text = RunJson({"-p", text});
  const auto from_ids = RunJson({"--prompt-ids", Join(ids)});
  EXPECT_EQ(from_ids["prompt_ids"], from_text["prompt_ids"]);
  EXPECT_EQ(from_ids["new_ids"], from_text["new_ids"]);
  EXPECT_EQ(from_ids["text"], from_text["text"]);
  // No BOS is added: the ids without it are the prompt as given.
  const std::vector<int> no_bos(ids.begin() + 1, ids.end());
  const auto bare = RunJson({"--prompt-ids", Join(no_bos) + ", "  // spaces are allowed
                                                 + "5"});
  std::vector<int> want = no_bos;
  want.push_back(5);
  EXPECT_EQ(bare["prompt_ids"].get<std::vector<int>>(), want);
}

TEST(PromptIds, Errors) {
  const std::vector<std::string> run = {"run", "-m", StoryF32Gguf(), "-n", "1", "--prompt-ids"};
  auto with = [&](const std::string& ids, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = run;
    args.push_back(ids);
    args.insert(args.end(), extra.begin(), extra.end());
    return Petrel(args);
  };
  ExpectOneLineError(with("1,x,3"), "--prompt-ids: 'x' is not a token id");
  ExpectOneLineError(with("1,,3"), "--prompt-ids: '' is not a token id");
  ExpectOneLineError(with("1,-4"), "--prompt-ids: '-4' is not a token id");
  ExpectOneLineError(with("1,99999999999"), "is not a token id");
  ExpectOneLineError(with("1,2048"),
                     "--prompt-ids: token id 2048 is outside the vocabulary (0..2047)");
  ExpectOneLineError(with("1,2", {"--chat"}), "--prompt-ids cannot be used with --chat");
  ExpectOneLineError(with("1,2", {"-p", "text"}), "--prompt-ids");
}

}  // namespace
}  // namespace petrel
