// `petrel quantize` end to end for every low-bit type and IQ mix: from the F32 synth-tiny model
// and llama-imatrix's importance matrix, each file's tensors are those of llama-quantize's file
// of the same command (models/synth-tiny-lowbit) byte for byte, and the file then runs: `petrel
// logits` meets the type's row of parity.json against the float64 reference of that file. IQ3_XS,
// which has no file of its own, is checked against the ones whose tensors it shares. TQ1_0,
// TQ2_0, Q2_0 and Q1_0 take the ternary base, rebuilt losslessly from its TQ2_0 file, and give
// llama-quantize's whole files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "util/cli_runner.h"
#include "util/parity.h"

namespace petrel {
namespace {

using testing::Output;
using testing::Petrel;
using testing::SharedDir;

constexpr size_t kVocab = 2048;

struct LowBitCommand {
  const char* type;     // what `petrel quantize` is given
  bool pure;            // --pure
  const char* fixture;  // llama-quantize's file of the same tensors: tiny-v2048-<fixture>.gguf
  // The type's key in parity.json and the reference logits of the fixture (<reference>.f32).
  const char* reference;
  // False where the command's file type is not the fixture's: llama.cpp's IQ2_S file type
  // writes IQ2_XS tensors, so `IQ2_S --pure` gives the tensors of the pure IQ2_XS file.
  bool same_file_type;
  // A fixture whose output.weight this command's is (IQ3_XS on rows of 288 is IQ3_S's pure
  // file but for the head, which the mixes put on Q8_0); nullptr: the fixture's own. The logits
  // are then compared with the fixture's reference within kOtherHead, not the type's row.
  const char* output_from;
  bool ternary;  // on the ternary base (tiny-tern-v2048-*.gguf, tern-*.f32), without imatrix
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Lower(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string FixturePath(const LowBitCommand& c, const char* fixture) {
  return SharedDir() + "/models/synth-tiny-lowbit/" +
         (c.ternary ? "tiny-tern-v2048-" : "tiny-v2048-") + fixture + ".gguf";
}

std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/cli_lowbit_" + std::to_string(getpid()) + "_" + name;
}

const nlohmann::json& Parity() {
  static const nlohmann::json parity =
      testing::ReadJson(SharedDir() + "/golden/synth-tiny/parity.json");
  return parity;
}

std::string Ids(const LowBitCommand& c) {
  std::string ids;
  for (const auto& id : Parity()[c.ternary ? "tiny_tern_v2048" : "tiny_v2048_more_types"]["ids"]) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(id.get<int>());
  }
  return ids;
}

// The IQ3_XS file against IQ3_S's reference: its Q8_0 head where that file has IQ4_NL puts the
// logits at max 1.26, rel RMS 0.076, top-1 0.875 from it (the IQ3_S file itself: 0.25 / 0.013 /
// 1.0), still far inside what the quantization moves them (rel RMS 0.27 from the F32 model's).
constexpr testing::Tolerance kOtherHead{2.5, 0.12, 0.75};

testing::Tolerance TypeRow(const LowBitCommand& c) {
  if (c.output_from) return kOtherHead;
  const nlohmann::json& row = Parity()["more_types_tolerances"]["rows"][c.reference];
  return {row["max_abs"].get<double>(), row["rel_rms"].get<double>(),
          row["top1_min"].get<double>()};
}

// The ternary base: its TQ2_0 file holds every weight exactly (d = the row's scale), so its F32
// re-encoding is the base llama-quantize read. Made once, for the ternary commands.
class LowBitCli : public ::testing::TestWithParam<LowBitCommand> {
 protected:
  static void SetUpTestSuite() {
    ternary_base_ = Scratch("tern-f32.gguf");
    const Output made =
        Petrel({"quantize", SharedDir() + "/models/synth-tiny-lowbit/tiny-tern-v2048-tq2_0.gguf",
                ternary_base_, "F32", "--no-progress"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  static void TearDownTestSuite() { std::remove(ternary_base_.c_str()); }

  static std::string ternary_base_;
};

std::string LowBitCli::ternary_base_;

TEST_P(LowBitCli, QuantizeWritesLlamaQuantizesTensorsAndTheFileRuns) {
  const LowBitCommand c = GetParam();
  const std::string out = Scratch(Lower(c.type) + (c.pure ? "-pure" : "") + ".gguf");
  std::vector<std::string> args = {"quantize", "--no-progress"};
  if (c.ternary) {
    args.push_back(ternary_base_);
  } else {
    args.insert(args.end(),
                {"--imatrix", SharedDir() + "/golden/synth-tiny/imatrix-tiny-v2048.gguf",
                 SharedDir() + "/models/synth-tiny/tiny-v2048-f32.gguf"});
  }
  args.insert(args.end(), {out, c.type});
  if (c.pure) args.push_back("--pure");
  const Output quantized = Petrel(args);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;

  auto ours = GgufFile::Open(out);
  ASSERT_TRUE(ours.ok()) << ours.status().message();
  auto theirs = GgufFile::Open(FixturePath(c, c.fixture));
  ASSERT_TRUE(theirs.ok()) << theirs.status().message();
  std::unique_ptr<GgufFile> output_file;
  if (c.output_from) {
    auto opened = GgufFile::Open(FixturePath(c, c.output_from));
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    output_file = std::move(*opened);
  }
  if (c.same_file_type) {
    EXPECT_EQ(*(*ours)->GetUint("general.file_type"), *(*theirs)->GetUint("general.file_type"));
  }
  ASSERT_EQ((*ours)->tensors().size(), (*theirs)->tensors().size());
  for (const GgufTensorInfo& got : (*ours)->tensors()) {
    const GgufFile& source = output_file && got.name == "output.weight" ? *output_file : **theirs;
    const GgufTensorInfo* want = source.FindTensor(got.name);
    ASSERT_NE(want, nullptr) << got.name;
    EXPECT_EQ(DTypeName(got.desc.dtype), std::string(DTypeName(want->desc.dtype))) << got.name;
    ASSERT_EQ(got.desc.bytes(), want->desc.bytes()) << got.name;
    EXPECT_EQ(std::memcmp(got.data, want->data, want->desc.bytes()), 0)
        << got.name << " (" << DTypeName(got.desc.dtype) << ") differs from " << source.path();
  }

  // The ternary files are llama-quantize's whole, header included. (The others differ outside
  // the tensor data: llama-quantize orders the tensors by block, output and token_embd first,
  // and records the importance matrix's path, dataset and counts as quantize.imatrix.* keys.)
  if (c.ternary) {
    EXPECT_TRUE(ReadFile(out) == ReadFile(FixturePath(c, c.fixture))) << "whole file differs";
  }

  // The file runs, and its logits are the reference's of llama-quantize's file.
  const std::string logits = Scratch(Lower(c.type) + ".f32");
  const Output ran = Petrel({"logits", "-m", out, "--ids", Ids(c), "-o", logits, "-t", "2"});
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const auto stats = testing::CompareLogits(
      testing::ReadF32File(logits),
      testing::ReadF32File(SharedDir() + "/golden/synth-tiny/" + (c.ternary ? "tern-" : "") +
                           c.reference + ".f32"),
      kVocab);
  EXPECT_TRUE(testing::Within(stats, TypeRow(c))) << c.type << ": " << stats.ToString();
  std::printf("quantize %s%s: logits vs %s: %s\n", c.type, c.pure ? " --pure" : "", c.reference,
              stats.ToString().c_str());
  std::remove(logits.c_str());
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    EveryLowBitType, LowBitCli,
    ::testing::Values(LowBitCommand{"IQ1_S", true, "iq1_s", "IQ1_S", true, nullptr, false},
                      LowBitCommand{"IQ1_M", true, "iq1_m", "IQ1_M", true, nullptr, false},
                      LowBitCommand{"IQ2_XXS", true, "iq2_xxs", "IQ2_XXS", true, nullptr, false},
                      LowBitCommand{"IQ2_XS", true, "iq2_xs", "IQ2_XS", true, nullptr, false},
                      LowBitCommand{"IQ2_S", true, "iq2_xs", "IQ2_XS", false, nullptr, false},
                      LowBitCommand{"IQ2_M", true, "iq2_s", "IQ2_S", true, nullptr, false},
                      LowBitCommand{"IQ2_M", false, "iq2_m", "IQ2_M", true, nullptr, false},
                      LowBitCommand{"IQ3_XXS", true, "iq3_xxs", "IQ3_XXS", true, nullptr, false},
                      LowBitCommand{"IQ3_XS", false, "iq3_s", "IQ3_S", false, "iq3_m", false},
                      LowBitCommand{"IQ3_S", true, "iq3_s", "IQ3_S", true, nullptr, false},
                      LowBitCommand{"IQ3_M", false, "iq3_m", "IQ3_M", true, nullptr, false},
                      LowBitCommand{"IQ4_XS", false, "iq4_xs_mix", "IQ4_XS_MIX", true, nullptr,
                                    false},
                      LowBitCommand{"MXFP4_MOE", true, "mxfp4", "MXFP4", true, nullptr, false},
                      LowBitCommand{"TQ1_0", true, "tq1_0", "TQ1_0", true, nullptr, true},
                      LowBitCommand{"TQ2_0", true, "tq2_0", "TQ2_0", true, nullptr, true},
                      LowBitCommand{"Q2_0", true, "q2_0", "Q2_0", true, nullptr, true},
                      LowBitCommand{"Q1_0", true, "q1_0", "Q1_0", true, nullptr, true}),
    [](const auto& info) {
      return std::string(info.param.type) + (info.param.pure ? "_pure" : "_mix");
    });

}  // namespace
}  // namespace petrel
