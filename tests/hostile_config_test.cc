// Malformed hyperparameters of every family, from GGUF metadata (a synth-arch file rewritten
// with one key changed) and from config.json (the HF folder with one field changed): each is
// one error line naming what is wrong, before anything is sized from it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/loader.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string SynthArch(const std::string& name) {
  // The later families live in synth-arch2.
  const std::string first = testing::SharedDir() + "/models/synth-arch/" + name;
  if (std::filesystem::exists(first)) return first;
  return testing::SharedDir() + "/models/synth-arch2/" + name;
}

// One metadata key of a GGUF, rewritten; the suffix after "<arch>." names it.
struct KeyEdit {
  std::string key;  // "attention.sliding_window"
  enum Kind { kU32, kI32, kF32 } kind = kU32;
  double value = 0.0;
};

// A copy of `arch`.gguf with `edits` applied to its metadata; tensors unchanged.
std::string RewriteGguf(const std::string& arch, const std::vector<KeyEdit>& edits,
                        const std::string& name) {
  auto in = GgufFile::Open(SynthArch(arch + ".gguf"));
  EXPECT_TRUE(in.ok()) << in.status().message();
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  for (const KeyEdit& edit : edits) {
    const std::string key = arch + "." + edit.key;
    switch (edit.kind) {
      case KeyEdit::kU32:
        writer.SetU32(key, uint32_t(edit.value));
        break;
      case KeyEdit::kI32:
        writer.SetI32(key, int32_t(edit.value));
        break;
      case KeyEdit::kF32:
        writer.SetF32(key, float(edit.value));
        break;
    }
  }
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string path = testing::ScratchDir() + "/hostile_" + name + ".gguf";
  const Status status = writer.Write(path);
  EXPECT_TRUE(status.ok()) << status.message();
  return path;
}

// A copy of the `arch`-hf folder whose config.json has `patch` merged in (the weights and
// tokenizer files are links to the originals).
std::string RewriteHf(const std::string& arch, const nlohmann::json& patch,
                      const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path source = SynthArch(arch + "-hf");
  const fs::path folder = testing::ScratchDir() + "/hostile_" + name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(source)) {
    if (entry.path().filename() != "config.json") {
      fs::create_symlink(fs::absolute(entry.path()), folder / entry.path().filename());
    }
  }
  std::ifstream in(source / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.update(patch);
  std::ofstream(folder / "config.json") << config.dump(2);
  return folder.string();
}

void ExpectLoadError(const std::string& path, const std::string& needle) {
  LoadOptions options;
  options.load_tokenizer = false;
  auto loaded = LoadModel(path, options);
  ASSERT_FALSE(loaded.ok()) << path << " loaded; expected an error with: " << needle;
  const std::string message = loaded.status().message();
  EXPECT_NE(message.find(needle), std::string::npos) << path << ": " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << "the error names the file: " << message;
}

const char* const kFamilies[] = {"qwen3",  "qwen3moe", "phi3",    "gemma2",
                                 "gemma3", "olmo2",    "granite", "smollm3"};

TEST(HostileConfig, EveryFamilyRefusesBadHeadsAndRopeFromGguf) {
  for (const std::string arch : kFamilies) {
    SCOPED_TRACE(arch);
    ExpectLoadError(
        RewriteGguf(arch, {{"attention.head_count_kv", KeyEdit::kU32, 3}}, arch + "_kv3"),
        "kv head count 3 does not divide head count 4");
    ExpectLoadError(
        RewriteGguf(arch, {{"attention.head_count_kv", KeyEdit::kU32, 0}}, arch + "_kv0"),
        "kv head count 0 does not divide");
    ExpectLoadError(RewriteGguf(arch, {{"rope.freq_base", KeyEdit::kF32, 0}}, arch + "_base0"),
                    "rope base must be positive");
    ExpectLoadError(
        RewriteGguf(arch, {{"rope.freq_base", KeyEdit::kF32, -10000}}, arch + "_baseneg"),
        "rope base must be positive");
    // head_dim x heads no longer matches the Q (or fused QKV) tensor's rows.
    ExpectLoadError(RewriteGguf(arch,
                                {{"attention.key_length", KeyEdit::kU32, 64},
                                 {"attention.value_length", KeyEdit::kU32, 64}},
                                arch + "_headdim"),
                    "has shape");
    ExpectLoadError(RewriteGguf(arch,
                                {{"attention.key_length", KeyEdit::kU32, 0},
                                 {"attention.value_length", KeyEdit::kU32, 0}},
                                arch + "_headdim0"),
                    "head dimension 0 is invalid");
  }
}

