// GGUF writer/reader round trips (every metadata type, v2/v3, two alignments) and the shared files.
#include "core/format/gguf.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/format/gguf_writer.h"
#include "gtest/gtest.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using ::petrel::testing::ScratchDir;
using ::petrel::testing::SharedDir;

std::string ScratchPath(const std::string& name) {
  return ScratchDir() + "/gguf_test_" + std::to_string(::getpid()) + "_" + name;
}

// A deterministic byte pattern, different per tensor.
void FillPattern(void* dst, size_t n_bytes, int seed) {
  uint8_t* bytes = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n_bytes; ++i) bytes[i] = uint8_t(i * 7 + size_t(seed) * 13 + 1);
}

struct TestTensor {
  std::string name;
  TensorDesc desc;
};

std::vector<TestTensor> TestTensors() {
  return {
      {"token_embd.weight", TensorDesc::Make(DType::kF32, {8, 3})},
      {"output_norm.weight", TensorDesc::Make(DType::kF16, {17})},
      {"blk.0.attn_q.weight", TensorDesc::Make(DType::kQ8_0, {64, 2})},
      {"blk.0.ffn_up.weight", TensorDesc::Make(DType::kQ4_K, {256, 1, 2})},
      {"blk.0.four_d", TensorDesc::Make(DType::kI32, {5, 1, 1, 2})},
  };
}

void AddEverything(GgufWriter& writer) {
  writer.SetString("general.architecture", "llama");
  writer.SetU8("test.u8", 250);
  writer.SetI8("test.i8", -100);
  writer.SetU16("test.u16", 65000);
  writer.SetI16("test.i16", -32000);
  writer.SetU32("test.u32", 4000000000u);
  writer.SetI32("test.i32", -2000000000);
  writer.SetU64("test.u64", 18000000000000000000ull);
  writer.SetI64("test.i64", -9000000000000000000ll);
  writer.SetF32("test.f32", 1.5f);
  writer.SetF64("test.f64", -2.25);
  writer.SetBool("test.bool", true);
  writer.SetString("test.empty_string", "");
  writer.SetStringArray("test.strings", {"a", "", "hello world", "\xe2\x96\x81tok"});
  writer.SetF32Array("test.floats", {0.5f, -1.0f, 3.25f});
  writer.SetI32Array("test.ints", {1, -2, 3, 2147483647});
  writer.SetI32Array("test.empty_ints", {});
  writer.SetU32("test.replaced", 1);
  writer.SetU32("test.replaced", 2);  // replaces in place, keeps its position
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    const TestTensor tensor = TestTensors()[i];
    const size_t n_bytes = tensor.desc.bytes();
    writer.AddTensor(tensor.name, tensor.desc,
                     [n_bytes, i](void* dst) { FillPattern(dst, n_bytes, int(i)); });
  }
}

