// Generated corruptions of a small valid GGUF and safetensors file: every open must either fail
// with a one-line message or succeed with in-bounds views; none may crash (run under ASan/UBSan).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/format/safetensors.h"
#include "gtest/gtest.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using Bytes = std::vector<uint8_t>;

std::string ScratchPath(const std::string& name) {
  return testing::ScratchDir() + "/malformed_test_" + std::to_string(::getpid()) + "_" + name;
}

void WriteBytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// Reads every byte a successful parse hands out, so a view past the mapping faults here.
uint64_t TouchGguf(const GgufFile& file) {
  uint64_t sum = 0;
  for (const auto& [key, value] : file.metadata()) {
    for (char c : value.str) sum += uint8_t(c);
    for (std::string_view s : value.strings) {
      for (char c : s) sum += uint8_t(c);
    }
    if (value.type == GgufType::kArray && value.elem_type != GgufType::kString) {
      for (uint64_t i = 0; i < value.count; ++i) sum += uint64_t(value.IntAt(i));
    }
  }
  for (const GgufTensorInfo& tensor : file.tensors()) {
    const uint8_t* data = static_cast<const uint8_t*>(tensor.data);
    for (uint64_t i = 0; i < tensor.bytes; ++i) sum += data[i];
  }
  return sum;
}

uint64_t TouchSafetensors(const SafetensorsFile& file) {
  uint64_t sum = 0;
  for (const SafetensorsTensor& tensor : file.tensors()) {
    const uint8_t* data = static_cast<const uint8_t*>(tensor.data);
    for (uint64_t i = 0; i < tensor.bytes; ++i) sum += data[i];
  }
  return sum;
}

enum class Expect { kFailOrHarmless, kFail };

// Writes `bytes`, opens them with the reader `Open`, and checks the outcome.
template <typename File, typename Touch>
void Check(const Bytes& bytes, const std::string& label, Expect expect, const char* needle,
           Touch touch) {
  const std::string path = ScratchPath("case.bin");
  WriteBytes(path, bytes);
  Result<std::unique_ptr<File>> file = File::Open(path);
  std::remove(path.c_str());  // a mapping outlives the name
  if (file.ok()) {
    EXPECT_NE(expect, Expect::kFail) << label << ": expected an error";
    volatile uint64_t sum = touch(**file);
    (void)sum;
    return;
  }
  const std::string message = file.status().message();
  // Set to review the wording of every message the corpus produces.
  if (std::getenv("PETREL_PRINT_ERRORS") != nullptr) std::printf("%s\n", message.c_str());
  EXPECT_FALSE(message.empty()) << label;
  EXPECT_EQ(message.find('\n'), std::string::npos) << label << ": " << message;
  if (needle != nullptr) {
    EXPECT_NE(message.find(needle), std::string::npos) << label << ": " << message;
  }
}

void CheckGguf(const Bytes& bytes, const std::string& label, Expect expect = Expect::kFail,
               const char* needle = nullptr) {
  Check<GgufFile>(bytes, label, expect, needle, TouchGguf);
}

void CheckSafetensors(const Bytes& bytes, const std::string& label, Expect expect = Expect::kFail,
                      const char* needle = nullptr) {
  Check<SafetensorsFile>(bytes, label, expect, needle, TouchSafetensors);
}

// ---- GGUF ----------------------------------------------------------------------------------

// A small file with every section: scalars, strings, arrays, three tensors of three types.
GgufWriter BaseWriter() {
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetAlignment(32);
  writer.SetU32("test.aaa", 7);
  writer.SetU64("test.bbb", 9);
  writer.SetI32("test.i32", -3);
  writer.SetF32("test.f32", 0.25f);
  writer.SetBool("test.bool", true);
  writer.SetStringArray("test.strings", {"x", "yz", ""});
  writer.SetI32Array("test.ints", {1, 2, 3});
  writer.SetF32Array("test.floats", {1.0f, 2.0f});
  const auto fill = [](size_t n_bytes) {
    return [n_bytes](void* dst) { std::memset(dst, 0x3c, n_bytes); };
  };
  const TensorDesc a = TensorDesc::Make(DType::kF32, {8, 2});
  const TensorDesc b = TensorDesc::Make(DType::kQ8_0, {32, 2});
  const TensorDesc c = TensorDesc::Make(DType::kF16, {4, 1, 1, 2});
  writer.AddTensor("t.a", a, fill(a.bytes()));
  writer.AddTensor("t.b", b, fill(b.bytes()));
  writer.AddTensor("t.c", c, fill(c.bytes()));
  return writer;
}

