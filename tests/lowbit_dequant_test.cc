// The codecs of the low-bit GGUF types (IQ1_S..IQ3_S, TQ1_0, TQ2_0, MXFP4, Q1_0, Q2_0): every
// tensor of every synth-tiny-lowbit file decodes to the exact float32 bits ggml's `to_float`
// gives (sha256 of the whole tensor, and the row fixtures), the reference quantizers reproduce
// llama-quantize's bytes, and partial blocks are refused.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "gtest/gtest.h"
#include "quant/quantize.h"
#include "util/sha256.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string GoldenDir() { return testing::SharedDir() + "/golden/synth-tiny/dequant"; }
std::string LowbitDir() { return testing::SharedDir() + "/models/synth-tiny-lowbit"; }
std::string BaseDir() { return testing::SharedDir() + "/models/synth-tiny"; }

constexpr DType kLowbitTypes[] = {DType::kIQ1_S, DType::kIQ1_M,   DType::kIQ2_XXS, DType::kIQ2_XS,
                                  DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S,   DType::kTQ1_0,
                                  DType::kTQ2_0, DType::kMXFP4,   DType::kQ1_0,    DType::kQ2_0};

std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

nlohmann::json ReadManifest() {
  std::ifstream in(GoldenDir() + "/dequant_more.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The whole tensor as float32, rows in file order (ggml order: ne0 fastest).
bool DequantizeTensor(const GgufTensorInfo& info, std::vector<float>* out) {
  const size_t cols = size_t(info.desc.ne[0]), n_rows = size_t(info.desc.n_rows());
  const size_t row_bytes = info.desc.row_bytes();
  out->resize(cols * n_rows);
  for (size_t r = 0; r < n_rows; ++r) {
    const char* src = static_cast<const char*>(info.data) + r * row_bytes;
    if (!DequantizeRow(info.desc.dtype, src, out->data() + r * cols, cols)) return false;
  }
  return true;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// The hash helper itself, on FIPS 180-4's examples (one block, empty, two blocks of padding).
TEST(LowbitDequantTest, Sha256KnownAnswers) {
  EXPECT_EQ(testing::Sha256Hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(testing::Sha256Hex("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(testing::Sha256Hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// (a) Every tensor of every file, decoded in full, has the sha256 ggml's decoder gave.
TEST(LowbitDequantTest, EveryTensorMatchesGoldenSha256) {
  const nlohmann::json manifest = ReadManifest();
  ASSERT_TRUE(manifest.is_object()) << "missing " << GoldenDir() << "/dequant_more.json";
  std::set<std::string> models_in_manifest;
  std::set<DType> types_seen;
  size_t n_tensors = 0, n_elems = 0;
  for (const auto& [golden_name, entry] : manifest["files"].items()) {
    const std::string model = entry["model"];
    SCOPED_TRACE(model);
    models_in_manifest.insert(model);
    auto file = GgufFile::Open(LowbitDir() + "/" + model);
    ASSERT_TRUE(file.ok()) << file.status().message();
    const nlohmann::json& hashes = entry["tensor_sha256"];
    EXPECT_EQ(hashes.size(), (*file)->tensors().size());
    std::vector<float> values;
    for (const GgufTensorInfo& info : (*file)->tensors()) {
      SCOPED_TRACE(info.name + " (" + DTypeName(info.desc.dtype) + ")");
      ASSERT_TRUE(hashes.contains(info.name));
      ASSERT_TRUE(DequantizeTensor(info, &values));
      EXPECT_EQ(testing::Sha256Hex(values.data(), values.size() * sizeof(float)),
                hashes[info.name].get<std::string>());
      types_seen.insert(info.desc.dtype);
      ++n_tensors;
      n_elems += values.size();
    }
  }
  // The manifest covers every file of the folder.
  size_t n_files = 0;
  for (const auto& dir_entry : std::filesystem::directory_iterator(LowbitDir())) {
    if (dir_entry.path().extension() != ".gguf") continue;
    ++n_files;
    EXPECT_EQ(models_in_manifest.count(dir_entry.path().filename().string()), 1u)
        << dir_entry.path();
  }
  EXPECT_EQ(n_files, 15u);
  EXPECT_EQ(models_in_manifest.size(), 15u);
  for (DType type : kLowbitTypes) EXPECT_EQ(types_seen.count(type), 1u) << DTypeName(type);
  std::printf("checked %zu tensors, %zu elements, %zu types\n", n_tensors, n_elems,
              types_seen.size());
}

// (a) The row fixtures (rows 0-7 of five or six tensors per file), bit for bit.
TEST(LowbitDequantTest, RowFixturesMatchBitForBit) {
  const nlohmann::json manifest = ReadManifest();
  ASSERT_TRUE(manifest.is_object());
  size_t n_checked = 0;
  for (const auto& [golden_name, entry] : manifest["files"].items()) {
    SCOPED_TRACE(golden_name);
    const std::vector<float> golden = ReadF32File(GoldenDir() + "/" + golden_name);
    ASSERT_FALSE(golden.empty());
    auto file = GgufFile::Open(LowbitDir() + "/" + entry["model"].get<std::string>());
    ASSERT_TRUE(file.ok()) << file.status().message();
    for (const auto& tensor : entry["tensors"]) {
      const std::string name = tensor["tensor"];
      SCOPED_TRACE(name);
      const GgufTensorInfo* info = (*file)->FindTensor(name);
      ASSERT_NE(info, nullptr);
      EXPECT_STREQ(DTypeName(info->desc.dtype), tensor["ggml_type"].get<std::string>().c_str());
      const size_t rows = tensor["rows"], cols = tensor["cols"], offset = tensor["offset"];
      ASSERT_EQ(size_t(info->desc.ne[0]), cols);
      ASSERT_LE(offset + rows * cols, golden.size());
      std::vector<float> row(cols);
      for (size_t r = 0; r < rows; ++r) {
        const char* src = static_cast<const char*>(info->data) + r * info->desc.row_bytes();
        ASSERT_TRUE(DequantizeRow(info->desc.dtype, src, row.data(), cols));
        for (size_t c = 0; c < cols; ++c) {
          const float want = golden[offset + r * cols + c];
          ASSERT_TRUE(SameBits(row[c], want))
              << "row " << r << " col " << c << ": " << row[c] << " vs " << want;
        }
      }
      ++n_checked;
    }
  }
  EXPECT_EQ(n_checked, 15u * 5u + 1u);  // IQ3_M's fixture adds its Q5_0 attn_output
}

// Quantizes every quantized tensor of `file` from `source` (rows of float32 of the same shape)
// and counts the rows whose bytes equal the file's.
void ExpectQuantizedBytesEqual(
    const GgufFile& file,
    const std::function<const float*(const GgufTensorInfo&, std::vector<float>*)>& source,
    DType expected_type, size_t* n_tensors_out) {
  size_t n_tensors = 0, n_rows = 0, n_equal_rows = 0;
  std::vector<float> scratch;
  for (const GgufTensorInfo& info : file.tensors()) {
    if (info.desc.dtype == DType::kF32) continue;
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.desc.dtype, expected_type) << DTypeName(info.desc.dtype);
    const float* x = source(info, &scratch);
    ASSERT_NE(x, nullptr);
    ++n_tensors;
    const size_t cols = size_t(info.desc.ne[0]), row_bytes = info.desc.row_bytes();
    std::vector<uint8_t> ours(row_bytes);
    for (size_t r = 0; r < size_t(info.desc.n_rows()); ++r) {
      ASSERT_TRUE(QuantizeRow(info.desc.dtype, x + r * cols, ours.data(), cols));
      const bool equal =
          std::memcmp(ours.data(), static_cast<const char*>(info.data) + r * row_bytes,
                      row_bytes) == 0;
      n_equal_rows += equal;
      ++n_rows;
      if (!equal && n_rows - n_equal_rows <= 1) {
        ADD_FAILURE() << info.name << " (" << DTypeName(info.desc.dtype) << ") row " << r
                      << " differs";
      }
    }
  }
  EXPECT_GT(n_tensors, 0u);
  EXPECT_EQ(n_equal_rows, n_rows);
  std::printf("%s: %zu tensors, %zu/%zu rows byte-identical\n", DTypeName(expected_type), n_tensors,
              n_equal_rows, n_rows);
  *n_tensors_out = n_tensors;
}

// (b) llama-quantize wrote the MXFP4 file from the F32 base without an importance matrix, so
// ggml's reference quantizer must give its bytes exactly.
TEST(LowbitDequantTest, MXFP4QuantizerReproducesLlamaQuantize) {
  auto base = GgufFile::Open(BaseDir() + "/tiny-v2048-f32.gguf");
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto file = GgufFile::Open(LowbitDir() + "/tiny-v2048-mxfp4.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  size_t n_tensors = 0;
  ExpectQuantizedBytesEqual(
      **file,
      [&](const GgufTensorInfo& info, std::vector<float>*) -> const float* {
        const GgufTensorInfo* source = (*base)->FindTensor(info.name);
        if (!source || source->desc.dtype != DType::kF32 ||
            source->desc.n_elems() != info.desc.n_elems()) {
          return nullptr;
        }
        return static_cast<const float*>(source->data);
      },
      DType::kMXFP4, &n_tensors);
  EXPECT_EQ(n_tensors, 6u * 7u + 2u);  // every matrix: 7 per layer, token_embd, output
}

// (c) The ternary files hold exactly what their quantizer can represent (d = max|w| per block
// for TQ1_0/TQ2_0/Q2_0; sign x mean magnitude for Q1_0), so decoding then encoding again gives
// back the file's bytes.
TEST(LowbitDequantTest, TernaryFilesRoundTripByteForByte) {
  const std::pair<const char*, DType> kFiles[] = {{"tq1_0", DType::kTQ1_0},
                                                  {"tq2_0", DType::kTQ2_0},
                                                  {"q2_0", DType::kQ2_0},
                                                  {"q1_0", DType::kQ1_0}};
  for (const auto& [suffix, type] : kFiles) {
    SCOPED_TRACE(suffix);
    auto file = GgufFile::Open(LowbitDir() + "/tiny-tern-v2048-" + suffix + ".gguf");
    ASSERT_TRUE(file.ok()) << file.status().message();
    size_t n_tensors = 0;
    ExpectQuantizedBytesEqual(
        **file,
        [](const GgufTensorInfo& info, std::vector<float>* values) -> const float* {
          return DequantizeTensor(info, values) ? values->data() : nullptr;
        },
        type, &n_tensors);
    EXPECT_EQ(n_tensors, 16u);  // token_embd, output and 7 matrices per layer
  }
}

// Ternary data at any scale round-trips through the ternary formats exactly, including blocks
// of zeros; MXFP4 stays within its 3-bit mantissa.
TEST(LowbitDequantTest, SyntheticRoundTrips) {
  constexpr size_t kN = 1024;
  std::vector<float> x(kN), back(kN);
  for (size_t i = 0; i < kN; ++i) x[i] = float(int(i * 7 % 3) - 1) * 0.375f;
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  for (DType type : {DType::kTQ1_0, DType::kTQ2_0, DType::kQ2_0}) {
    SCOPED_TRACE(DTypeName(type));
    std::vector<uint8_t> packed(*RowBytes(type, kN));
    ASSERT_TRUE(QuantizeRow(type, x.data(), packed.data(), kN));
    ASSERT_TRUE(DequantizeRow(type, packed.data(), back.data(), kN));
    for (size_t i = 0; i < kN; ++i) ASSERT_EQ(back[i], x[i]) << i;
  }
  for (size_t i = 0; i < kN; ++i) x[i] = std::sin(0.37f * float(i)) * float(1 + i % 5);
  std::vector<uint8_t> packed(*RowBytes(DType::kMXFP4, kN));
  ASSERT_TRUE(QuantizeRow(DType::kMXFP4, x.data(), packed.data(), kN));
  ASSERT_TRUE(DequantizeRow(DType::kMXFP4, packed.data(), back.data(), kN));
  for (size_t block = 0; block < kN / 32; ++block) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * block + j]));
    for (size_t j = 0; j < 32; ++j) {
      // The grid step near amax is at most amax / 4, so no value is off by more than that.
      ASSERT_LE(std::fabs(back[32 * block + j] - x[32 * block + j]), amax / 4) << block << " " << j;
    }
  }
}

// (d) Hostile lengths: a partial block is refused before anything is read or written.
TEST(LowbitDequantTest, RefusesPartialBlocks) {
  std::vector<uint8_t> packed(4096, 0xA5);
  std::vector<float> floats(1024, 1.0f);
  for (DType type : kLowbitTypes) {
    SCOPED_TRACE(DTypeName(type));
    EXPECT_TRUE(CanDequantize(type));
    const size_t block = Traits(type).block_elems;
    ASSERT_LE(2 * block, floats.size());
    for (size_t n : {size_t{1}, block - 1, block + 1, 2 * block - 1, block / 2}) {
      std::vector<float> out(floats.size(), -7.0f);
      EXPECT_FALSE(DequantizeRow(type, packed.data(), out.data(), n)) << n;
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.0f; }));
      if (CanQuantize(type)) {
        std::vector<uint8_t> dst(packed.size(), 0x5A);
        EXPECT_FALSE(QuantizeRow(type, floats.data(), dst.data(), n)) << n;
        EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0x5A; }));
      }
    }
    // Whole blocks are accepted, and zero elements are a no-op.
    std::vector<float> out(2 * block);
    EXPECT_TRUE(DequantizeRow(type, packed.data(), out.data(), 2 * block));
    EXPECT_TRUE(DequantizeRow(type, packed.data(), out.data(), 0));
  }
  // The types with a plain reference quantizer.
  for (DType type : {DType::kTQ1_0, DType::kTQ2_0, DType::kMXFP4, DType::kQ1_0, DType::kQ2_0}) {
    EXPECT_TRUE(CanQuantize(type)) << DTypeName(type);
  }
}