TEST(HostileConfig, EveryFamilyRefusesBadHeadsAndRopeFromConfigJson) {
  for (const std::string arch : kFamilies) {
    SCOPED_TRACE(arch);
    ExpectLoadError(RewriteHf(arch, {{"num_key_value_heads", 3}}, arch + "_hf_kv3"),
                    "kv head count 3 does not divide head count 4");
    ExpectLoadError(RewriteHf(arch, {{"num_key_value_heads", 0}}, arch + "_hf_kv0"),
                    "kv head count 0 does not divide");
    ExpectLoadError(RewriteHf(arch, {{"rope_theta", 0}}, arch + "_hf_base0"),
                    "rope base must be positive");
    ExpectLoadError(RewriteHf(arch, {{"rope_theta", -1e4}}, arch + "_hf_baseneg"),
                    "rope base must be positive");
    ExpectLoadError(RewriteHf(arch, {{"head_dim", 64}}, arch + "_hf_headdim"), "has shape");
    ExpectLoadError(RewriteHf(arch, {{"head_dim", -32}}, arch + "_hf_headdimneg"),
                    "head dimension -32 is invalid");
  }
}

// A block count far beyond any model's is refused as it is read, before per-layer patterns
// (sliding windows, NoPE layers) are sized by it: 4e9 blocks once asked gpt-oss's reader for a
// 4 GB table (found by fuzz_gguf).
TEST(HostileConfig, HugeBlockCountsAreRefusedBeforeAnythingIsSized) {
  std::vector<std::string> families(std::begin(kFamilies), std::end(kFamilies));
  for (const char* more : {"gpt-oss", "deepseek2", "bert"}) families.push_back(more);
  for (const std::string& arch : families) {
    SCOPED_TRACE(arch);
    ExpectLoadError(
        RewriteGguf(arch, {{"block_count", KeyEdit::kU32, 4211015684.0}}, arch + "_blocks"),
        "block_count: block count 4211015684 is too large");
    ExpectLoadError(RewriteHf(arch, {{"num_hidden_layers", 2000000000}}, arch + "_hf_blocks"),
                    "'num_hidden_layers': block count 2000000000 is too large");
    ExpectLoadError(RewriteHf(arch, {{"num_hidden_layers", -3}}, arch + "_hf_blocksneg"),
                    "block count -3 is invalid");
  }
}

TEST(HostileConfig, ExpertCounts) {
  ExpectLoadError(RewriteGguf("qwen3moe", {{"expert_count", KeyEdit::kU32, 0}}, "moe_e0"),
                  "qwen3moe.expert_count is missing or 0");
  ExpectLoadError(RewriteGguf("qwen3moe", {{"expert_used_count", KeyEdit::kU32, 0}}, "moe_k0"),
                  "experts used per token 0 is invalid for 4 experts");
  ExpectLoadError(RewriteGguf("qwen3moe", {{"expert_used_count", KeyEdit::kU32, 5}}, "moe_k5"),
                  "experts used per token 5 is invalid for 4 experts");
  ExpectLoadError(RewriteGguf("qwen3moe", {{"expert_count", KeyEdit::kU32, 100000}}, "moe_huge"),
                  "expert count 100000 is invalid");
  ExpectLoadError(
      RewriteGguf("qwen3moe", {{"expert_feed_forward_length", KeyEdit::kU32, 0}}, "moe_ffn0"),
      "expert feed-forward length 0 is invalid");
  ExpectLoadError(RewriteHf("qwen3moe", {{"num_experts", 0}}, "moe_hf_e0"),
                  "config.json: num_experts is missing or 0");
  ExpectLoadError(RewriteHf("qwen3moe", {{"num_experts", -4}}, "moe_hf_eneg"),
                  "config.json: num_experts is -4");
  ExpectLoadError(RewriteHf("qwen3moe", {{"num_experts_per_tok", 0}}, "moe_hf_k0"),
                  "experts used per token 0 is invalid for 4 experts");
  ExpectLoadError(RewriteHf("qwen3moe", {{"num_experts_per_tok", 9}}, "moe_hf_k9"),
                  "experts used per token 9 is invalid for 4 experts");
}