// Where each integer field of a GGUF file lives, found by re-walking the format.
struct Field {
  size_t at;
  int width;  // 4 or 8 bytes
  std::string what;
};

struct GgufLayout {
  std::vector<Field> fields;
  std::map<std::string, size_t> key_at;     // key name -> offset of its length field
  std::map<std::string, size_t> value_at;   // key name -> offset of its value type field
  std::map<std::string, size_t> tensor_at;  // tensor name -> offset of its name length field
  std::map<std::string, size_t> offset_at;  // tensor name -> offset of its data offset field
  std::map<std::string, size_t> dims_at;    // tensor name -> offset of its n_dims field
  size_t infos_end = 0;
  size_t data_offset = 0;
};

class GgufWalker {
 public:
  explicit GgufWalker(const Bytes& bytes) : bytes_(bytes) {}

  GgufLayout Walk() {
    pos_ = 4;
    Take(4, "version");
    const uint64_t n_tensors = Take(8, "tensor count");
    const uint64_t n_kv = Take(8, "metadata count");
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; ++i) {
      const size_t key_at = pos_;
      const std::string key = String("key length");
      layout_.key_at[key] = key_at;
      layout_.value_at[key] = pos_;
      const uint32_t type = uint32_t(Take(4, "value type"));
      if (key == "general.alignment") alignment = Peek(pos_, 4);
      Value(type);
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      const size_t name_at = pos_;
      const std::string name = String("tensor name length");
      layout_.tensor_at[name] = name_at;
      layout_.dims_at[name] = pos_;
      const uint64_t n_dims = Take(4, "n_dims");
      for (uint64_t d = 0; d < n_dims; ++d) Take(8, "dimension");
      Take(4, "ggml type");
      layout_.offset_at[name] = pos_;
      Take(8, "tensor offset");
    }
    layout_.infos_end = pos_;
    layout_.data_offset = (pos_ + alignment - 1) / alignment * alignment;
    return layout_;
  }

 private:
  uint64_t Peek(size_t at, int width) const {
    uint64_t value = 0;
    std::memcpy(&value, bytes_.data() + at, size_t(width));
    return value;
  }
  uint64_t Take(int width, const std::string& what) {
    const uint64_t value = Peek(pos_, width);
    layout_.fields.push_back(Field{pos_, width, what});
    pos_ += size_t(width);
    return value;
  }
  std::string String(const std::string& what) {
    const uint64_t length = Take(8, what);
    std::string text(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return text;
  }
  void Value(uint32_t type) {
    switch (GgufType(type)) {
      case GgufType::kUint8:
      case GgufType::kInt8:
      case GgufType::kBool:
        pos_ += 1;
        return;
      case GgufType::kUint16:
      case GgufType::kInt16:
        pos_ += 2;
        return;
      case GgufType::kUint32:
      case GgufType::kInt32:
      case GgufType::kFloat32:
        Take(4, "32-bit value");
        return;
      case GgufType::kUint64:
      case GgufType::kInt64:
      case GgufType::kFloat64:
        Take(8, "64-bit value");
        return;
      case GgufType::kString:
        String("string length");
        return;
      case GgufType::kArray: {
        const uint32_t elem = uint32_t(Take(4, "array element type"));
        const uint64_t count = Take(8, "array count");
        for (uint64_t i = 0; i < count; ++i) Value(elem);
        return;
      }
    }
  }

  const Bytes& bytes_;
  size_t pos_ = 0;
  GgufLayout layout_;
};

void Poke(Bytes& bytes, size_t at, int width, uint64_t value) {
  std::memcpy(bytes.data() + at, &value, size_t(width));
}

uint64_t PeekField(const Bytes& bytes, size_t at, int width) {
  uint64_t value = 0;
  std::memcpy(&value, bytes.data() + at, size_t(width));
  return value;
}

class MalformedGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = BaseWriter().WriteToMemory();
    layout_ = GgufWalker(base_).Walk();
    CheckGguf(base_, "unchanged base file", Expect::kFailOrHarmless);
    const std::string path = ScratchPath("base.gguf");
    WriteBytes(path, base_);
    ASSERT_TRUE(GgufFile::Open(path).ok()) << "the base file must be valid";
    std::remove(path.c_str());
  }
  Bytes base_;
  GgufLayout layout_;
};

TEST_F(MalformedGguf, WalkerAgreesWithReader) {
  EXPECT_EQ(layout_.key_at.size(), 10u);
  EXPECT_EQ(layout_.tensor_at.size(), 3u);
  EXPECT_EQ(layout_.data_offset % 32, 0u);
  EXPECT_GT(layout_.fields.size(), 40u);
}

