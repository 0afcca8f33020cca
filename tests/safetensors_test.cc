// Safetensors: the shared story model, a generated sharded folder, and folder-level errors.
#include "core/format/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/test_data.h"

namespace petrel {
namespace {

using ::petrel::testing::ScratchDir;
using ::petrel::testing::SharedDir;

std::string MakeScratchFolder(const std::string& name) {
  const std::string folder =
      ScratchDir() + "/safetensors_test_" + std::to_string(::getpid()) + "_" + name;
  ::mkdir(folder.c_str(), 0755);
  return folder;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// One F32 tensor per name, shape {2, cols}, filled with its index.
std::string MakeShard(const std::vector<std::string>& names, int cols) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (size_t i = 0; i < names.size(); ++i) {
    const size_t begin = data.size();
    for (int e = 0; e < 2 * cols; ++e) {
      const float value = float(i) + 0.5f;
      data.append(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    header[names[i]] = {
        {"dtype", "F32"}, {"shape", {2, cols}}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string json = header.dump();
  const uint64_t length = json.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + json + data;
}

TEST(Safetensors, StoryModel) {
  Result<std::unique_ptr<SafetensorsSet>> set =
      SafetensorsSet::OpenFolder(SharedDir() + "/models/story");
  ASSERT_TRUE(set.ok()) << set.status().message();
  const SafetensorsTensor* head = (*set)->Find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->desc.dtype, DType::kF32);
  EXPECT_EQ(head->desc.n_dims, 2);
  EXPECT_EQ(head->desc.ne[0], 128);
  EXPECT_EQ(head->desc.ne[1], 2048);
  EXPECT_EQ(head->bytes, 128u * 2048u * 4u);
  EXPECT_EQ((*set)->tensors().size(), 20u);
  EXPECT_GT((*set)->total_bytes(), head->bytes);
  EXPECT_EQ((*set)->Find("missing"), nullptr);

  Result<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(SharedDir() + "/models/story/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const SafetensorsTensor* norm = (*file)->Find("model.layers.0.input_layernorm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->desc.ShapeString(), "[128]");
}

TEST(Safetensors, ShardedFolder) {
  const std::string folder = MakeScratchFolder("sharded");
  WriteFile(folder + "/model-00001-of-00002.safetensors", MakeShard({"a.weight", "b.weight"}, 3));
  WriteFile(folder + "/model-00002-of-00002.safetensors", MakeShard({"c.weight"}, 5));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map",
                           {{"a.weight", "model-00001-of-00002.safetensors"},
                            {"b.weight", "model-00001-of-00002.safetensors"},
                            {"c.weight", "model-00002-of-00002.safetensors"}}}};
  WriteFile(folder + "/model.safetensors.index.json", index.dump());

  Result<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::OpenFolder(folder);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ((*set)->tensors().size(), 3u);
  EXPECT_EQ((*set)->total_bytes(), (2u * 3u + 2u * 3u + 2u * 5u) * 4u);
  const SafetensorsTensor* c = (*set)->Find("c.weight");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->desc.ne[0], 5);
  EXPECT_EQ(c->desc.ne[1], 2);
  EXPECT_NE(c->file.find("00002-of-00002"), std::string::npos);
  float first = 0;
  std::memcpy(&first, c->data, sizeof(first));
  EXPECT_EQ(first, 0.5f);
  const SafetensorsTensor* b = (*set)->Find("b.weight");
  ASSERT_NE(b, nullptr);
  std::memcpy(&first, b->data, sizeof(first));
  EXPECT_EQ(first, 1.5f);

  // An index naming a tensor its shard does not hold.
  index["weight_map"]["d.weight"] = "model-00002-of-00002.safetensors";
  WriteFile(folder + "/model.safetensors.index.json", index.dump());
  Result<std::unique_ptr<SafetensorsSet>> missing = SafetensorsSet::OpenFolder(folder);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("d.weight"), std::string::npos)
      << missing.status().message();

