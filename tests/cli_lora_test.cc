// `--lora` end to end: the option on the commands that load a model, the same greedy text from a
// run-time adapter as from `petrel quantize --lora`'s merged file, scale 0 as the base model,
// and one-line errors for a missing adapter or a folder input to quantize --lora.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/format/gguf_writer.h"
#include "util/cli_runner.h"
#include "util/story_lora_adapter.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::StoryF32Gguf;

std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/cli_lora_" + std::to_string(getpid()) + "_" + name;
}

// A random rank-4 adapter of the story model, in llama.cpp's layout.
std::string WriteStoryAdapter() {
  const std::string path = Scratch("adapter.gguf");
  testing::WriteStoryLoraAdapter(path, 5);
  return path;
}

std::vector<int> GreedyIds(const std::string& model, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run", "-m", model,    "-p", "Once upon a time",
                                   "-n",  "24", "--temp", "0",  "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Output out = Petrel(args);
  EXPECT_EQ(out.exit_code, 0) << out.err;
  if (out.exit_code != 0) return {};
  return nlohmann::json::parse(out.out)["new_ids"].get<std::vector<int>>();
}

TEST(LoraCli, RunTimeAdapterMatchesTheMergedFile) {
  const std::string adapter = WriteStoryAdapter();
  const std::string merged = Scratch("merged.gguf");
  const Output quantize = Petrel({"quantize", "--lora", adapter, StoryF32Gguf(), merged, "F32"});
  ASSERT_EQ(quantize.exit_code, 0) << quantize.err;
  const auto base = GreedyIds(StoryF32Gguf(), {});
  const auto adapted = GreedyIds(StoryF32Gguf(), {"--lora", adapter});
  EXPECT_EQ(adapted, GreedyIds(merged, {}));
  EXPECT_NE(adapted, base) << "the adapter must change the greedy text";
  EXPECT_EQ(GreedyIds(StoryF32Gguf(), {"--lora", adapter + ":0"}), base);
  // Repeatable: two halves are the whole.
  EXPECT_EQ(GreedyIds(StoryF32Gguf(), {"--lora", adapter + ":0.5", "--lora", adapter + ":0.5"}),
            adapted);
  std::remove(adapter.c_str());
  std::remove(merged.c_str());
}

TEST(LoraCli, EveryModelCommandTakesTheOption) {
  for (const char* command : {"run", "chat", "logits", "perplexity", "bench", "serve", "imatrix"}) {
    const Output help = Petrel({command, "--help"});
    EXPECT_NE(help.out.find("--lora"), std::string::npos) << command;
  }
  const std::string adapter = WriteStoryAdapter();
  const std::string out = Scratch("logits.f32");
  const Output logits =
      Petrel({"logits", "-m", StoryF32Gguf(), "--lora", adapter, "--ids", "1,80,299", "-o", out});
  EXPECT_EQ(logits.exit_code, 0) << logits.err;
  std::remove(out.c_str());
  std::remove(adapter.c_str());
}

TEST(LoraCli, Errors) {
  ExpectOneLineError(
      Petrel({"run", "-m", StoryF32Gguf(), "--lora", Scratch("absent.gguf"), "-p", "x", "-n", "1"}),
      "no such LoRA adapter");
  ExpectOneLineError(
      Petrel({"run", "-m", StoryF32Gguf(), "--lora", StoryF32Gguf(), "-p", "x", "-n", "1"}),
      "not a LoRA adapter");
  ExpectOneLineError(Petrel({"quantize", "--lora", StoryF32Gguf(), testing::StoryHf(),
                             Scratch("out.gguf"), "Q8_0"}),
                     "--lora needs a GGUF input");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "--lora", "a.gguf:inf", "-p", "x"}),
                     "scale must be a finite number");
}

}  // namespace
}  // namespace petrel
