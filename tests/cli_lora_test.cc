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

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::StoryF32Gguf;

std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/cli_lora_" + std::to_string(getpid()) + "_" + name;
}

// A random rank-4 adapter of the story model's attention and FFN matrices, in llama.cpp's layout.
std::string WriteStoryAdapter() {
  const std::string path = Scratch("adapter.gguf");
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("general.type", "adapter");
  writer.SetString("adapter.type", "lora");
  writer.SetF32("adapter.lora.alpha", 8.0f);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const struct {
    const char* name;
    int64_t n_in, n_out;
  } targets[] = {{"attn_q", 128, 128}, {"attn_v", 128, 64}, {"ffn_down", 384, 128}};
  constexpr int64_t kRank = 4;
  for (int l = 0; l < 2; ++l) {
    for (const auto& target : targets) {
      const std::string stem = "blk." + std::to_string(l) + "." + target.name + ".weight";
      for (const bool is_a : {true, false}) {
        const TensorDesc desc = is_a ? TensorDesc::Make(DType::kF32, {target.n_in, kRank})
                                     : TensorDesc::Make(DType::kF32, {kRank, target.n_out});
        auto values = std::make_shared<std::vector<float>>(size_t(desc.n_elems()));
        for (float& v : *values) v = normal(rng);
        writer.AddTensor(stem + (is_a ? ".lora_a" : ".lora_b"), desc, [values](void* dst) {
          std::memcpy(dst, values->data(), values->size() * sizeof(float));
        });
      }
    }
  }
  EXPECT_TRUE(writer.Write(path).ok());
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
