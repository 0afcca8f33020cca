// A random rank-4 LoRA adapter of the story model's attention and FFN matrices, in llama.cpp's
// GGUF layout, written to `path`; different seeds change the greedy text differently.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/format/gguf_writer.h"

namespace petrel::testing {

inline void WriteStoryLoraAdapter(const std::string& path, unsigned seed) {
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("general.type", "adapter");
  writer.SetString("adapter.type", "lora");
  writer.SetF32("adapter.lora.alpha", 8.0f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const struct {
    const char* name;
    int64_t n_in, n_out;
  } targets[] = {{"attn_q", 128, 128}, {"attn_v", 128, 64}, {"ffn_down", 384, 128}};
  constexpr int64_t kRank = 4;
  for (int l = 0; l < 2; ++l) {
    for (const auto& target : targets) {
      const std::string stem = "blk." + std::to_string(l) + "." + target.name + ".weight";
      for (const bool is_a : {true, false}) {
        const TensorDesc desc = is_a ? TensorDesc::Make(DType::kF32, {target.n_in, kRank})
                                     : TensorDesc::Make(DType::kF32, {kRank, target.n_out});
        auto values = std::make_shared<std::vector<float>>(size_t(desc.n_elems()));
        for (float& v : *values) v = normal(rng);
        writer.AddTensor(stem + (is_a ? ".lora_a" : ".lora_b"), desc, [values](void* dst) {
          std::memcpy(dst, values->data(), values->size() * sizeof(float));
        });
      }
    }
  }
  EXPECT_TRUE(writer.Write(path).ok());
}

}  // namespace petrel::testing