void ExpectEverything(const GgufFile& file) {
  EXPECT_EQ(*file.GetString("general.architecture"), "llama");
  EXPECT_EQ(*file.GetUint("test.u8"), 250u);
  EXPECT_EQ(*file.GetInt("test.i8"), -100);
  EXPECT_EQ(*file.GetUint("test.u16"), 65000u);
  EXPECT_EQ(*file.GetInt("test.i16"), -32000);
  EXPECT_EQ(*file.GetUint("test.u32"), 4000000000u);
  EXPECT_EQ(*file.GetInt("test.i32"), -2000000000);
  EXPECT_EQ(*file.GetUint("test.u64"), 18000000000000000000ull);
  EXPECT_EQ(*file.GetInt("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(*file.GetFloat("test.f32"), 1.5);
  EXPECT_EQ(*file.GetFloat("test.f64"), -2.25);
  EXPECT_EQ(*file.GetBool("test.bool"), true);
  EXPECT_EQ(*file.GetString("test.empty_string"), "");
  EXPECT_EQ(*file.GetUint("test.replaced"), 2u);

  Result<const GgufValue*> strings = file.GetArray("test.strings", GgufType::kString);
  ASSERT_TRUE(strings.ok()) << strings.status().message();
  ASSERT_EQ((*strings)->count, 4u);
  EXPECT_EQ((*strings)->strings[0], "a");
  EXPECT_EQ((*strings)->strings[1], "");
  EXPECT_EQ((*strings)->strings[2], "hello world");
  EXPECT_EQ((*strings)->strings[3], "\xe2\x96\x81tok");
  Result<const GgufValue*> floats = file.GetArray("test.floats", GgufType::kFloat32);
  ASSERT_TRUE(floats.ok());
  ASSERT_EQ((*floats)->count, 3u);
  EXPECT_EQ((*floats)->FloatAt(0), 0.5);
  EXPECT_EQ((*floats)->FloatAt(1), -1.0);
  EXPECT_EQ((*floats)->FloatAt(2), 3.25);
  Result<const GgufValue*> ints = file.GetArray("test.ints", GgufType::kInt32);
  ASSERT_TRUE(ints.ok());
  ASSERT_EQ((*ints)->count, 4u);
  EXPECT_EQ((*ints)->IntAt(1), -2);
  EXPECT_EQ((*ints)->IntAt(3), 2147483647);
  EXPECT_EQ((*ints)->FloatAt(1), -2.0);
  EXPECT_EQ((*file.GetArray("test.empty_ints", GgufType::kInt32))->count, 0u);

  // Metadata keeps insertion order, with the replaced key in its first position.
  // `general.alignment` may come first, depending on when SetAlignment was called.
  const auto& metadata = file.metadata();
  const size_t base = metadata[0].first == "general.alignment" ? 1 : 0;
  ASSERT_GE(metadata.size(), base + 18);
  EXPECT_EQ(metadata[base].first, "general.architecture");
  EXPECT_EQ(metadata[base + 1].first, "test.u8");
  EXPECT_EQ(metadata[base + 17].first, "test.replaced");

  const std::vector<TestTensor> expected = TestTensors();
  ASSERT_EQ(file.tensors().size(), expected.size());
  EXPECT_EQ(file.data_offset() % file.alignment(), 0u);
  for (size_t i = 0; i < expected.size(); ++i) {
    const GgufTensorInfo& info = file.tensors()[i];
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.name, expected[i].name);
    EXPECT_EQ(info.desc.dtype, expected[i].desc.dtype);
    EXPECT_TRUE(info.desc.SameShape(expected[i].desc)) << info.desc.ShapeString();
    EXPECT_EQ(info.bytes, expected[i].desc.bytes());
    EXPECT_EQ(info.offset % file.alignment(), 0u);
    std::vector<uint8_t> want(info.bytes);
    FillPattern(want.data(), want.size(), int(i));
    EXPECT_EQ(std::memcmp(info.data, want.data(), want.size()), 0);
    EXPECT_EQ(file.FindTensor(info.name), &info);
  }
  EXPECT_EQ(file.FindTensor("missing"), nullptr);
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class GgufRoundTrip : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(GgufRoundTrip, EveryTypeSurvives) {
  const auto [version, alignment] = GetParam();
  GgufWriter writer;
  writer.SetVersion(version);
  writer.SetAlignment(alignment);
  AddEverything(writer);
  const std::string path =
      ScratchPath("rt_v" + std::to_string(version) + "_a" + std::to_string(alignment) + ".gguf");
  ASSERT_TRUE(writer.Write(path).ok());
  EXPECT_EQ(ReadAll(path), writer.WriteToMemory());

  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ((*file)->version(), version);
  EXPECT_EQ((*file)->alignment(), alignment);
  EXPECT_EQ(*(*file)->GetUint("general.alignment"), alignment);
  EXPECT_EQ((*file)->file_bytes() % alignment, 0u);
  ExpectEverything(**file);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(VersionsAndAlignments, GgufRoundTrip,
                         ::testing::Combine(::testing::Values(2u, 3u),
                                            ::testing::Values(32u, 64u)));

TEST(GgufWriter, DefaultsAreV3Align32WithoutAlignmentKey) {
  GgufWriter writer;
  writer.SetU32("a", 1);
  writer.AddTensor("t", TensorDesc::Make(DType::kF32, {3}), nullptr);
  const std::string path = ScratchPath("defaults.gguf");
  ASSERT_TRUE(writer.Write(path).ok());
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ((*file)->version(), 3u);
  EXPECT_EQ((*file)->alignment(), 32u);
  EXPECT_EQ((*file)->Find("general.alignment"), nullptr);
  EXPECT_EQ((*file)->data_offset() % 32, 0u);
  std::remove(path.c_str());
}

TEST(GgufWriter, CopyValueCopiesEveryKind) {
  GgufWriter source;
  AddEverything(source);
  const std::string source_path = ScratchPath("copy_src.gguf");
  ASSERT_TRUE(source.Write(source_path).ok());
  Result<std::unique_ptr<GgufFile>> original = GgufFile::Open(source_path);
  ASSERT_TRUE(original.ok()) << original.status().message();

  GgufWriter copy;
  for (const auto& [key, value] : (*original)->metadata()) copy.CopyValue(key, value);
  // Numeric arrays of types the writer has no setter for, built by hand.
  const uint16_t u16s[] = {1, 65535, 7};
  GgufValue u16_array;
  u16_array.type = GgufType::kArray;
  u16_array.elem_type = GgufType::kUint16;
  u16_array.count = 3;
  u16_array.elems = reinterpret_cast<const uint8_t*>(u16s);
  copy.CopyValue("test.u16s", u16_array);
  for (size_t i = 0; i < TestTensors().size(); ++i) {
    const TestTensor tensor = TestTensors()[i];
    const size_t n_bytes = tensor.desc.bytes();
    copy.AddTensor(tensor.name, tensor.desc,
                   [n_bytes, i](void* dst) { FillPattern(dst, n_bytes, int(i)); });
  }
  const std::string copy_path = ScratchPath("copy_dst.gguf");
  ASSERT_TRUE(copy.Write(copy_path).ok());
  Result<std::unique_ptr<GgufFile>> copied = GgufFile::Open(copy_path);
  ASSERT_TRUE(copied.ok()) << copied.status().message();
  ExpectEverything(**copied);
  Result<const GgufValue*> u16_back = (*copied)->GetArray("test.u16s", GgufType::kUint16);
  ASSERT_TRUE(u16_back.ok());
  EXPECT_EQ((*u16_back)->IntAt(1), 65535);
  EXPECT_EQ((*u16_back)->IntAt(2), 7);
  std::remove(source_path.c_str());
  std::remove(copy_path.c_str());
}

TEST(GgufFile, TypedGettersCheckKindsAndRanges) {
  GgufWriter writer;
  writer.SetI32("neg", -1);
  writer.SetU64("big", ~0ull);
  writer.SetString("name", "x");
  writer.SetU8("small", 3);
  writer.SetF32Array("floats", {1.0f});
  const std::string path = ScratchPath("getters.gguf");
  ASSERT_TRUE(writer.Write(path).ok());
  Result<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const GgufFile& file = **opened;

  EXPECT_EQ(*file.GetInt("neg"), -1);
  EXPECT_FALSE(file.GetUint("neg").ok());
  EXPECT_EQ(*file.GetUint("big"), ~0ull);
  EXPECT_FALSE(file.GetInt("big").ok());
  EXPECT_EQ(*file.GetInt("small"), 3);
  EXPECT_EQ(*file.GetFloat("small"), 3.0);
  EXPECT_EQ(*file.GetFloat("neg"), -1.0);
  Result<uint64_t> wrong = file.GetUint("name");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "key name: expected an integer, found string");
  EXPECT_FALSE(file.GetString("small").ok());
  EXPECT_FALSE(file.GetBool("small").ok());
  EXPECT_FALSE(file.GetArray("floats", GgufType::kInt32).ok());
  EXPECT_FALSE(file.GetArray("small", GgufType::kUint8).ok());
  EXPECT_FALSE(file.GetUint("absent").ok());

  EXPECT_EQ(*file.GetUintOr("absent", 9), 9u);
  EXPECT_EQ(*file.GetFloatOr("absent", 0.5), 0.5);
  EXPECT_EQ(*file.GetBoolOr("absent", true), true);
  EXPECT_EQ(*file.GetStringOr("absent", "dflt"), "dflt");
  EXPECT_EQ(*file.GetUintOr("small", 9), 3u);
  EXPECT_FALSE(file.GetUintOr("name", 9).ok());
  EXPECT_FALSE(file.GetStringOr("small", "dflt").ok());
  std::remove(path.c_str());
}

TEST(GgufFile, MissingFileIsAnError) {
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(ScratchPath("does-not-exist.gguf"));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("does-not-exist.gguf"), std::string::npos);
}

// A file larger than a 32-bit address space (sparse: it takes no disk space) is refused with a
// clear error there, not mapped truncated; on 64-bit hosts it maps and fails as "not GGUF".
TEST(GgufFile, FileBeyondA32BitAddressSpaceIsAClearError) {
  const std::string path = ScratchPath("five-gib.gguf");
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(5) << 30), 0);
  ::close(fd);
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  std::remove(path.c_str());
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("five-gib.gguf"), std::string::npos);
  if (sizeof(size_t) < 8) {
    EXPECT_NE(file.status().message().find("more than a 32-bit process can address"),
              std::string::npos)
        << file.status().message();
  }
}

