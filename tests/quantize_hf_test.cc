// `petrel quantize` from a Hugging Face folder: the story folder converted to GGUF gives the
// golden logits and tokenization, and its Q8_0 weights are byte-identical to llama.cpp's
// conversion + quantization of the same model (shared/models/story-gguf/story-q8_0.gguf).
#include <gtest/gtest.h>

#include <cstring>

#include "core/runtime/engine.h"
#include "core/format/gguf.h"
#include "core/model/loader.h"
#include "core/convert/quantize_hf.h"
#include "core/tokenizer/tokenizer.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

TEST(QuantizeHf, F32ConversionMatchesGoldenLogitsAndTokenizer) {
  const std::string out = testing::ScratchDir() + "/petrel_story_hf_f32_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(QuantizeHfFolder(SharedDir() + "/models/story", out, *ParseQuantMix("F32"), false).ok());
  EngineOptions options;
  options.n_threads = 2;
  options.context = 256;
  auto engine = Engine::Load(out, options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const nlohmann::json cases = testing::ReadJson(SharedDir() + "/golden/story/logits.json");
  const auto ids = cases[3]["ids"].get<std::vector<int32_t>>();
  std::vector<float> logits;
  ASSERT_TRUE((*engine)->Prefill((*engine)->NewSequence(), ids, true, &logits).ok());
  const auto stats = testing::CompareLogits(logits, testing::ReadF32File(SharedDir() + "/golden/story/logits_len200.f32"), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  // The tokenizer travels as tokenizer.huggingface.json: every golden line, exactly.
  const Tokenizer& tokenizer = *(*engine)->tokenizer();
  for (const auto& line : testing::ReadJsonLines(SharedDir() + "/golden/story/tokenize.jsonl")) {
    const std::string text = line["text"].get<std::string>();
    EXPECT_EQ(tokenizer.Encode(text), line["ids"].get<std::vector<int32_t>>()) << text;
  }
  std::remove(out.c_str());
}

TEST(QuantizeHf, PureQ8_0IsByteIdenticalToTheReferenceConversion) {
  const std::string out = testing::ScratchDir() + "/petrel_story_hf_q8_" + std::to_string(getpid()) + ".gguf";
  QuantMix mix = *ParseQuantMix("Q8_0");
  mix.pure = true;
  ASSERT_TRUE(QuantizeHfFolder(SharedDir() + "/models/story", out, mix, false).ok());
  auto ours = GgufFile::Open(out);
  auto reference = GgufFile::Open(SharedDir() + "/models/story-gguf/story-q8_0.gguf");
  ASSERT_TRUE(ours.ok() && reference.ok());
  for (const GgufTensorInfo& want : (*reference)->tensors()) {
    const GgufTensorInfo* got = (*ours)->FindTensor(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->desc.dtype, want.desc.dtype) << want.name;
    ASSERT_EQ(got->bytes, want.bytes) << want.name;
    EXPECT_EQ(std::memcmp(got->data, want.data, want.bytes), 0) << want.name;
  }
  std::remove(out.c_str());
}

TEST(QuantizeHf, NotAFolderIsAnError) {
  EXPECT_FALSE(QuantizeHfFolder(SharedDir() + "/models/story-gguf/story-f32.gguf", "/dev/null", *ParseQuantMix("Q8_0"), false).ok());
  EXPECT_FALSE(QuantizeHfFolder("/nonexistent", "/dev/null", *ParseQuantMix("Q8_0"), false).ok());
}

}  // namespace
}  // namespace petrel