TEST_F(MalformedGguf, TruncationAtEveryHeaderByte) {
  for (size_t size = 0; size < layout_.data_offset; ++size) {
    CheckGguf(Bytes(base_.begin(), base_.begin() + ptrdiff_t(size)),
              "truncated to " + std::to_string(size));
  }
}

TEST_F(MalformedGguf, TruncationInTheDataSection) {
  // Cutting into the last tensor must fail; only the final padding may go unnoticed.
  const size_t last_tensor_end =
      layout_.data_offset + PeekField(base_, layout_.offset_at.at("t.c"), 8) + 4 * 2 * 2;
  for (size_t size = layout_.data_offset; size < base_.size(); size += 3) {
    CheckGguf(Bytes(base_.begin(), base_.begin() + ptrdiff_t(size)),
              "truncated to " + std::to_string(size),
              size < last_tensor_end ? Expect::kFail : Expect::kFailOrHarmless);
  }
}

TEST_F(MalformedGguf, EveryIntegerFieldMutated) {
  for (const Field& field : layout_.fields) {
    const uint64_t all_ones = field.width == 4 ? 0xffffffffull : ~0ull;
    const uint64_t huge = field.width == 4 ? (1ull << 30) : (1ull << 62);
    const uint64_t original = PeekField(base_, field.at, field.width);
    for (uint64_t value : {uint64_t(0), uint64_t(1), all_ones, huge, original + 1, original - 1}) {
      Bytes bytes = base_;
      Poke(bytes, field.at, field.width, value & all_ones);
      CheckGguf(
          bytes,
          field.what + " at " + std::to_string(field.at) + " = " + std::to_string(value & all_ones),
          Expect::kFailOrHarmless);
    }
  }
}

TEST_F(MalformedGguf, EveryTypeFieldTriesEveryTypeId) {
  for (const Field& field : layout_.fields) {
    if (field.what != "value type" && field.what != "array element type") continue;
    for (uint64_t id = 0; id <= 14; ++id) {
      Bytes bytes = base_;
      Poke(bytes, field.at, 4, id);
      CheckGguf(bytes, field.what + " at " + std::to_string(field.at) + " = " + std::to_string(id),
                Expect::kFailOrHarmless);
    }
  }
  Bytes nested = base_;
  Poke(nested, layout_.value_at.at("test.ints") + 4, 4, uint64_t(GgufType::kArray));
  CheckGguf(nested, "nested array", Expect::kFail, "nested");
}

TEST_F(MalformedGguf, HeaderFields) {
  Bytes magic = base_;
  magic[0] = 'X';
  CheckGguf(magic, "bad magic", Expect::kFail, "magic");
  for (uint64_t version : {0u, 1u, 4u, 0x03000000u}) {
    Bytes bytes = base_;
    Poke(bytes, 4, 4, version);
    CheckGguf(bytes, "version " + std::to_string(version), Expect::kFail, "version");
  }
  Bytes kv_count = base_;
  Poke(kv_count, 16, 8, ~0ull);
  CheckGguf(kv_count, "huge kv count", Expect::kFail, "cannot fit");
  Bytes tensor_count = base_;
  Poke(tensor_count, 8, 8, 1ull << 62);
  CheckGguf(tensor_count, "huge tensor count", Expect::kFail, "cannot fit");
  Bytes string_length = base_;
  Poke(string_length, layout_.key_at.at("general.architecture"), 8, ~0ull);
  CheckGguf(string_length, "huge key length", Expect::kFail, "exceeds");
  Bytes empty_key = base_;
  Poke(empty_key, layout_.key_at.at("test.aaa"), 8, 0);
  CheckGguf(empty_key, "empty key", Expect::kFail);
  Bytes bad_bool = base_;
  bad_bool[layout_.value_at.at("test.bool") + 4] = 2;
  CheckGguf(bad_bool, "bool 2", Expect::kFail, "bool");
}

