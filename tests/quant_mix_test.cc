// The named mixes (`petrel quantize IN OUT IQ3_M`): each tensor's type and the file type as
// llama-quantize chose them for the synth-tiny mix fixtures (made without --pure), the files
// themselves byte for byte where every type has an encoder, and the refusal of types that need
// an importance matrix.
#include "core/convert/quant_mix.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "core/convert/quantize_model.h"
#include "core/eval/imatrix_file.h"
#include "core/format/gguf.h"
#include "gtest/gtest.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string LowbitPath(const std::string& name) {
  return testing::SharedDir() + "/models/synth-tiny-lowbit/tiny-v2048-" + name + ".gguf";
}

// Every tensor of the llama-quantize file gets the fixture's type from ChooseTensorType, and
// the mix's file type is the file's general.file_type. The fixtures were made with
// `--imatrix`, which some rules read.
void ExpectTypesOfFixture(const std::string& file_name, const std::string& mix_name) {
  SCOPED_TRACE(file_name);
  auto file = GgufFile::Open(LowbitPath(file_name));
  ASSERT_TRUE(file.ok()) << file.status().message();
  const std::optional<QuantMix> mix = ParseQuantMix(mix_name);
  ASSERT_TRUE(mix.has_value());
  auto model = ReadQuantModelInfo(**file);
  ASSERT_TRUE(model.ok()) << model.status().message();
  model->with_importance = true;
  int n_checked = 0;
  for (const GgufTensorInfo& info : (*file)->tensors()) {
    const DType chosen =
        ChooseTensorType(*mix, info.name, info.desc.ne[0], info.desc.n_dims, *model);
    EXPECT_EQ(DTypeName(chosen), std::string(DTypeName(info.desc.dtype))) << info.name;
    ++n_checked;
  }
  EXPECT_GT(n_checked, 40);
  auto file_type = (*file)->GetUint("general.file_type");
  ASSERT_TRUE(file_type.ok()) << file_type.status().message();
  EXPECT_EQ(GgufFileType(*mix), *file_type);
}

TEST(QuantMixTest, IQ2_MMatchesLlamaQuantize) { ExpectTypesOfFixture("iq2_m", "IQ2_M"); }
TEST(QuantMixTest, IQ3_MMatchesLlamaQuantize) { ExpectTypesOfFixture("iq3_m", "IQ3_M"); }
TEST(QuantMixTest, IQ4_XSMixMatchesLlamaQuantize) { ExpectTypesOfFixture("iq4_xs_mix", "IQ4_XS"); }

// The --pure fixtures: every matrix in the mix's default type (or its short-row fallback), and
// the same file type; llama-quantize's IQ2_S tensors come from file type IQ2_M.
TEST(QuantMixTest, PureFixturesMatchLlamaQuantize) {
  const std::pair<const char*, const char*> kPure[] = {
      {"iq1_s", "IQ1_S"}, {"iq1_m", "IQ1_M"},     {"iq2_xxs", "IQ2_XXS"}, {"iq2_xs", "IQ2_XS"},
      {"iq2_s", "IQ2_M"}, {"iq3_xxs", "IQ3_XXS"}, {"iq3_s", "IQ3_S"},     {"mxfp4", "MXFP4_MOE"},
  };
  for (const auto& [file_name, mix_name] : kPure) {
    SCOPED_TRACE(file_name);
    auto file = GgufFile::Open(LowbitPath(file_name));
    ASSERT_TRUE(file.ok()) << file.status().message();
    std::optional<QuantMix> mix = ParseQuantMix(mix_name);
    ASSERT_TRUE(mix.has_value());
    mix->pure = true;
    auto model = ReadQuantModelInfo(**file);
    ASSERT_TRUE(model.ok()) << model.status().message();
    model->with_importance = true;
    for (const GgufTensorInfo& info : (*file)->tensors()) {
      const DType chosen =
          ChooseTensorType(*mix, info.name, info.desc.ne[0], info.desc.n_dims, *model);
      EXPECT_EQ(DTypeName(chosen), std::string(DTypeName(info.desc.dtype))) << info.name;
    }
    auto file_type = (*file)->GetUint("general.file_type");
    ASSERT_TRUE(file_type.ok());
    EXPECT_EQ(GgufFileType(*mix), *file_type);
  }
}

