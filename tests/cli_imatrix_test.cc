// `petrel imatrix` and `petrel quantize --imatrix` end to end on the story model: an importance
// matrix from the first half of stories.txt makes Q4_K and Q3_K files whose KL divergence from
// the F32 model, on the held-out second half, is lower than without one; both file layouts are
// accepted; an importance matrix of another model or a damaged one is a one-line error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
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

std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/cli_imatrix_" + std::to_string(getpid()) + "_" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// The calibration and held-out texts: stories.txt cut at the first sentence end past its middle.
class ImatrixCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string text = ReadFile(testing::SharedDir() + "/golden/perplexity/stories.txt");
    ASSERT_GT(text.size(), 2000u);
    const size_t cut = text.find(". ", text.size() / 2) + 2;
    calibration_ = Scratch("calibration.txt");
    held_out_ = Scratch("held_out.txt");
    WriteFile(calibration_, text.substr(0, cut));
    WriteFile(held_out_, text.substr(cut));
    imatrix_ = Scratch("story.imatrix.gguf");
    const Output made = Petrel({"imatrix", "-m", StoryF32Gguf(), "-f", calibration_, "-o", imatrix_,
                                "-c", "128", "--process-output"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    base_ = Scratch("base.kld");
    const Output base = Petrel({"perplexity", "-m", StoryF32Gguf(), "-f", held_out_, "-c", "128",
                                "--kl-divergence-base", base_});
    ASSERT_EQ(base.exit_code, 0) << base.err;
  }
  static void TearDownTestSuite() {
    for (const std::string& path : {calibration_, held_out_, imatrix_, base_}) {
      std::remove(path.c_str());
    }
  }

  // Mean KLD against the F32 model on the held-out text.
  static double MeanKld(const std::string& model) {
    const Output out = Petrel(
        {"perplexity", "-m", model, "--kl-divergence-base", base_, "--kl-divergence", "--json"});
    EXPECT_EQ(out.exit_code, 0) << out.err;
    if (out.exit_code != 0) return 1e9;
    return nlohmann::json::parse(out.out)["mean_kld"].get<double>();
  }

  static std::string calibration_, held_out_, imatrix_, base_;
};

std::string ImatrixCli::calibration_, ImatrixCli::held_out_, ImatrixCli::imatrix_,
    ImatrixCli::base_;

TEST_F(ImatrixCli, ImportanceMatrixLowersTheKlDivergence) {
  for (const char* type : {"Q4_K", "Q3_K"}) {
    SCOPED_TRACE(type);
    const std::string plain = Scratch("plain.gguf"), weighted = Scratch("weighted.gguf");
    ASSERT_EQ(Petrel({"quantize", StoryF32Gguf(), plain, type}).exit_code, 0);
    const Output out = Petrel({"quantize", StoryF32Gguf(), weighted, type, "--imatrix", imatrix_});
    ASSERT_EQ(out.exit_code, 0) << out.err;
    const double kld_plain = MeanKld(plain), kld_weighted = MeanKld(weighted);
    EXPECT_LT(kld_weighted, kld_plain * 0.95) << kld_weighted << " vs " << kld_plain;
    std::remove(plain.c_str());
    std::remove(weighted.c_str());
  }
}

TEST_F(ImatrixCli, LegacyLayoutGivesTheSameModel) {
  // The .dat layout keeps only the means, which is all quantizing uses: the same bytes.
  const std::string dat = Scratch("story.imatrix.dat");
  const Output made = Petrel({"imatrix", "-m", StoryF32Gguf(), "-f", calibration_, "-o", dat, "-c",
                              "128", "--process-output"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(made.err.find("dat"), std::string::npos) << made.err;
  const std::string from_gguf = Scratch("from_gguf.gguf"), from_dat = Scratch("from_dat.gguf");
  ASSERT_EQ(
      Petrel({"quantize", StoryF32Gguf(), from_gguf, "Q4_0", "--imatrix", imatrix_}).exit_code, 0);
  ASSERT_EQ(Petrel({"quantize", StoryF32Gguf(), from_dat, "Q4_0", "--imatrix", dat}).exit_code, 0);
  const std::string a = ReadFile(from_gguf), b = ReadFile(from_dat);
  EXPECT_GT(a.size(), 0u);
  // The means differ by float rounding (mean × ncall / ncall), which may flip a rounding tie:
  // compare sizes exactly and bytes nearly.
  ASSERT_EQ(a.size(), b.size());
  size_t differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i] != b[i];
  EXPECT_LT(differing, a.size() / 1000);
  for (const std::string& path : {dat, from_gguf, from_dat}) std::remove(path.c_str());
}

TEST_F(ImatrixCli, ImatrixOfAnotherModelIsRefused) {
  const std::string other = Scratch("other.gguf"), other_imatrix = Scratch("other.imatrix.gguf");
  ASSERT_EQ(Petrel({"synth", "--shape", "256x2x4x4x512", "--type", "f32", "--vocab", StoryF32Gguf(),
                    "-o", other})
                .exit_code,
            0);
  ASSERT_EQ(Petrel({"imatrix", "-m", other, "-f", calibration_, "-o", other_imatrix, "-c", "128",
                    "--chunks", "1"})
                .exit_code,
            0);
  const std::string out = Scratch("refused.gguf");
  ExpectOneLineError(Petrel({"quantize", StoryF32Gguf(), out, "Q4_K", "--imatrix", other_imatrix}),
                     "made for another model");
  EXPECT_FALSE(std::ifstream(out).good()) << "nothing is written";
  for (const std::string& path : {other, other_imatrix}) std::remove(path.c_str());
}

TEST_F(ImatrixCli, DamagedImatrixIsRefused) {
  const std::string bytes = ReadFile(imatrix_);
  const std::string damaged = Scratch("damaged.gguf"), out = Scratch("refused.gguf");
  WriteFile(damaged, bytes.substr(0, bytes.size() - 100));
  ExpectOneLineError(Petrel({"quantize", StoryF32Gguf(), out, "Q4_K", "--imatrix", damaged}),
                     damaged);
  // A legacy file cut inside its entries.
  WriteFile(damaged, std::string("\x02\x00\x00\x00\x05\x00\x00\x00", 8) + "blk.0");
  ExpectOneLineError(Petrel({"quantize", StoryF32Gguf(), out, "Q4_K", "--imatrix", damaged}),
                     "truncated");
  EXPECT_FALSE(std::ifstream(out).good());
  std::remove(damaged.c_str());
}

TEST_F(ImatrixCli, BadArgumentsAreOneLineErrors) {
  ExpectOneLineError(
      Petrel({"imatrix", "-m", StoryF32Gguf(), "-f", calibration_, "-o", calibration_}),
      calibration_);
  ExpectOneLineError(Petrel({"quantize", StoryF32Gguf(), Scratch("x.gguf"), "Q4_K", "--imatrix",
                             Scratch("absent.gguf")}),
                     "cannot open");
}

// A type whose search needs an importance matrix is refused without one, in one line naming the
// type and the flag, before anything is written.
TEST(QuantizeCli, TypeThatNeedsAnImportanceMatrixIsRefusedWithoutOne) {
  const std::string out = Scratch("iq3_xxs.gguf");
  const Output result = Petrel({"quantize", StoryF32Gguf(), out, "iq3_xxs"});
  ExpectOneLineError(result, "--imatrix");
  EXPECT_NE(result.err.find("IQ3_XXS"), std::string::npos) << result.err;
  EXPECT_FALSE(std::ifstream(out).good());
}

}  // namespace
}  // namespace petrel