TEST_F(MalformedGguf, AlignmentOfTheWrongTypeOrValue) {
  const auto with = [](auto set_alignment) {
    GgufWriter writer = BaseWriter();
    set_alignment(writer);
    return writer.WriteToMemory();
  };
  CheckGguf(with([](GgufWriter& w) { w.SetI32("general.alignment", 32); }), "alignment i32",
            Expect::kFail, "general.alignment");
  CheckGguf(with([](GgufWriter& w) { w.SetString("general.alignment", "32"); }), "alignment string",
            Expect::kFail, "general.alignment");
  CheckGguf(with([](GgufWriter& w) { w.SetU64("general.alignment", 32); }), "alignment u64",
            Expect::kFail, "general.alignment");
  CheckGguf(with([](GgufWriter& w) { w.SetU32("general.alignment", 0); }), "alignment 0",
            Expect::kFail, "general.alignment");
  CheckGguf(with([](GgufWriter& w) { w.SetU32("general.alignment", 3); }), "alignment 3",
            Expect::kFail, "general.alignment");
  // Poked rather than written: a valid 2^31 alignment would make the writer pad by 2 GiB.
  Bytes huge = base_;
  Poke(huge, layout_.value_at.at("general.alignment") + 4, 4, 1u << 31);
  CheckGguf(huge, "alignment 2^31", Expect::kFail);
}

TEST_F(MalformedGguf, DuplicateKeysAndTensorNames) {
  // "test.bbb" becomes a second "test.aaa" (same length, so the layout is unchanged).
  Bytes keys = base_;
  std::memcpy(keys.data() + layout_.key_at.at("test.bbb") + 8, "test.aaa", 8);
  CheckGguf(keys, "duplicate key", Expect::kFail, "duplicate");
  Bytes names = base_;
  std::memcpy(names.data() + layout_.tensor_at.at("t.b") + 8, "t.a", 3);
  CheckGguf(names, "duplicate tensor", Expect::kFail, "duplicate");
  Bytes control_name = base_;
  std::memcpy(control_name.data() + layout_.tensor_at.at("t.b") + 8, "\n\x01'", 3);
  CheckGguf(control_name, "control characters in a name", Expect::kFailOrHarmless);
}

TEST_F(MalformedGguf, TensorInfoFields) {
  const size_t dims_at = layout_.dims_at.at("t.b");
  for (uint64_t n_dims : {0u, 5u, 1000u}) {
    Bytes bytes = base_;
    Poke(bytes, dims_at, 4, n_dims);
    CheckGguf(bytes, "n_dims " + std::to_string(n_dims), Expect::kFail, "n_dims");
  }
  Bytes zero_dim = base_;
  Poke(zero_dim, dims_at + 4 + 8, 8, 0);
  CheckGguf(zero_dim, "zero dimension", Expect::kFail, "dimension 1 is 0");
  Bytes overflow = base_;
  Poke(overflow, dims_at + 4 + 8, 8, 1ull << 62);
  CheckGguf(overflow, "element count overflow", Expect::kFail);
  Bytes partial_block = base_;
  Poke(partial_block, dims_at + 4, 8, 33);
  CheckGguf(partial_block, "row not whole blocks", Expect::kFail, "blocks");
  // Ids ggml retired (4, 5, 31: Q4_2, Q4_3, Q4_0_4_4), the first id after the last type, and junk.
  for (uint64_t type : {4u, 5u, 31u, 43u, 99u, 0xffffffffu}) {
    Bytes bytes = base_;
    Poke(bytes, layout_.offset_at.at("t.b") - 4, 4, type);
    CheckGguf(bytes, "ggml type " + std::to_string(type), Expect::kFail, "type");
  }
}

TEST_F(MalformedGguf, TensorOffsets) {
  const uint64_t a = PeekField(base_, layout_.offset_at.at("t.a"), 8);
  Bytes overlap = base_;
  Poke(overlap, layout_.offset_at.at("t.b"), 8, a);
  CheckGguf(overlap, "overlapping tensors", Expect::kFail, "overlaps");
  Bytes misaligned = base_;
  Poke(misaligned, layout_.offset_at.at("t.c"), 8,
       PeekField(base_, layout_.offset_at.at("t.c"), 8) + 1);
  CheckGguf(misaligned, "misaligned offset", Expect::kFail, "alignment");
  for (uint64_t offset : {uint64_t(base_.size()), uint64_t(1) << 40, ~uint64_t(31)}) {
    Bytes bytes = base_;
    Poke(bytes, layout_.offset_at.at("t.c"), 8, offset / 32 * 32);
    CheckGguf(bytes, "offset past the file " + std::to_string(offset), Expect::kFail);
  }
}