TEST(HostileConfig, ExpertTensorsWithoutAnExpertCount) {
  // A Llama-family GGUF with stacked expert tensors but no count would be read as dense.
  auto in = GgufFile::Open(SynthArch("qwen3moe.gguf"));
  ASSERT_TRUE(in.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key.rfind("qwen3moe.", 0) == 0) {
      const std::string renamed = "llama." + key.substr(9);
      if (renamed != "llama.expert_count") writer.CopyValue(renamed, value);
    } else if (key != "general.alignment") {
      writer.CopyValue(key, value);
    }
  }
  writer.SetString("general.architecture", "llama");
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string path = testing::ScratchDir() + "/hostile_llama_experts.gguf";
  ASSERT_TRUE(writer.Write(path).ok());
  ExpectLoadError(path, "llama.expert_count is missing or 0 but the file has expert tensors");
}

TEST(HostileConfig, WindowsAndSoftCaps) {
  for (const std::string arch : {"gemma2", "gemma3"}) {
    SCOPED_TRACE(arch);
    ExpectLoadError(
        RewriteGguf(arch, {{"attention.sliding_window", KeyEdit::kU32, 0}}, arch + "_w0"),
        "sliding window 0 is invalid for windowed layers");
    ExpectLoadError(
        RewriteGguf(arch, {{"attention.sliding_window", KeyEdit::kI32, -16}}, arch + "_wneg"),
        "-16 is negative");
    ExpectLoadError(RewriteHf(arch, {{"sliding_window", 0}}, arch + "_hf_w0"),
                    "sliding window 0 is invalid for windowed layers");
    ExpectLoadError(RewriteHf(arch, {{"sliding_window", -16}}, arch + "_hf_wneg"),
                    "sliding window -16 is negative");
    ExpectLoadError(RewriteHf(arch, {{"sliding_window", 1.5}}, arch + "_hf_wfrac"),
                    "'sliding_window' must be an integer");
    for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      ExpectLoadError(RewriteGguf(arch, {{cap, KeyEdit::kF32, -30}}, arch + "_capneg"),
                      "soft-cap -30 is invalid");
      ExpectLoadError(RewriteHf(arch, {{cap, -30.0}}, arch + "_hf_capneg"),
                      "soft-cap -30 is invalid (must be positive, or null for none)");
      ExpectLoadError(RewriteHf(arch, {{cap, 0.0}}, arch + "_hf_cap0"),
                      "soft-cap 0 is invalid (must be positive, or null for none)");
    }
  }
  ExpectLoadError(RewriteGguf("gemma3", {{"rope.freq_base_swa", KeyEdit::kF32, 0}}, "g3_local0"),
                  "local rope base 0 must be positive");
  ExpectLoadError(RewriteHf("gemma3", {{"rope_local_base_freq", -1.0}}, "g3_hf_local"),
                  "'rope_local_base_freq' must be positive");
  ExpectLoadError(RewriteHf("gemma2", {{"query_pre_attn_scalar", 0}}, "g2_hf_scalar"),
                  "'query_pre_attn_scalar' must be positive");
}