// (d) Hostile files: a GGUF whose tensor row is not a whole number of the type's blocks, or whose
// data is cut short, is refused at open; an intact one decodes as the bytes written.
TEST(LowbitDequantTest, ReaderRefusesPartialBlockRowsAndTruncation) {
  for (DType type : kLowbitTypes) {
    SCOPED_TRACE(DTypeName(type));
    const size_t block = Traits(type).block_elems;
    const size_t cols = 2 * block, n_rows = 3;
    const TensorDesc desc = TensorDesc::Make(type, {int64_t(cols), int64_t(n_rows)});
    std::vector<uint8_t> payload(desc.bytes());
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 37 + 11);
    GgufWriter writer;
    writer.AddTensor("lowbit.weight", desc,
                     [&](void* dst) { std::memcpy(dst, payload.data(), payload.size()); });
    const std::vector<uint8_t> good = writer.WriteToMemory();

    const std::string path = testing::ScratchDir() + "/lowbit_hostile_" + DTypeName(type) + ".gguf";
    auto write_file = [&](const std::vector<uint8_t>& bytes) {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    };

    write_file(good);
    uint64_t data_offset = 0;
    {
      auto file = GgufFile::Open(path);
      ASSERT_TRUE(file.ok()) << file.status().message();
      const GgufTensorInfo* info = (*file)->FindTensor("lowbit.weight");
      ASSERT_NE(info, nullptr);
      ASSERT_EQ(info->desc.dtype, type);
      data_offset = (*file)->data_offset() + info->offset;
      std::vector<float> from_file, from_payload(cols * n_rows);
      ASSERT_TRUE(DequantizeTensor(*info, &from_file));
      ASSERT_TRUE(DequantizeRow(type, payload.data(), from_payload.data(), cols * n_rows));
      ASSERT_EQ(from_file.size(), from_payload.size());
      EXPECT_EQ(
          std::memcmp(from_file.data(), from_payload.data(), from_file.size() * sizeof(float)), 0);
    }

    // The tensor's ne0 sits right after its name and dimension count: make it 1.5 blocks.
    const std::string name = "lowbit.weight";
    const auto name_at = std::search(good.begin(), good.end(), name.begin(), name.end());
    ASSERT_NE(name_at, good.end());
    const size_t ne0_at = size_t(name_at - good.begin()) + name.size() + sizeof(uint32_t);
    uint64_t ne0;
    std::memcpy(&ne0, good.data() + ne0_at, sizeof(ne0));
    ASSERT_EQ(ne0, cols);
    for (uint64_t bad_ne0 : {uint64_t(block + block / 2), uint64_t(block - 1), uint64_t{1}}) {
      std::vector<uint8_t> bad = good;
      std::memcpy(bad.data() + ne0_at, &bad_ne0, sizeof(bad_ne0));
      write_file(bad);
      auto file = GgufFile::Open(path);
      ASSERT_FALSE(file.ok()) << bad_ne0;
      EXPECT_NE(file.status().message().find("whole number"), std::string::npos)
          << file.status().message();
    }

    // The tensor's data cut short by one byte.
    std::vector<uint8_t> truncated(good.begin(), good.begin() + data_offset + payload.size() - 1);
    write_file(truncated);
    EXPECT_FALSE(GgufFile::Open(path).ok());
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace petrel