  // An index naming the wrong shard for a tensor that exists elsewhere.
  index["weight_map"].erase("d.weight");
  index["weight_map"]["c.weight"] = "model-00001-of-00002.safetensors";
  WriteFile(folder + "/model.safetensors.index.json", index.dump());
  EXPECT_FALSE(SafetensorsSet::OpenFolder(folder).ok());

  // An index naming a shard that does not exist.
  index["weight_map"]["c.weight"] = "model-00003-of-00002.safetensors";
  WriteFile(folder + "/model.safetensors.index.json", index.dump());
  Result<std::unique_ptr<SafetensorsSet>> no_shard = SafetensorsSet::OpenFolder(folder);
  ASSERT_FALSE(no_shard.ok());
  EXPECT_NE(no_shard.status().message().find("00003"), std::string::npos);

  // The same tensor in two shards.
  WriteFile(folder + "/model-00002-of-00002.safetensors", MakeShard({"a.weight"}, 5));
  index["weight_map"].erase("c.weight");
  WriteFile(folder + "/model.safetensors.index.json", index.dump());
  // a.weight maps to shard 1 only, so shard 2 is never opened: still fine.
  EXPECT_TRUE(SafetensorsSet::OpenFolder(folder).ok());
  index["weight_map"]["x"] = "model-00002-of-00002.safetensors";
  WriteFile(folder + "/model.safetensors.index.json", index.dump());
  Result<std::unique_ptr<SafetensorsSet>> duplicate = SafetensorsSet::OpenFolder(folder);
  ASSERT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.status().message().find("a.weight"), std::string::npos);

  // Not JSON at all.
  WriteFile(folder + "/model.safetensors.index.json", "{not json");
  EXPECT_FALSE(SafetensorsSet::OpenFolder(folder).ok());
  std::remove((folder + "/model.safetensors.index.json").c_str());
  std::remove((folder + "/model-00001-of-00002.safetensors").c_str());
  std::remove((folder + "/model-00002-of-00002.safetensors").c_str());
  ::rmdir(folder.c_str());
}

TEST(Safetensors, FolderErrors) {
  Result<std::unique_ptr<SafetensorsSet>> absent =
      SafetensorsSet::OpenFolder(ScratchDir() + "/no-such-folder-petrel");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("no-such-folder-petrel"), std::string::npos);

  const std::string empty = MakeScratchFolder("empty");
  Result<std::unique_ptr<SafetensorsSet>> nothing = SafetensorsSet::OpenFolder(empty);
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("model.safetensors"), std::string::npos);
  ::rmdir(empty.c_str());
}

TEST(Safetensors, ScalarAndEmptyTensors) {
  const std::string folder = MakeScratchFolder("scalar");
  const std::string json = R"({"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                           R"("e":{"dtype":"BF16","shape":[0,7],"data_offsets":[4,4]},)"
                           R"("h":{"dtype":"F16","shape":[3],"data_offsets":[4,10]}})";
  const uint64_t length = json.size();
  WriteFile(folder + "/model.safetensors",
            std::string(reinterpret_cast<const char*>(&length), 8) + json + std::string(10, '\1'));
  Result<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::OpenFolder(folder);
  ASSERT_TRUE(set.ok()) << set.status().message();
  const SafetensorsTensor* scalar = (*set)->Find("s");
  ASSERT_NE(scalar, nullptr);
  EXPECT_EQ(scalar->desc.n_dims, 1);
  EXPECT_EQ(scalar->desc.ne[0], 1);
  EXPECT_EQ(scalar->desc.dtype, DType::kI32);
  const SafetensorsTensor* empty = (*set)->Find("e");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->bytes, 0u);
  EXPECT_EQ(empty->desc.ne[0], 7);
  EXPECT_EQ(empty->desc.ne[1], 0);
  EXPECT_EQ((*set)->Find("h")->desc.dtype, DType::kF16);
  std::remove((folder + "/model.safetensors").c_str());
  ::rmdir(folder.c_str());
}

}  // namespace
}  // namespace petrel