// llama-quantize's names and numbers (include/llama.h's `llama_ftype`) for the mixes.
TEST(QuantMixTest, NamesAndFileTypes) {
  const std::pair<const char*, uint32_t> kFileTypes[] = {
      {"IQ2_XXS", 19}, {"IQ2_XS", 20}, {"IQ3_XS", 22}, {"IQ3_XXS", 23},   {"IQ1_S", 24},
      {"IQ3_S", 26},   {"IQ3_M", 27},  {"IQ2_S", 28},  {"IQ2_M", 29},     {"IQ4_XS", 30},
      {"IQ1_M", 31},   {"TQ1_0", 36},  {"TQ2_0", 37},  {"MXFP4_MOE", 38}, {"q4_k_m", 15},
  };
  for (const auto& [name, ftype] : kFileTypes) {
    const std::optional<QuantMix> mix = ParseQuantMix(name);
    ASSERT_TRUE(mix.has_value()) << name;
    EXPECT_EQ(GgufFileType(*mix), ftype) << name;
  }
  EXPECT_EQ(ParseQuantMix("IQ2_S")->base, DType::kIQ2_XS);
  EXPECT_EQ(ParseQuantMix("IQ2_M")->base, DType::kIQ2_S);
  EXPECT_EQ(ParseQuantMix("IQ3_XS")->base, DType::kIQ3_S);
  EXPECT_EQ(ParseQuantMix("MXFP4_MOE")->base, DType::kMXFP4);
  EXPECT_FALSE(ParseQuantMix("IQ5_XS").has_value());
}