TEST_F(MalformedGguf, NamesWithNewlinesStayOnOneLine) {
  GgufWriter writer;
  writer.SetU32("evil\nkey", 1);
  writer.AddTensor("evil\ntensor", TensorDesc::Make(DType::kF32, {4}), nullptr);
  const Bytes bytes = writer.WriteToMemory();
  const GgufLayout layout = GgufWalker(bytes).Walk();
  Bytes bad_type = bytes;
  Poke(bad_type, layout.value_at.at("evil\nkey"), 4, 77);
  CheckGguf(bad_type, "unknown type of a key with a newline", Expect::kFail, "evil");
  Bytes zero_dim = bytes;
  Poke(zero_dim, layout.dims_at.at("evil\ntensor") + 4, 8, 0);
  CheckGguf(zero_dim, "zero dim of a tensor with a newline", Expect::kFail, "evil");
}

// ---- Safetensors ---------------------------------------------------------------------------

Bytes Safetensors(const std::string& json, size_t data_bytes, uint64_t length_override = 0) {
  const uint64_t length = length_override ? length_override : json.size();
  Bytes bytes(8 + json.size() + data_bytes, 0x11);
  std::memcpy(bytes.data(), &length, 8);
  if (!json.empty()) std::memcpy(bytes.data() + 8, json.data(), json.size());
  return bytes;
}

const char kValidJson[] = R"({"__metadata__":{"format":"pt"},)"
                          R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                          R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";

TEST(MalformedSafetensors, ValidBaseOpens) {
  CheckSafetensors(Safetensors(kValidJson, 32), "base", Expect::kFailOrHarmless);
  const std::string path = ScratchPath("base.safetensors");
  WriteBytes(path, Safetensors(kValidJson, 32));
  EXPECT_TRUE(SafetensorsFile::Open(path).ok());
  std::remove(path.c_str());
}

TEST(MalformedSafetensors, HeaderLength) {
  const size_t json_bytes = sizeof(kValidJson) - 1;
  CheckSafetensors(Bytes(), "empty file", Expect::kFail, "too short");
  CheckSafetensors(Bytes(7, 0), "7 bytes", Expect::kFail, "too short");
  CheckSafetensors(Safetensors("", 0), "length 0", Expect::kFail, "0");
  CheckSafetensors(Safetensors(kValidJson, 32, 1ull << 62), "huge length", Expect::kFail, "limit");
  CheckSafetensors(Safetensors(kValidJson, 32, json_bytes + 33), "length past the file",
                   Expect::kFail, "exceeds");
  CheckSafetensors(Safetensors(kValidJson, 32, json_bytes - 1), "length one short", Expect::kFail,
                   "JSON");
  const Bytes base = Safetensors(kValidJson, 32);
  for (size_t size = 0; size < base.size(); ++size) {
    CheckSafetensors(Bytes(base.begin(), base.begin() + ptrdiff_t(size)),
                     "truncated to " + std::to_string(size));
  }
}

TEST(MalformedSafetensors, HeaderContent) {
  const std::vector<std::pair<std::string, const char*>> cases = {
      {"{not json", "JSON"},
      {"[1, 2]", "object"},
      {"\"text\"", "object"},
      {"42", "object"},
      {R"({"__metadata__":[1]})", "__metadata__"},
      {R"({"__metadata__":{"k":1}})", "__metadata__"},
      {R"({"a":5})", "'a'"},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "dtype"},
      {R"({"a":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}})", "F8_E5M2"},
      {R"({"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", "BOOL"},
      {R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "dtype"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "needs 12"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "shape[0]"},
      {R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", "shape[0]"},
      {R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", "shape[0]"},
      {R"({"a":{"dtype":"F32","shape":[2199023255553],"data_offsets":[0,8]}})", "shape[0]"},
      {R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})",
       "overflows"},
      {R"({"a":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})", "dimensions"},
      {R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", "shape"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[32,40]}})", "outside"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})",
       "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
       R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
       "overlaps"},
      {R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "empty"},
      {R"({"a\nb":{"dtype":"Q","shape":[1],"data_offsets":[0,4]}})", "a\\x0ab"},
  };
  for (const auto& [json, needle] : cases) {
    CheckSafetensors(Safetensors(json, 32), json, Expect::kFail, needle);
  }
}

TEST(MalformedSafetensors, EveryHeaderByteReplaced) {
  const std::string json = kValidJson;
  for (size_t i = 0; i < json.size(); ++i) {
    for (char c : {'"', '}', '-', '9', '\0', ']', 'x'}) {
      std::string mutated = json;
      mutated[i] = c;
      CheckSafetensors(Safetensors(mutated, 32),
                       "byte " + std::to_string(i) + " = " + std::to_string(int(c)),
                       Expect::kFailOrHarmless);
    }
  }
}

}  // namespace
}  // namespace petrel