TEST(GgufFile, StoryF32KnownFacts) {
  const std::string path = SharedDir() + "/models/story-gguf/story-f32.gguf";
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(*(*file)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*file)->GetUint("llama.block_count"), 2u);
  EXPECT_EQ((*file)->tensors().size(), 20u);
  const GgufTensorInfo* embd = (*file)->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->desc.dtype, DType::kF32);
  EXPECT_EQ(embd->desc.ShapeString(), "[128, 2048]");
  EXPECT_EQ(embd->bytes, 128u * 2048u * 4u);
}

std::vector<std::string> GgufFilesIn(const std::string& folder) {
  std::vector<std::string> paths;
  if (DIR* dir = ::opendir(folder.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") {
        paths.push_back(folder + "/" + name);
      }
    }
    ::closedir(dir);
  }
  return paths;
}

TEST(GgufFile, EverySharedFileParses) {
  std::vector<std::string> paths = GgufFilesIn(SharedDir() + "/models/synth-tiny");
  EXPECT_GE(paths.size(), 10u);
  const std::vector<std::string> vocabs = GgufFilesIn(SharedDir() + "/golden/tokenizer");
  EXPECT_GE(vocabs.size(), 5u);
  paths.insert(paths.end(), vocabs.begin(), vocabs.end());
  for (const std::string& extra : GgufFilesIn(SharedDir() + "/models/story-gguf")) {
    paths.push_back(extra);
  }
  for (const std::string& path : paths) {
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
    EXPECT_TRUE(file.ok()) << path << ": " << file.status().message();
  }
}

}  // namespace
}  // namespace petrel