// Rules the tiny fixtures (rows of 288, one GQA group) cannot show, on a 32-layer model with
// 4096-wide rows: spot checks of llama.cpp's rules.
TEST(QuantMixTest, RulesOnAWideModel) {
  QuantModelInfo model;
  model.n_layers = 32;
  model.with_importance = true;
  auto type = [&](const char* mix_name, const std::string& name, int n_dims = 2) {
    return ChooseTensorType(*ParseQuantMix(mix_name), name, 4096, n_dims, model);
  };
  EXPECT_EQ(type("IQ2_XXS", "token_embd.weight"), DType::kQ2_K);
  EXPECT_EQ(type("IQ2_XXS", "output.weight"), DType::kQ5_K);
  EXPECT_EQ(type("IQ2_XXS", "blk.0.ffn_down.weight"), DType::kQ2_K);
  EXPECT_EQ(type("IQ2_XXS", "blk.4.ffn_down.weight"), DType::kIQ2_XXS);
  EXPECT_EQ(type("IQ2_XXS", "blk.5.attn_v.weight"), DType::kQ2_K);
  EXPECT_EQ(type("IQ1_S", "blk.5.attn_output.weight"), DType::kIQ2_XXS);
  EXPECT_EQ(type("IQ2_M", "blk.5.attn_v.weight"), DType::kIQ3_S);
  EXPECT_EQ(type("IQ2_M", "token_embd.weight"), DType::kIQ3_S);
  EXPECT_EQ(type("IQ3_XS", "blk.3.attn_q.weight"), DType::kIQ3_XXS);
  EXPECT_EQ(type("IQ3_XS", "blk.10.ffn_up.weight"), DType::kIQ3_XXS);
  EXPECT_EQ(type("IQ3_XS", "blk.30.ffn_up.weight"), DType::kIQ3_S);
  EXPECT_EQ(type("IQ3_XXS", "blk.3.attn_k.weight"), DType::kIQ2_S);
  EXPECT_EQ(type("IQ3_XXS", "blk.3.attn_output.weight"), DType::kIQ3_S);
  EXPECT_EQ(type("IQ3_M", "blk.1.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(type("IQ3_M", "blk.9.ffn_down.weight"), DType::kIQ3_S);
  EXPECT_EQ(type("TQ1_0", "token_embd.weight"), DType::kQ4_K);
  EXPECT_EQ(type("MXFP4_MOE", "blk.0.ffn_down_exps.weight", 3), DType::kMXFP4);
  EXPECT_EQ(type("MXFP4_MOE", "blk.0.attn_q.weight"), DType::kQ8_0);
  EXPECT_EQ(type("MXFP4_MOE", "output.weight"), DType::kQ8_0);
  model.with_importance = false;
  EXPECT_EQ(type("IQ3_XXS", "blk.3.attn_v.weight"), DType::kIQ3_S);
  EXPECT_EQ(type("IQ3_XXS", "blk.1.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(type("IQ3_XXS", "blk.9.ffn_down.weight"), DType::kQ3_K);
  EXPECT_EQ(type("IQ4_XS", "blk.1.ffn_down.weight"), DType::kQ5_K);
  model.n_gqa = 4;
  EXPECT_EQ(type("IQ2_XS", "blk.5.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(type("IQ4_XS", "blk.5.attn_v.weight"), DType::kQ5_K);
  model.n_gqa = 1;
  model.has_output = false;  // tied: token_embd is the output head
  EXPECT_EQ(type("IQ3_M", "token_embd.weight"), DType::kQ6_K);
}

// `petrel quantize F32 OUT IQ3_M --imatrix ...` end to end (QuantizeGgufModel): every tensor's
// type and bytes as in llama-quantize's file, for each mix whose types all have encoders in this
// build (IQ2_M needs the IQ2_S one).
TEST(QuantMixTest, QuantizedMixFilesAreLlamaQuantizesBytes) {
  auto imatrix = ReadImatrix(testing::SharedDir() + "/golden/synth-tiny/imatrix-tiny-v2048.gguf");
  ASSERT_TRUE(imatrix.ok()) << imatrix.status().message();
  const std::string base = testing::SharedDir() + "/models/synth-tiny/tiny-v2048-f32.gguf";
  int n_skipped = 0;
  for (const auto& [file_name, mix_name] :
       {std::pair{"iq3_m", "IQ3_M"}, std::pair{"iq4_xs_mix", "IQ4_XS"},
        std::pair{"iq2_m", "IQ2_M"}}) {
    SCOPED_TRACE(file_name);
    auto theirs = GgufFile::Open(LowbitPath(file_name));
    ASSERT_TRUE(theirs.ok()) << theirs.status().message();
    bool encodable = true;
    for (const GgufTensorInfo& info : (*theirs)->tensors()) {
      encodable = encodable && CheckCanWrite(info.desc.dtype, info.name, true).ok();
    }
    if (!encodable) {
      std::printf("%s: not every type has an encoder in this build; skipped\n", file_name);
      ++n_skipped;
      continue;
    }
    const std::string out = testing::ScratchDir() + "/quant_mix_test_" + std::to_string(getpid()) +
                            "_" + file_name + ".gguf";
    ASSERT_TRUE(QuantizeGgufModel(base, out, *ParseQuantMix(mix_name), false, {}, &*imatrix,
                                  "imatrix-tiny-v2048.gguf")
                    .ok());
    auto ours = GgufFile::Open(out);
    ASSERT_TRUE(ours.ok()) << ours.status().message();
    EXPECT_EQ(*(*ours)->GetUint("general.file_type"), *(*theirs)->GetUint("general.file_type"));
    ASSERT_EQ((*ours)->tensors().size(), (*theirs)->tensors().size());
    for (const GgufTensorInfo& expected : (*theirs)->tensors()) {
      const GgufTensorInfo* got = (*ours)->FindTensor(expected.name);
      ASSERT_NE(got, nullptr) << expected.name;
      EXPECT_EQ(got->desc.dtype, expected.desc.dtype) << expected.name;
      ASSERT_EQ(got->desc.bytes(), expected.desc.bytes()) << expected.name;
      EXPECT_EQ(std::memcmp(got->data, expected.data, expected.desc.bytes()), 0) << expected.name;
    }
    std::remove(out.c_str());
  }
  EXPECT_LE(n_skipped, 1);  // IQ3_M and IQ4_XS are always written here
}

TEST(QuantMixTest, TypesThatNeedImportanceAreRefusedWithoutIt) {
  const Status refused = CheckCanWrite(DType::kIQ3_XXS, "blk.0.ffn_down.weight", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("IQ3_XXS"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("--imatrix"), std::string::npos) << refused.message();
  EXPECT_EQ(refused.message().find('\n'), std::string::npos);
  EXPECT_TRUE(CheckCanWrite(DType::kIQ3_XXS, "blk.0.ffn_down.weight", true).ok());
  EXPECT_TRUE(CheckCanWrite(DType::kIQ3_S, "blk.0.ffn_down.weight", false).ok());
  EXPECT_TRUE(CheckCanWrite(DType::kQ4_K, "blk.0.ffn_down.weight", false).ok());
}

}  // namespace
}  // namespace petrel
