// `petrel quantize` and `petrel synth --type` as library calls: written files re-read as GGUF,
// tensor types per mix, bytes equal to llama-quantize's, and a synthetic quantized model runs.
#include "core/convert/quantize_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/runtime/engine.h"
#include "core/format/gguf.h"
#include "core/convert/synth_model.h"
#include "quant/f16.h"
#include "quant/quantize.h"  // DequantizeRow
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

// Every row of a 2-D tensor as f32: (n_rows, ne[0]).
std::vector<float> RowsOf(const GgufTensorInfo& info) {
  const TensorDesc& desc = info.desc;
  std::vector<float> values(size_t(desc.n_elems()));
  for (int64_t r = 0; r < desc.n_rows(); ++r) {
    EXPECT_TRUE(DequantizeRow(desc.dtype,
                              static_cast<const char*>(info.data) + r * desc.row_bytes(),
                              values.data() + r * desc.ne[0], size_t(desc.ne[0])));
  }
  return values;
}

// `synth --weights ternary`: each matrix row is t * s (t in {-1, 0, +1}, about a third each; s
// exact in f16), norms are not; and TQ1_0 and TQ2_0 re-encode such a file without loss.
TEST(QuantizeModelTest, SynthTernaryRowsAreTernaryAndTqHoldsThemExactly) {
  auto spec = ParseSynthShape("256x2x4x2x512");
  ASSERT_TRUE(spec.ok());
  spec->n_vocab = 300;
  spec->weights = SynthWeights::kTernary;
  const std::string base = Scratch("synth_ternary_f16.gguf");
  ASSERT_TRUE(WriteSynthModel(*spec, base).ok());
  auto file = GgufFile::Open(base);
  ASSERT_TRUE(file.ok()) << file.status().message();
  size_t n_matrices = 0;
  for (const GgufTensorInfo& info : (*file)->tensors()) {
    SCOPED_TRACE(info.name);
    const std::vector<float> values = RowsOf(info);
    const int64_t n_in = info.desc.ne[0];
    if (info.desc.n_dims == 1) {
      EXPECT_EQ(info.desc.dtype, DType::kF32);
      EXPECT_NE(values[0], values[1]);  // norms: 1 + N(0, 0.01), not a scale times signs
      continue;
    }
    ++n_matrices;
    EXPECT_EQ(info.desc.dtype, DType::kF16);
    int64_t counts[3] = {0, 0, 0};  // -s, 0, +s
    for (int64_t r = 0; r < info.desc.n_rows(); ++r) {
      const float* row = values.data() + r * n_in;
      float scale = 0.0f;
      for (int64_t i = 0; i < n_in; ++i) scale = std::max(scale, std::fabs(row[i]));
      ASSERT_GT(scale, 0.0f) << "row " << r;
      ASSERT_EQ(F16ToF32(F32ToF16(scale)), scale) << "row " << r;
      ASSERT_EQ(BF16ToF32(F32ToBF16(scale)), scale) << "row " << r;
      for (int64_t i = 0; i < n_in; ++i) {
        ASSERT_TRUE(row[i] == -scale || row[i] == 0.0f || row[i] == scale)
            << "row " << r << " column " << i << ": " << row[i] << " with scale " << scale;
        ++counts[row[i] == 0.0f ? 1 : row[i] > 0.0f ? 2 : 0];
      }
    }
    const double n = double(values.size());
    for (int64_t count : counts) EXPECT_NEAR(double(count) / n, 1.0 / 3.0, 0.05) << n;
  }
  EXPECT_EQ(n_matrices, 2u + 2u * 7u);  // token_embd, output and 7 per layer

  for (const char* type : {"TQ1_0", "TQ2_0"}) {
    SCOPED_TRACE(type);
    QuantMix mix = *ParseQuantMix(type);
    mix.pure = true;
    const std::string out = Scratch("synth_ternary_tq.gguf");
    ASSERT_TRUE(QuantizeGgufModel(base, out, mix, false).ok());
    auto quantized = GgufFile::Open(out);
    ASSERT_TRUE(quantized.ok()) << quantized.status().message();
    for (const GgufTensorInfo& info : (*file)->tensors()) {
      if (info.desc.n_dims == 1) continue;
      const GgufTensorInfo* ternary = (*quantized)->FindTensor(info.name);
      ASSERT_NE(ternary, nullptr) << info.name;
      EXPECT_EQ(ternary->desc.dtype, *DTypeFromName(type)) << info.name;
      EXPECT_EQ(RowsOf(*ternary), RowsOf(info)) << info.name;
    }
  }
}

}  // namespace
}  // namespace petrel