// gpt-oss: the sinks must be one per head, the windowed layers need a window, the RoPE scaling
// must be a known kind, and YaRN's factor and betas and the SwiGLU limit must be usable.
TEST(HostileConfig, GptOss) {
  // A sinks tensor of 3 values for 4 heads.
  {
    auto in = GgufFile::Open(SynthArch("gpt-oss.gguf"));
    ASSERT_TRUE(in.ok());
    GgufWriter writer;
    for (const auto& [key, value] : (*in)->metadata()) {
      if (key != "general.alignment") writer.CopyValue(key, value);
    }
    for (const GgufTensorInfo& info : (*in)->tensors()) {
      const void* data = info.data;
      TensorDesc desc = info.desc;
      if (info.name == "blk.2.attn_sinks.weight") desc = TensorDesc::Make(DType::kF32, {3});
      const size_t bytes = desc.bytes();
      writer.AddTensor(info.name, desc,
                       [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
    }
    const std::string path = testing::ScratchDir() + "/hostile_gptoss_sinks.gguf";
    ASSERT_TRUE(writer.Write(path).ok());
    ExpectLoadError(path, "tensor blk.2.attn_sinks.weight has shape [3], expected [4]");
  }
  ExpectLoadError(
      RewriteGguf("gpt-oss", {{"attention.sliding_window", KeyEdit::kU32, 0}}, "gptoss_w0"),
      "sliding window 0 is invalid for windowed layers");
  ExpectLoadError(RewriteHf("gpt-oss", {{"sliding_window", 0}}, "gptoss_hf_w0"),
                  "sliding window 0 is invalid for windowed layers");
  ExpectLoadError(RewriteHf("gpt-oss", {{"sliding_window", nullptr}}, "gptoss_hf_wnull"),
                  "sliding window 0 is invalid for windowed layers");
  ExpectLoadError(
      RewriteHf(
          "gpt-oss",
          {{"layer_types",
            {"sliding_attention", "chunked_attention", "sliding_attention", "full_attention"}}},
          "gptoss_hf_lt"),
      "layer type \"chunked_attention\" is not supported");
  // Unknown RoPE scaling kinds.
  {
    auto in = GgufFile::Open(SynthArch("gpt-oss.gguf"));
    ASSERT_TRUE(in.ok());
    GgufWriter writer;
    for (const auto& [key, value] : (*in)->metadata()) {
      if (key != "general.alignment") writer.CopyValue(key, value);
    }
    writer.SetString("gpt-oss.rope.scaling.type", "ntk-magic");
    for (const GgufTensorInfo& info : (*in)->tensors()) {
      const void* data = info.data;
      const size_t bytes = info.desc.bytes();
      writer.AddTensor(info.name, info.desc,
                       [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
    }
    const std::string path = testing::ScratchDir() + "/hostile_gptoss_scaling.gguf";
    ASSERT_TRUE(writer.Write(path).ok());
    ExpectLoadError(path, "rope scaling 'ntk-magic' is not supported");
  }
  ExpectLoadError(
      RewriteHf("gpt-oss", {{"rope_scaling", {{"rope_type", "ntk-magic"}, {"factor", 2.0}}}},
                "gptoss_hf_scaling"),
      "rope_scaling type 'ntk-magic' is not supported");
  // YaRN factor <= 0, inverted betas.
  for (double factor : {0.0, -32.0}) {
    ExpectLoadError(
        RewriteGguf("gpt-oss", {{"rope.scaling.factor", KeyEdit::kF32, factor}}, "gptoss_f"),
        "yarn rope scaling factor");
    nlohmann::json scaling = {
        {"rope_type", "yarn"}, {"factor", factor}, {"original_max_position_embeddings", 4096}};
    ExpectLoadError(RewriteHf("gpt-oss", {{"rope_scaling", scaling}}, "gptoss_hf_f"),
                    "must be positive");
  }
  ExpectLoadError(RewriteHf("gpt-oss",
                            {{"rope_scaling",
                              {{"rope_type", "yarn"},
                               {"factor", 32.0},
                               {"beta_fast", 1.0},
                               {"beta_slow", 32.0},
                               {"original_max_position_embeddings", 4096}}}},
                            "gptoss_hf_beta"),
                  "yarn rope scaling needs beta_fast > beta_slow > 0");
  ExpectLoadError(
      RewriteGguf("gpt-oss", {{"rope.scaling.yarn_beta_slow", KeyEdit::kF32, 64}}, "gptoss_beta"),
      "yarn rope scaling needs beta_fast > beta_slow > 0");
  for (double limit : {0.0, -7.0}) {
    ExpectLoadError(RewriteHf("gpt-oss", {{"swiglu_limit", limit}}, "gptoss_hf_limit"),
                    "field 'swiglu_limit': swiglu limit");
  }
  ExpectLoadError(RewriteGguf("gpt-oss", {{"expert_count", KeyEdit::kU32, 0}}, "gptoss_e0"),
                  "gpt-oss.expert_count is missing or 0");
  // Unedited copies load.
  LoadOptions options;
  options.load_tokenizer = false;
  auto gguf = LoadModel(RewriteGguf("gpt-oss", {}, "gptoss_same"), options);
  EXPECT_TRUE(gguf.ok()) << gguf.status().message();
  auto hf = LoadModel(RewriteHf("gpt-oss", nlohmann::json::object(), "gptoss_hf_same"), options);
  EXPECT_TRUE(hf.ok()) << hf.status().message();
}

// DeepSeek2's latent attention and grouped routing, from GGUF metadata and from config.json.
TEST(HostileConfig, DeepSeek2) {
  const std::string a = "deepseek2";
  ExpectLoadError(RewriteGguf(a, {{"attention.kv_lora_rank", KeyEdit::kU32, 0}}, "ds_kv0"),
                  "deepseek2.attention.kv_lora_rank is 0");
  ExpectLoadError(RewriteHf(a, {{"kv_lora_rank", 0}}, "ds_hf_kv0"), "config.json: kv_lora_rank is 0");
  // The rope part larger than the whole key head (nope + rope = 24).
  ExpectLoadError(RewriteGguf(a, {{"rope.dimension_count", KeyEdit::kU32, 32}}, "ds_rope32"),
                  "rope dimension count 32 is invalid for head dim 24");
  ExpectLoadError(RewriteHf(a, {{"qk_rope_head_dim", -8}}, "ds_hf_rope"),
                  "qk_rope_head_dim -8 must be positive");
  ExpectLoadError(RewriteGguf(a, {{"expert_group_count", KeyEdit::kU32, 3}}, "ds_groups3"),
                  "expert group count 3 does not divide the 8 experts");
  ExpectLoadError(RewriteHf(a, {{"n_group", 3}}, "ds_hf_groups3"),
                  "expert group count 3 does not divide the 8 experts");
  ExpectLoadError(RewriteGguf(a, {{"expert_group_used_count", KeyEdit::kU32, 3}}, "ds_topk3"),
                  "expert groups used 3 is invalid for 2 groups");
  ExpectLoadError(RewriteHf(a, {{"topk_group", 3}}, "ds_hf_topk3"),
                  "expert groups used 3 is invalid for 2 groups");
  ExpectLoadError(RewriteHf(a, {{"topk_group", 0}}, "ds_hf_topk0"),
                  "expert groups used 0 is invalid for 2 groups");
  // Top-k larger than the experts of the groups kept (1 group of 4).
  ExpectLoadError(RewriteHf(a, {{"num_experts_per_tok", 5}}, "ds_hf_k5"),
                  "experts used per token 5 exceed the 4 experts of the 1 groups used");
  ExpectLoadError(RewriteGguf(a, {{"expert_gating_func", KeyEdit::kU32, 7}}, "ds_gating7"),
                  "expert gating function 7 is not supported");
  ExpectLoadError(RewriteHf(a, {{"scoring_func", "relu"}}, "ds_hf_scoring"),
                  "scoring_func 'relu' is not supported");
  ExpectLoadError(
      RewriteHf(a, {{"rope_scaling", {{"type", "dynamic"}, {"factor", 40}}}}, "ds_hf_dynamic"),
      "rope_scaling type 'dynamic' is not supported");
  ExpectLoadError(RewriteGguf(a, {{"leading_dense_block_count", KeyEdit::kU32, 9}}, "ds_dense9"),
                  "leading dense block count 9 is invalid for 3 blocks");
  ExpectLoadError(RewriteHf(a, {{"moe_layer_freq", 2}}, "ds_hf_freq"),
                  "moe_layer_freq 2 is not supported");
  // Unedited copies load.
  LoadOptions options;
  options.load_tokenizer = false;
  auto gguf = LoadModel(RewriteGguf(a, {}, "ds_same"), options);
  EXPECT_TRUE(gguf.ok()) << gguf.status().message();
  auto hf = LoadModel(RewriteHf(a, nlohmann::json::object(), "ds_hf_same"), options);
  EXPECT_TRUE(hf.ok()) << hf.status().message();
}

// Granite's four multipliers must be positive (zero or negative would silently zero or flip the
// model; a zero attention scale would even read as the default).
TEST(HostileConfig, GraniteMultipliers) {
  const char* const keys[] = {"embedding_scale", "residual_scale", "attention.scale",
                              "logit_scale"};
  const char* const fields[] = {"embedding_multiplier", "residual_multiplier",
                                "attention_multiplier", "logits_scaling"};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(keys[i]);
    for (double bad : {0.0, -0.5}) {
      ExpectLoadError(RewriteGguf("granite", {{keys[i], KeyEdit::kF32, bad}}, "granite_mult"),
                      "key granite." + std::string(keys[i]) + ": " + (bad == 0.0 ? "0" : "-0.5") +
                          " is invalid (must be positive)");
      ExpectLoadError(RewriteHf("granite", {{fields[i], bad}}, "granite_hf_mult"),
                      "field '" + std::string(fields[i]) + "' must be a positive number");
    }
    ExpectLoadError(RewriteHf("granite", {{fields[i], "12"}}, "granite_hf_mult_str"),
                    "field '" + std::string(fields[i]) + "' must be a positive number, not \"12\"");
  }
  // The GGUF keys are required, as llama.cpp requires them.
  auto in = GgufFile::Open(SynthArch("granite.gguf"));
  ASSERT_TRUE(in.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment" && key != "granite.logit_scale") writer.CopyValue(key, value);
  }
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string path = testing::ScratchDir() + "/hostile_granite_nologit.gguf";
  ASSERT_TRUE(writer.Write(path).ok());
  ExpectLoadError(path, "granite.logit_scale");
}

// SmolLM3's NoPE layers: one 0/1 flag per layer, or a positive interval.
TEST(HostileConfig, SmolLm3NopeLayers) {
  ExpectLoadError(RewriteHf("smollm3", {{"no_rope_layers", {1, 1, 0}}}, "smol_hf_short"),
                  "field 'no_rope_layers' must list one flag per layer (4), found 3 entries");
  ExpectLoadError(RewriteHf("smollm3", {{"no_rope_layers", {1, 1, 0, 1, 1}}}, "smol_hf_long"),
                  "field 'no_rope_layers' must list one flag per layer (4), found 5 entries");
  ExpectLoadError(RewriteHf("smollm3", {{"no_rope_layers", {1, 1, 2, 0}}}, "smol_hf_two"),
                  "field 'no_rope_layers' entry 2 must be 1 (RoPE) or 0 (none)");
  ExpectLoadError(RewriteHf("smollm3", {{"no_rope_layers", "all"}}, "smol_hf_str"),
                  "field 'no_rope_layers' must list one flag per layer (4), found string");
  ExpectLoadError(RewriteHf("smollm3", {{"no_rope_layers", nullptr}, {"no_rope_layer_interval", 0}},
                            "smol_hf_interval0"),
                  "field 'no_rope_layer_interval' must be a positive integer, not 0");
  ExpectLoadError(RewriteHf("smollm3", {{"use_sliding_window", true}}, "smol_hf_window"),
                  "windowed SmolLM3 layers are not supported");
  // petrel's GGUF key of the wrong length or with other values than 0/1.
  for (const auto& [list, needle] :
       {std::pair{std::vector<int32_t>{1, 1, 0}, "smollm3.no_rope_layers: 3 entries for 4 layers"},
        std::pair{std::vector<int32_t>{1, 1, 1, 7}, "smollm3.no_rope_layers: entry 3 is 7"}}) {
    auto in = GgufFile::Open(SynthArch("smollm3.gguf"));
    ASSERT_TRUE(in.ok());
    GgufWriter writer;
    for (const auto& [key, value] : (*in)->metadata()) {
      if (key != "general.alignment") writer.CopyValue(key, value);
    }
    writer.SetI32Array("smollm3.no_rope_layers", list);
    for (const GgufTensorInfo& info : (*in)->tensors()) {
      const void* data = info.data;
      const size_t bytes = info.desc.bytes();
      writer.AddTensor(info.name, info.desc,
                       [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
    }
    const std::string path = testing::ScratchDir() + "/hostile_smol_nope.gguf";
    ASSERT_TRUE(writer.Write(path).ok());
    ExpectLoadError(path, needle);
  }
}

// OLMo 2's q/k norms span the whole projection: a per-head norm tensor is refused by shape.
TEST(HostileConfig, Olmo2QkNormShape) {
  auto in = GgufFile::Open(SynthArch("olmo2.gguf"));
  ASSERT_TRUE(in.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    TensorDesc desc = info.desc;
    if (info.name == "blk.1.attn_q_norm.weight") desc = TensorDesc::Make(DType::kF32, {16});
    const size_t bytes = desc.bytes();
    writer.AddTensor(info.name, desc, [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string path = testing::ScratchDir() + "/hostile_olmo2_qnorm.gguf";
  ASSERT_TRUE(writer.Write(path).ok());
  ExpectLoadError(path, "tensor blk.1.attn_q_norm.weight has shape [16], expected [64]");
}

// LongRoPE's tables: one positive factor per rotated pair (16 here), both present.
TEST(HostileConfig, LongRopeFactors) {
  auto scaling = [](nlohmann::json long_factor, nlohmann::json short_factor) {
    nlohmann::json s = {{"type", "longrope"}};
    if (!long_factor.is_null()) s["long_factor"] = long_factor;
    if (!short_factor.is_null()) s["short_factor"] = short_factor;
    return nlohmann::json{{"max_position_embeddings", 4096},
                          {"original_max_position_embeddings", 256},
                          {"rope_scaling", s}};
  };
  const std::vector<double> ok(16, 1.5);
  ExpectLoadError(RewriteHf("phi3", scaling(std::vector<double>(15, 1.5), ok), "lr_long15"),
                  "longrope long factors: 15 values, expected 16 (one per rotated pair)");
  ExpectLoadError(RewriteHf("phi3", scaling(ok, std::vector<double>(32, 1.5)), "lr_short32"),
                  "longrope short factors: 32 values, expected 16 (one per rotated pair)");
  std::vector<double> negative = ok;
  negative[5] = -1.0;
  ExpectLoadError(RewriteHf("phi3", scaling(ok, negative), "lr_neg"),
                  "longrope short factor -1 is invalid (must be positive)");
  ExpectLoadError(RewriteHf("phi3", scaling(ok, nullptr), "lr_noshort"),
                  "rope_scaling field 'short_factor' must be an array of numbers (longrope)");
  nlohmann::json text = ok;
  text[2] = "x";
  ExpectLoadError(RewriteHf("phi3", scaling(text, ok), "lr_text"),
                  "rope_scaling field 'long_factor' must be an array of numbers, found \"x\"");
  nlohmann::json zero_original = scaling(ok, ok);
  zero_original["original_max_position_embeddings"] = 0;
  ExpectLoadError(RewriteHf("phi3", zero_original, "lr_orig0"),
                  "field 'original_max_position_embeddings' must be a positive integer, not 0");
  nlohmann::json bad_attention = scaling(ok, ok);
  bad_attention["rope_scaling"]["attention_factor"] = -2.0;
  ExpectLoadError(RewriteHf("phi3", bad_attention, "lr_attn"),
                  "rope_scaling field 'attention_factor' -2 must be positive");
  // GGUF: a table of the wrong length, and one table without the other.
  for (const auto& [long_len, with_short, needle] :
       {std::tuple{15, true, "longrope long factors: 15 values, expected 16"},
        std::tuple{16, false, "tensor rope_factors_short.weight is missing"}}) {
    auto in = GgufFile::Open(SynthArch("phi3.gguf"));
    ASSERT_TRUE(in.ok());
    GgufWriter writer;
    for (const auto& [key, value] : (*in)->metadata()) {
      if (key != "general.alignment") writer.CopyValue(key, value);
    }
    for (const GgufTensorInfo& info : (*in)->tensors()) {
      const void* data = info.data;
      const size_t bytes = info.desc.bytes();
      writer.AddTensor(info.name, info.desc,
                       [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
    }
    auto fill = [](void* dst, int n) {
      for (int i = 0; i < n; ++i) static_cast<float*>(dst)[i] = 1.5f;
    };
    writer.AddTensor("rope_factors_long.weight", TensorDesc::Make(DType::kF32, {long_len}),
                     [fill, n = long_len](void* dst) { fill(dst, n); });
    if (with_short) {
      writer.AddTensor("rope_factors_short.weight", TensorDesc::Make(DType::kF32, {16}),
                       [fill](void* dst) { fill(dst, 16); });
    }
    const std::string path = testing::ScratchDir() + "/hostile_longrope.gguf";
    ASSERT_TRUE(writer.Write(path).ok());
    ExpectLoadError(path, needle);
  }
}

// The files rewritten with nothing changed still load: the edits above are what fails.
TEST(HostileConfig, UneditedCopiesLoad) {
  for (const std::string arch : kFamilies) {
    LoadOptions options;
    options.load_tokenizer = false;
    auto gguf = LoadModel(RewriteGguf(arch, {}, arch + "_same"), options);
    EXPECT_TRUE(gguf.ok()) << gguf.status().message();
    auto hf = LoadModel(RewriteHf(arch, nlohmann::json::object(), arch + "_hf_same"), options);
    EXPECT_TRUE(hf.ok()) << hf.status().message();
  }
}

}  // namespace
}  // namespace petrel
