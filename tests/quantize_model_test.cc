// `petrel quantize` and `petrel synth --type` as library calls: written files re-read as GGUF,
// tensor types per mix, bytes equal to llama-quantize's, and a synthetic quantized model runs.
#include "core/convert/quantize_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/runtime/engine.h"
#include "core/format/gguf.h"
#include "core/convert/synth_model.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string Synth(const char* type) {
  return testing::SharedDir() + "/models/synth-tiny/tiny-v2048-" + type + ".gguf";
}
std::string Scratch(const char* name) { return testing::ScratchDir() + "/petrel_" + name; }

TEST(QuantizeModelTest, PureQ4_0EqualsLlamaQuantize) {
  QuantMix mix = *ParseQuantMix("q4_0");
  mix.pure = true;
  const std::string out = Scratch("pure_q4_0.gguf");
  ASSERT_TRUE(QuantizeGgufModel(Synth("f32"), out, mix, false).ok());
  auto ours = GgufFile::Open(out);
  auto theirs = GgufFile::Open(Synth("q4_0"));
  ASSERT_TRUE(ours.ok() && theirs.ok());
  ASSERT_EQ((*ours)->tensors().size(), (*theirs)->tensors().size());
  for (const GgufTensorInfo& info : (*theirs)->tensors()) {
    const GgufTensorInfo* mine = (*ours)->FindTensor(info.name);
    ASSERT_NE(mine, nullptr) << info.name;
    EXPECT_EQ(mine->desc.dtype, info.desc.dtype) << info.name;
    ASSERT_EQ(mine->bytes, info.bytes) << info.name;
    EXPECT_EQ(std::memcmp(mine->data, info.data, info.bytes), 0) << info.name;
  }
  EXPECT_EQ(*(*ours)->GetUint("general.file_type"), 2u);
}

TEST(QuantizeModelTest, Q4_K_MKeepsSensitiveTensorsHigher) {
  const std::string out = Scratch("q4_k_m.gguf");
  ASSERT_TRUE(QuantizeGgufModel(Synth("f32"), out, *ParseQuantMix("Q4_K_M"), false).ok());
  auto file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto type_of = [&](const char* name) { return (*file)->FindTensor(name)->desc.dtype; };
  // Rows of 288 hold no 256-block: Q4_K falls back to Q5_0 and Q6_K to Q8_0.
  EXPECT_EQ(type_of("blk.0.attn_q.weight"), DType::kQ5_0);
  // llama.cpp's use_more_bits for 6 layers: layers 2 and 5 (i % 3 == 2, i >= 7 * 6 / 8).
  EXPECT_EQ(type_of("blk.2.attn_v.weight"), DType::kQ8_0);
  EXPECT_EQ(type_of("blk.1.attn_v.weight"), DType::kQ5_0);
  EXPECT_EQ(type_of("blk.5.ffn_down.weight"), DType::kQ6_K);  // rows of 768
  EXPECT_EQ(type_of("blk.1.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(type_of("output.weight"), DType::kQ8_0);
  EXPECT_EQ(type_of("blk.0.attn_norm.weight"), DType::kF32);
  // And it runs.
  EngineOptions options;
  options.load_tokenizer = false;
  options.n_threads = 2;
  options.context = 32;
  auto engine = Engine::Load(out, options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  std::vector<float> logits;
  ASSERT_TRUE((*engine)->Prefill((*engine)->NewSequence(), {1, 5, 9}, true, &logits).ok());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(QuantizeModelTest, SynthWritesEveryTypeAndMix) {
  for (const char* name : {"q4_0", "q8_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k",
                           "q5_k", "q6_k", "iq4_xs", "q3_k_m", "q4_k_m", "q5_k_m"}) {
    SCOPED_TRACE(name);
    auto spec = ParseSynthShape("256x2x4x2x512");
    ASSERT_TRUE(spec.ok());
    spec->n_vocab = 300;
    spec->quant_mix = ParseQuantMix(name);
    ASSERT_TRUE(spec->quant_mix.has_value());
    const std::string out = Scratch("synth.gguf");
    ASSERT_TRUE(WriteSynthModel(*spec, out).ok());
    EngineOptions options;
    options.load_tokenizer = false;
    options.n_threads = 2;
    options.context = 16;
    auto engine = Engine::Load(out, options);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->Prefill((*engine)->NewSequence(), {1, 2, 3}, false, &logits).ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace petrel
