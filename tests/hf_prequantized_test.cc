// Pre-quantized Hugging Face checkpoints (quantization_config fp8, gptq, awq): the story model's
// projections packed here by reference packers that follow each format's published layout, loaded
// by the engine, and compared with the same model whose weights this file dequantizes in f32 from
// the packed tensors by the spec. Hostile configs and tensors are one-line errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/format/safetensors.h"
#include "core/model/hf_quant.h"
#include "core/model/loader.h"
#include "core/runtime/engine.h"
#include "quant/f16.h"
#include "quant/quantize.h"  // DequantizeRow
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

// README §4 of the golden data: 4- and 5-bit block weights multiplied with 8-bit activations.
constexpr testing::Tolerance kQ8ActivationTolerance{1.0, 0.05, 0.85};

// A tensor as a safetensors file stores it: dtype name, shape in PyTorch order, raw bytes.
struct StTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using TensorMap = std::map<std::string, StTensor>;

template <typename T>
StTensor MakeTensor(const char* dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  StTensor t{dtype, std::move(shape), std::vector<uint8_t>(values.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

void WriteSafetensors(const std::string& path, const TensorMap& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t header_bytes = text.size();
  out.write(reinterpret_cast<const char*>(&header_bytes), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  }
}

// A row-major [out][in] f32 matrix.
struct Matrix {
  int64_t out = 0, in = 0;
  std::vector<float> values;
  float at(int64_t o, int64_t i) const { return values[size_t(o * in + i)]; }
};

// A real HF folder's config and tensors, as f32.
struct BaseModel {
  nlohmann::json config;
  std::map<std::string, Matrix> tensors;  // vectors have out == 1
};

// The bases: the story model (Llama) and the synthetic Qwen3-MoE, whose experts the loader stacks.
constexpr const char* kStory = "/models/story";
constexpr const char* kQwen3Moe = "/models/synth-arch/qwen3moe-hf";

const BaseModel& LoadBase(const std::string& folder = kStory) {
  static std::map<std::string, BaseModel> cache;
  if (auto it = cache.find(folder); it != cache.end()) return it->second;
  BaseModel& s = cache[folder];
  {
    std::ifstream in(SharedDir() + folder + "/config.json");
    s.config = nlohmann::json::parse(in);
    auto file = SafetensorsFile::Open(SharedDir() + folder + "/model.safetensors");
    EXPECT_TRUE(file.ok()) << file.status().message();
    for (const SafetensorsTensor& t : (*file)->tensors()) {
      EXPECT_EQ(t.desc.dtype, DType::kF32) << t.name;
      Matrix m;
      m.in = t.desc.ne[0];
      m.out = t.desc.n_dims == 2 ? t.desc.ne[1] : 1;
      m.values.resize(size_t(m.in * m.out));
      std::memcpy(m.values.data(), t.data, m.values.size() * sizeof(float));
      s.tensors[t.name] = std::move(m);
    }
  }
  return s;
}

// The projections every case packs: both blocks' attention and feed-forward matrices.
bool IsProjection(const std::string& name) {
  return name.find("_proj.weight") != std::string::npos;
}

std::string Prefix(const std::string& name) { return name.substr(0, name.size() - 7); }

// ---- 4-bit reference packers and the spec's dequantizers -------------------------------------

constexpr std::array<int, 8> kAwqPackOrder = {0, 2, 4, 6, 1, 3, 5, 7};

// One 4-bit quantization of a matrix: q (out, in) in 0..15, zero and f16 scale per (group, out),
// and each input's group.
struct Int4 {
  int64_t out = 0, in = 0, n_groups = 0;
  std::vector<uint8_t> q;
  std::vector<int> zero;        // the true zero point, 0..15
  std::vector<uint16_t> scale;  // f16
  std::vector<int32_t> group;
};

// Min/max quantization per (group, output); `sym`: zero 8 and scale amax / 7.
Int4 QuantizeInt4(const Matrix& w, std::vector<int32_t> group, int64_t n_groups, bool sym) {
  Int4 r;
  r.out = w.out;
  r.in = w.in;
  r.n_groups = n_groups;
  r.group = std::move(group);
  r.q.resize(size_t(w.out * w.in));
  r.zero.resize(size_t(n_groups * w.out));
  r.scale.resize(size_t(n_groups * w.out));
  for (int64_t o = 0; o < w.out; ++o) {
    for (int64_t g = 0; g < n_groups; ++g) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t i = 0; i < w.in; ++i) {
        if (r.group[size_t(i)] != g) continue;
        lo = std::min(lo, w.at(o, i));
        hi = std::max(hi, w.at(o, i));
      }
      float scale;
      int zero;
      if (sym) {
        scale = std::max(std::fabs(lo), std::fabs(hi)) / 7.0f;
        zero = 8;
      } else {
        scale = (hi - lo) / 15.0f;
        zero = scale > 0 ? std::clamp(int(std::lround(-lo / scale)), 0, 15) : 8;
      }
      if (scale == 0.0f) scale = 1e-4f;
      const uint16_t bits = F32ToF16(scale);
      r.zero[size_t(g * w.out + o)] = zero;
      r.scale[size_t(g * w.out + o)] = bits;
      const float s = F16ToF32(bits);
      for (int64_t i = 0; i < w.in; ++i) {
        if (r.group[size_t(i)] != g) continue;
        const int q = int(std::lround(w.at(o, i) / s)) + zero;
        r.q[size_t(o * w.in + i)] = uint8_t(std::clamp(q, 0, 15));
      }
    }
  }
  return r;
}

// Groups of `group_size` consecutive inputs (-1: one group), or with `act_order` the groups of
// an input order sorted by a random importance, as GPTQ's desc_act writes g_idx.
std::vector<int32_t> Groups(int64_t n_in, int64_t group_size, bool act_order, unsigned seed,
                            int64_t* n_groups) {
  const int64_t size = group_size < 0 ? n_in : group_size;
  *n_groups = (n_in + size - 1) / size;
  std::vector<int64_t> order(static_cast<size_t>(n_in));
  std::iota(order.begin(), order.end(), 0);
  if (act_order) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<int32_t> group(static_cast<size_t>(n_in));
  for (int64_t j = 0; j < n_in; ++j) group[size_t(order[size_t(j)])] = int32_t(j / size);
  return group;
}

// GPTQ: qweight [in/8, out], qzeros [groups, out/8] of zero - 1 (classic) or zero (v2),
// scales [groups, out], g_idx [in].
void PackGptq(const Int4& r, const std::string& prefix, bool v2, TensorMap* out) {
  std::vector<uint32_t> qweight(size_t(r.in / 8 * r.out), 0);
  for (int64_t i = 0; i < r.in; ++i) {
    for (int64_t o = 0; o < r.out; ++o) {
      qweight[size_t(i / 8 * r.out + o)] |= uint32_t(r.q[size_t(o * r.in + i)]) << (4 * (i % 8));
    }
  }
  std::vector<uint32_t> qzeros(size_t(r.n_groups * r.out / 8), 0);
  for (int64_t g = 0; g < r.n_groups; ++g) {
    for (int64_t o = 0; o < r.out; ++o) {
      const uint32_t stored = uint32_t(r.zero[size_t(g * r.out + o)] - (v2 ? 0 : 1)) & 15;
      qzeros[size_t(g * r.out / 8 + o / 8)] |= stored << (4 * (o % 8));
    }
  }
  (*out)[prefix + ".qweight"] = MakeTensor("I32", {r.in / 8, r.out}, qweight);
  (*out)[prefix + ".qzeros"] = MakeTensor("I32", {r.n_groups, r.out / 8}, qzeros);
  (*out)[prefix + ".scales"] = MakeTensor("F16", {r.n_groups, r.out}, r.scale);
  (*out)[prefix + ".g_idx"] = MakeTensor("I32", {r.in}, r.group);
}

// AWQ GEMM: qweight [in, out/8] and qzeros [groups, out/8] with output 8c + kAwqPackOrder[k] in
// value k of word c; scales [groups, out].
void PackAwq(const Int4& r, const std::string& prefix, TensorMap* out) {
  std::vector<uint32_t> qweight(size_t(r.in * r.out / 8), 0);
  for (int64_t i = 0; i < r.in; ++i) {
    for (int64_t c = 0; c < r.out / 8; ++c) {
      for (int k = 0; k < 8; ++k) {
        const int64_t o = c * 8 + kAwqPackOrder[size_t(k)];
        qweight[size_t(i * r.out / 8 + c)] |= uint32_t(r.q[size_t(o * r.in + i)]) << (4 * k);
      }
    }
  }
  std::vector<uint32_t> qzeros(size_t(r.n_groups * r.out / 8), 0);
  for (int64_t g = 0; g < r.n_groups; ++g) {
    for (int64_t c = 0; c < r.out / 8; ++c) {
      for (int k = 0; k < 8; ++k) {
        const int64_t o = c * 8 + kAwqPackOrder[size_t(k)];
        qzeros[size_t(g * r.out / 8 + c)] |= uint32_t(r.zero[size_t(g * r.out + o)]) << (4 * k);
      }
    }
  }
  (*out)[prefix + ".qweight"] = MakeTensor("I32", {r.in, r.out / 8}, qweight);
  (*out)[prefix + ".qzeros"] = MakeTensor("I32", {r.n_groups, r.out / 8}, qzeros);
  (*out)[prefix + ".scales"] = MakeTensor("F16", {r.n_groups, r.out}, r.scale);
}

template <typename T>
const T* Data(const TensorMap& tensors, const std::string& name) {
  return reinterpret_cast<const T*>(tensors.at(name).bytes.data());
}

// The spec's dequantization of the packed tensors, straight from their bytes.
Matrix DequantGptq(const TensorMap& t, const std::string& prefix, int64_t in, int64_t out,
                   bool v2) {
  const uint32_t* qweight = Data<uint32_t>(t, prefix + ".qweight");
  const uint32_t* qzeros = Data<uint32_t>(t, prefix + ".qzeros");
  const uint16_t* scales = Data<uint16_t>(t, prefix + ".scales");
  const int32_t* g_idx = Data<int32_t>(t, prefix + ".g_idx");
  Matrix w{out, in, std::vector<float>(size_t(in * out))};
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = g_idx[i];
      const int q = int((qweight[(i / 8) * out + o] >> (4 * (i % 8))) & 15);
      const int zero = int((qzeros[g * (out / 8) + o / 8] >> (4 * (o % 8))) & 15) + (v2 ? 0 : 1);
      w.values[size_t(o * in + i)] = F16ToF32(scales[g * out + o]) * float(q - zero);
    }
  }
  return w;
}

Matrix DequantAwq(const TensorMap& t, const std::string& prefix, int64_t in, int64_t out,
                  int64_t group_size) {
  const uint32_t* qweight = Data<uint32_t>(t, prefix + ".qweight");
  const uint32_t* qzeros = Data<uint32_t>(t, prefix + ".qzeros");
  const uint16_t* scales = Data<uint16_t>(t, prefix + ".scales");
  Matrix w{out, in, std::vector<float>(size_t(in * out))};
  // Unpack each word's values in order, then undo the pack order column by column.
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / group_size;
    for (int64_t c = 0; c < out / 8; ++c) {
      for (int k = 0; k < 8; ++k) {
        const int64_t o = c * 8 + kAwqPackOrder[size_t(k)];
        const int q = int((qweight[i * (out / 8) + c] >> (4 * k)) & 15);
        const int zero = int((qzeros[g * (out / 8) + c] >> (4 * k)) & 15);
        w.values[size_t(o * in + i)] = F16ToF32(scales[g * out + o]) * float(q - zero);
      }
    }
  }
  return w;
}

// ---- FP8 -------------------------------------------------------------------------------------

float E4M3(uint8_t bits) {
  const int e = (bits >> 3) & 15, m = bits & 7;
  const float v = e == 0 ? float(m) / 8.0f * std::pow(2.0f, -6.0f)
                         : (1.0f + float(m) / 8.0f) * std::pow(2.0f, float(e - 7));
  return (bits & 0x80) ? -v : v;
}

// The nearest e4m3 value (0x00..0x7e increase with the byte; 0x7f is NaN).
uint8_t NearestE4M3(float x) {
  static const std::vector<float> positive = [] {
    std::vector<float> values;
    for (int b = 0; b < 0x7f; ++b) values.push_back(E4M3(uint8_t(b)));
    return values;
  }();
  const float a = std::fabs(x);
  size_t best = size_t(std::lower_bound(positive.begin(), positive.end(), a) - positive.begin());
  if (best == positive.size() || (best > 0 && a - positive[best - 1] <= positive[best] - a)) --best;
  return uint8_t(x < 0 && best != 0 ? best | 0x80 : best);
}

enum class Fp8Scales { kBlock, kChannel, kTensor };

// Quantizes `w` to e4m3 with scales per 128x128 block (weight_scale_inv, F32), per output row
// (weight_scale [out, 1], BF16) or per tensor (weight_scale [], F32); returns the spec's f32
// dequantization of what it wrote.
Matrix PackFp8(const Matrix& w, const std::string& prefix, Fp8Scales kind, TensorMap* out) {
  const int64_t bo = kind == Fp8Scales::kBlock ? 128 : kind == Fp8Scales::kChannel ? 1 : w.out;
  const int64_t bi = kind == Fp8Scales::kBlock ? 128 : w.in;
  const int64_t rows = (w.out + bo - 1) / bo, cols = (w.in + bi - 1) / bi;
  std::vector<float> scales(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float amax = 0.0f;
      for (int64_t o = r * bo; o < std::min(w.out, (r + 1) * bo); ++o) {
        for (int64_t i = c * bi; i < std::min(w.in, (c + 1) * bi); ++i)
          amax = std::max(amax, std::fabs(w.at(o, i)));
      }
      float s = amax > 0 ? amax / 448.0f : 1.0f;
      if (kind == Fp8Scales::kChannel) s = BF16ToF32(F32ToBF16(s));  // stored as BF16
      scales[size_t(r * cols + c)] = s;
    }
  }
  std::vector<uint8_t> bytes(size_t(w.out * w.in));
  Matrix deq{w.out, w.in, std::vector<float>(bytes.size())};
  for (int64_t o = 0; o < w.out; ++o) {
    for (int64_t i = 0; i < w.in; ++i) {
      const float s = scales[size_t(o / bo * cols + i / bi)];
      const uint8_t b = NearestE4M3(w.at(o, i) / s);
      bytes[size_t(o * w.in + i)] = b;
      deq.values[size_t(o * w.in + i)] = E4M3(b) * s;
    }
  }
  (*out)[prefix + ".weight"] = MakeTensor("F8_E4M3", {w.out, w.in}, bytes);
  if (kind == Fp8Scales::kBlock) {
    (*out)[prefix + ".weight_scale_inv"] = MakeTensor("F32", {rows, cols}, scales);
  } else if (kind == Fp8Scales::kChannel) {
    std::vector<uint16_t> bf16(scales.size());
    for (size_t k = 0; k < scales.size(); ++k) bf16[k] = F32ToBF16(scales[k]);
    (*out)[prefix + ".weight_scale"] = MakeTensor("BF16", {w.out, 1}, bf16);
  } else {
    (*out)[prefix + ".weight_scale"] = MakeTensor("F32", {}, scales);
  }
  return deq;
}

// ---- Checkpoints -----------------------------------------------------------------------------

struct Checkpoint {
  std::string folder;                         // the pre-quantized checkpoint
  std::string reference;                      // the same model with the dequantized weights in F32
  std::map<std::string, Matrix> dequantized;  // by HF weight name
  mutable size_t checked = 0;                 // matrices CheckBoundWeights compared
};

std::string NewFolder(const std::string& name) {
  const std::string folder =
      testing::ScratchDir() + "/petrel_hfq_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

void WriteFolder(const std::string& folder, const nlohmann::json& config,
                 const TensorMap& tensors) {
  std::ofstream(folder + "/config.json") << config.dump(2);
  WriteSafetensors(folder + "/model.safetensors", tensors);
}

StTensor F32Tensor(const Matrix& m) {
  std::vector<int64_t> shape =
      m.out == 1 ? std::vector<int64_t>{m.in} : std::vector<int64_t>{m.out, m.in};
  return MakeTensor("F32", shape, m.values);
}

// Packs every projection with `pack` (which writes the packed tensors and returns the spec's
// dequantization) and writes both folders.
Checkpoint MakeCheckpoint(
    const std::string& name, const nlohmann::json& quantization_config,
    const std::function<Matrix(const std::string&, const Matrix&, TensorMap*)>& pack,
    const std::string& base = kStory, const nlohmann::json& config_patch = nullptr) {
  const BaseModel& story = LoadBase(base);
  Checkpoint c;
  c.folder = NewFolder(name);
  c.reference = NewFolder(name + "_ref");
  TensorMap packed, reference;
  for (const auto& [tensor_name, m] : story.tensors) {
    if (IsProjection(tensor_name)) {
      Matrix deq = pack(Prefix(tensor_name), m, &packed);
      reference[tensor_name] = F32Tensor(deq);
      c.dequantized[tensor_name] = std::move(deq);
    } else {
      packed[tensor_name] = F32Tensor(m);
      reference[tensor_name] = F32Tensor(m);
    }
  }
  nlohmann::json base_config = story.config;
  if (!config_patch.is_null()) base_config.merge_patch(config_patch);
  nlohmann::json config = base_config;
  config["quantization_config"] = quantization_config;
  WriteFolder(c.folder, config, packed);
  WriteFolder(c.reference, base_config, reference);
  return c;
}

struct GptqCase {
  int64_t group_size;
  bool act_order, sym, v2;
};

Checkpoint MakeGptq(const std::string& name, const GptqCase& g, const std::string& base = kStory,
                    const nlohmann::json& config_patch = nullptr) {
  nlohmann::json q = {
      {"quant_method", "gptq"},  {"bits", 4},    {"group_size", g.group_size},
      {"desc_act", g.act_order}, {"sym", g.sym}, {"checkpoint_format", g.v2 ? "gptq_v2" : "gptq"}};
  unsigned seed = 11;
  return MakeCheckpoint(
      name, q,
      [&](const std::string& prefix, const Matrix& w, TensorMap* out) {
        int64_t n_groups = 0;
        std::vector<int32_t> group = Groups(w.in, g.group_size, g.act_order, seed++, &n_groups);
        const Int4 r = QuantizeInt4(w, std::move(group), n_groups, g.sym);
        PackGptq(r, prefix, g.v2, out);
        return DequantGptq(*out, prefix, w.in, w.out, g.v2);
      },
      base, config_patch);
}

Checkpoint MakeAwq(const std::string& name, int64_t group_size) {
  nlohmann::json q = {{"quant_method", "awq"},
                      {"bits", 4},
                      {"group_size", group_size},
                      {"zero_point", true},
                      {"version", "gemm"}};
  return MakeCheckpoint(name, q, [&](const std::string& prefix, const Matrix& w, TensorMap* out) {
    int64_t n_groups = 0;
    std::vector<int32_t> group = Groups(w.in, group_size, false, 0, &n_groups);
    const Int4 r = QuantizeInt4(w, std::move(group), n_groups, false);
    PackAwq(r, prefix, out);
    return DequantAwq(*out, prefix, w.in, w.out, group_size);
  });
}

// compressed-tensors' float-quantized form of the same tensors (its config names the scales'
// strategy instead of the method fp8).
nlohmann::json CompressedTensorsFp8(const char* strategy) {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}, {"symmetric", true}}},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}}};
}

Checkpoint MakeFp8(const std::string& name, Fp8Scales kind, const std::string& base = kStory,
                   bool compressed_tensors = false) {
  nlohmann::json q = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  if (kind == Fp8Scales::kBlock) q["weight_block_size"] = {128, 128};
  if (compressed_tensors) {
    q = CompressedTensorsFp8(kind == Fp8Scales::kChannel ? "channel" : "tensor");
  }
  return MakeCheckpoint(
      name, q,
      [&](const std::string& prefix, const Matrix& w, TensorMap* out) {
        return PackFp8(w, prefix, kind, out);
      },
      base);
}

// ---- Running -----------------------------------------------------------------------------------

std::vector<int32_t> PromptIds() {
  const nlohmann::json cases = testing::ReadJson(SharedDir() + "/golden/story/logits.json");
  for (const auto& c : cases) {
    if (c["name"] == "len32") return c["ids"].get<std::vector<int32_t>>();
  }
  return {};
}

Result<std::vector<float>> RunLogits(const std::string& folder, bool as_f32,
                                     std::unique_ptr<Engine>* keep = nullptr) {
  EngineOptions options;
  options.n_threads = 2;
  options.context = 64;
  options.load_tokenizer = false;
  options.prequantized_as_f32 = as_f32;
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Load(folder, options));
  std::vector<float> logits;
  PETREL_RETURN_IF_ERROR(engine->Prefill(engine->NewSequence(), PromptIds(), true, &logits));
  if (keep) *keep = std::move(engine);
  return logits;
}

// Every projection the engine bound equals the spec's dequantization exactly, whatever type it
// chose; returns the types it chose.
std::set<DType> CheckBoundWeights(const Engine& engine, const Checkpoint& c) {
  std::set<DType> types;
  const LoadedModel& model = engine.model();
  for (size_t l = 0; l < model.weights.layers.size(); ++l) {
    const LayerWeights& layer = model.weights.layers[l];
    for (size_t k = 0; k < layer.size(); ++k) {
      const std::string pattern = HfWeightName(*model.arch, layer.spec(k), int(l));
      const TensorView& view = layer[k];
      // An experts tensor stacks one matrix per expert (`*` in the name is its index).
      const size_t star = pattern.find('*');
      const int64_t n_experts = star == std::string::npos ? 1 : view.desc.ne[2];
      for (int64_t e = 0; e < n_experts; ++e) {
        const std::string name =
            star == std::string::npos
                ? pattern
                : pattern.substr(0, star) + std::to_string(e) + pattern.substr(star + 1);
        auto it = c.dequantized.find(name);
        if (it == c.dequantized.end()) continue;
        types.insert(view.desc.dtype);
        const Matrix& want = it->second;
        EXPECT_EQ(view.desc.ne[0], want.in) << name;
        EXPECT_EQ(view.desc.ne[1], want.out) << name;
        std::vector<float> row(size_t(want.in));
        size_t mismatches = 0;
        for (int64_t o = 0; o < want.out; ++o) {
          EXPECT_TRUE(
              DequantizeRow(view.desc.dtype, view.row(e * want.out + o), row.data(), row.size()))
              << name;
          mismatches +=
              std::memcmp(row.data(), &want.values[size_t(o * want.in)], row.size() * 4) != 0;
        }
        EXPECT_EQ(mismatches, 0u) << name << " (" << DTypeName(view.desc.dtype) << ")";
        ++c.checked;
      }
    }
  }
  return types;
}

// Loads `c` both ways: all-f32 must give the reference's logits within the F32 row, the default
// (exact Q4_0/Q5_0 where the groups allow) bit-exact weights of the `native` types and logits
// within the row of 8-bit activations (the F32 row when every matrix is f32). `native_logits`
// false skips that last comparison where the rounding of activations legitimately moves more.
void CheckCheckpoint(const Checkpoint& c, const std::set<DType>& native,
                     bool native_logits = true) {
  const std::string name = std::filesystem::path(c.folder).filename().string();
  auto want = RunLogits(c.reference, false);
  ASSERT_TRUE(want.ok()) << want.status().message();
  std::unique_ptr<Engine> engine;
  auto as_f32 = RunLogits(c.folder, true, &engine);
  ASSERT_TRUE(as_f32.ok()) << as_f32.status().message();
  EXPECT_EQ(CheckBoundWeights(*engine, c), std::set<DType>{DType::kF32});
  EXPECT_EQ(c.checked, c.dequantized.size());
  const auto f32_stats = testing::CompareLogits(*as_f32, *want, 2048);
  EXPECT_TRUE(testing::Within(f32_stats, testing::kF32Tolerance)) << f32_stats.ToString();
  std::printf("%-36s all f32: %s\n", name.c_str(), f32_stats.ToString().c_str());

  auto got = RunLogits(c.folder, false, &engine);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(CheckBoundWeights(*engine, c), native);
  EXPECT_FALSE(engine->model().prequantized.empty());
  EXPECT_GT(engine->model().prequantized_bytes, 0u);
  const auto stats = testing::CompareLogits(*got, *want, 2048);
  const bool all_f32 = native == std::set<DType>{DType::kF32};
  if (native_logits) {
    EXPECT_TRUE(testing::Within(stats, all_f32 ? testing::kF32Tolerance : kQ8ActivationTolerance))
        << stats.ToString();
  }
  std::printf("%-36s default: %s (%s)\n", name.c_str(), stats.ToString().c_str(),
              engine->model().prequantized.c_str());
  std::filesystem::remove_all(c.folder);
  std::filesystem::remove_all(c.reference);
}

TEST(HfPrequantized, GptqSymmetricGroup128IsExactQ4_0) {
  CheckCheckpoint(MakeGptq("gptq_sym_g128", {128, false, true, false}), {DType::kQ4_0});
}

TEST(HfPrequantized, GptqAsymmetricGroup64IsExactQ5_0) {
  CheckCheckpoint(MakeGptq("gptq_asym_g64", {64, false, false, false}), {DType::kQ5_0});
}

TEST(HfPrequantized, GptqV2OneGroupPerRow) {
  CheckCheckpoint(MakeGptq("gptq_v2_rows", {-1, false, false, true}), {DType::kQ5_0});
}

TEST(HfPrequantized, GptqActOrderIsDequantizedToF32) {
  CheckCheckpoint(MakeGptq("gptq_act_g32", {32, true, false, false}), {DType::kF32});
  // Inputs of a 128-input matrix are all in group 0 whatever their order: those stay exact Q4_0.
  CheckCheckpoint(MakeGptq("gptq_act_sym_g128", {128, true, true, false}),
                  {DType::kF32, DType::kQ4_0});
}

TEST(HfPrequantized, AwqGemm) {
  CheckCheckpoint(MakeAwq("awq_g32", 32), {DType::kQ5_0});
  CheckCheckpoint(MakeAwq("awq_g128", 128), {DType::kQ5_0});
}

// Per-expert matrices of a mixture of experts, stacked at load into one tensor per weight.
TEST(HfPrequantized, MoeExpertsAreStacked) {
  // With 8-bit activations the random router's top-2 choices flip at some positions (top-1
  // agreement 84 %, rel RMS 8.5 % here), which says nothing about the weights: those are checked
  // bit for bit, and the all-f32 load must match the reference exactly.
  CheckCheckpoint(MakeGptq("moe_gptq_g32", {32, false, false, false}, kQwen3Moe), {DType::kQ5_0},
                  /*native_logits=*/false);
  // Every expert used: no choice to flip, and the 8-bit activations' row holds.
  CheckCheckpoint(MakeGptq("moe_gptq_all_experts", {32, false, false, false}, kQwen3Moe,
                           {{"num_experts_per_tok", 4}}),
                  {DType::kQ5_0});
  CheckCheckpoint(MakeGptq("moe_gptq_act", {32, true, false, false}, kQwen3Moe), {DType::kF32});
  CheckCheckpoint(MakeFp8("moe_fp8_block", Fp8Scales::kBlock, kQwen3Moe), {DType::kF32});
}

TEST(HfPrequantized, Fp8BlockChannelAndTensorScales) {
  CheckCheckpoint(MakeFp8("fp8_block", Fp8Scales::kBlock), {DType::kF32});
  CheckCheckpoint(MakeFp8("fp8_channel", Fp8Scales::kChannel), {DType::kF32});
  CheckCheckpoint(MakeFp8("fp8_tensor", Fp8Scales::kTensor), {DType::kF32});
  CheckCheckpoint(MakeFp8("ct_fp8_channel", Fp8Scales::kChannel, kStory, true), {DType::kF32});
  CheckCheckpoint(MakeFp8("ct_fp8_tensor", Fp8Scales::kTensor, kStory, true), {DType::kF32});
}

// ---- Hostile configs and tensors ---------------------------------------------------------------

// A small GPTQ (or FP8) checkpoint, changed by `edit`, must fail to load with one line naming
// `want`.
void ExpectLoadError(const std::string& name, const nlohmann::json& quantization_config,
                     const std::function<void(TensorMap*)>& edit, const std::string& want,
                     bool fp8 = false) {
  const BaseModel& story = LoadBase();
  TensorMap tensors;
  for (const auto& [tensor_name, m] : story.tensors) {
    if (!IsProjection(tensor_name)) {
      tensors[tensor_name] = F32Tensor(m);
    } else if (fp8) {
      PackFp8(m, Prefix(tensor_name), Fp8Scales::kBlock, &tensors);
    } else {
      int64_t n_groups = 0;
      std::vector<int32_t> group = Groups(m.in, 32, false, 0, &n_groups);
      PackGptq(QuantizeInt4(m, std::move(group), n_groups, false), Prefix(tensor_name), false,
               &tensors);
    }
  }
  edit(&tensors);
  nlohmann::json config = story.config;
  if (!quantization_config.is_null()) config["quantization_config"] = quantization_config;
  const std::string folder = NewFolder("hostile_" + name);
  WriteFolder(folder, config, tensors);
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(folder, options);
  ASSERT_FALSE(model.ok()) << name;
  const std::string message = model.status().message();
  EXPECT_NE(message.find(want), std::string::npos) << name << ": " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << name << ": " << message;
  std::printf("%-24s %s\n", name.c_str(), message.c_str());
  std::filesystem::remove_all(folder);
}

const char* kQ = "model.layers.0.self_attn.q_proj";

nlohmann::json Gptq(nlohmann::json changes = nlohmann::json::object()) {
  nlohmann::json q = {{"quant_method", "gptq"},
                      {"bits", 4},
                      {"group_size", 32},
                      {"desc_act", false},
                      {"sym", false}};
  q.update(changes);
  return q;
}

TEST(HfPrequantized, HostileConfigsAreOneLineErrors) {
  auto keep = [](TensorMap*) {};
  ExpectLoadError("bits3", Gptq({{"bits", 3}}), keep, "quantization_config.bits is 3");
  ExpectLoadError("bits_text", Gptq({{"bits", "4"}}), keep, "quantization_config.bits");
  ExpectLoadError("group0", Gptq({{"group_size", 0}}), keep, "quantization_config.group_size is 0");
  ExpectLoadError("group_neg", Gptq({{"group_size", -7}}), keep, "quantization_config.group_size");
  ExpectLoadError("method", Gptq({{"quant_method", "bitsandbytes"}}), keep,
                  "quant_method 'bitsandbytes'");
  ExpectLoadError("no_method", nlohmann::json{{"bits", 4}}, keep, "quant_method is missing");
  ExpectLoadError("not_object", nlohmann::json("gptq"), keep,
                  "quantization_config is not an object");
  ExpectLoadError("format", Gptq({{"checkpoint_format", "marlin"}}), keep, "checkpoint_format");
  ExpectLoadError("awq_gemv",
                  {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"version", "gemv"}},
                  keep, "quantization_config.version");
  ExpectLoadError("awq_nozero",
                  {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"zero_point", false}},
                  keep, "zero_point");
  nlohmann::json int4_groups = CompressedTensorsFp8("group");
  int4_groups["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  ExpectLoadError("ct_int4", int4_groups, keep, "config_groups.group_0.weights: only num_bits 8");
  nlohmann::json packed = CompressedTensorsFp8("channel");
  packed["format"] = "pack-quantized";
  ExpectLoadError("ct_packed", packed, keep, "quantization_config.format 'pack-quantized'");
  // Sizes far beyond any tensor: a mismatch with the tensors, never an overflow.
  ExpectLoadError("group_huge", Gptq({{"group_size", INT64_MAX}}), keep, ".qzeros is I32");
  ExpectLoadError("block_huge",
                  {{"quant_method", "fp8"}, {"weight_block_size", {INT64_MAX, INT64_MAX}}}, keep,
                  ".weight_scale_inv has shape", true);
  ExpectLoadError("block0", {{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}, keep,
                  "weight_block_size");
  // Tensors that do not match the config.
  ExpectLoadError(
      "no_scales", Gptq(), [](TensorMap* t) { t->erase(std::string(kQ) + ".scales"); },
      std::string(kQ) + ".scales is missing");
  ExpectLoadError(
      "no_qzeros", Gptq(), [](TensorMap* t) { t->erase(std::string(kQ) + ".qzeros"); },
      std::string(kQ) + ".qzeros is missing");
  ExpectLoadError("group_mismatch", Gptq({{"group_size", 64}}), keep, ".qzeros is I32");
  ExpectLoadError("awq_indivisible", {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 48}},
                  keep, "not a multiple of quantization_config.group_size 48");
  ExpectLoadError(
      "act_no_gidx", Gptq({{"desc_act", true}}),
      [](TensorMap* t) { t->erase(std::string(kQ) + ".g_idx"); },
      std::string(kQ) + ".g_idx is missing");
  ExpectLoadError(
      "gidx_range", Gptq(),
      [](TensorMap* t) {
        reinterpret_cast<int32_t*>((*t)[std::string(kQ) + ".g_idx"].bytes.data())[5] = 99;
      },
      ".g_idx[5] is 99");
  ExpectLoadError(
      "out_not8", Gptq(),
      [](TensorMap* t) {
        StTensor& q = (*t)[std::string(kQ) + ".qweight"];
        q.shape = {16, 124};  // 128 / 8 packed rows of 124 outputs
        q.bytes.resize(16 * 124 * 4);
      },
      "not a multiple of the 8");
  ExpectLoadError(
      "qweight_f32", Gptq(), [](TensorMap* t) { (*t)[std::string(kQ) + ".qweight"].dtype = "F32"; },
      std::string(kQ) + ".qweight is F32");
  ExpectLoadError("no_config", nlohmann::json(), keep, ".qweight holds packed 4-bit weights");
  ExpectLoadError(
      "fp8_no_scale", {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}},
      [](TensorMap* t) { t->erase(std::string(kQ) + ".weight_scale_inv"); },
      std::string(kQ) + ".weight_scale_inv (or", true);
  ExpectLoadError("fp8_scale_shape", {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}},
                  keep, ".weight_scale_inv has shape", true);
  ExpectLoadError("fp8_no_block", {{"quant_method", "fp8"}}, keep, "weight_block_size (absent)",
                  true);
  ExpectLoadError("fp8_no_config", nlohmann::json(), keep, "is F8_E4M3, but config.json has no",
                  true);
  ExpectLoadError("fp8_as_gptq", Gptq(), keep, "quant_method is not fp8", true);
}

// Unpacking speed on one 4096 x 14336 layer of each kind (random bits): CPU time per weight,
// page faults of the owned memory included. Run with --gtest_also_run_disabled_tests.
TEST(HfPrequantizedTiming, DISABLED_Unpack) {
  const int64_t in = 4096, out = 14336;
  std::mt19937 rng(1);
  auto words = [&](size_t n) {
    std::vector<uint32_t> v(n);
    for (auto& x : v) x = rng();
    return v;
  };
  std::vector<uint16_t> scales(size_t(in / 128 * out), F32ToF16(0.01f));
  std::vector<int32_t> g_idx(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) g_idx[size_t(i)] = int32_t(i / 128);
  std::vector<int32_t> shuffled = g_idx;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  std::vector<uint8_t> fp8(size_t(in * out));
  for (auto& b : fp8) b = uint8_t(rng() % 0x7e);
  TensorMap t;
  t["g.qweight"] = MakeTensor("I32", {in / 8, out}, words(size_t(in / 8 * out)));
  t["g.qzeros"] = MakeTensor("I32", {in / 128, out / 8}, words(size_t(in / 128 * out / 8)));
  t["g.scales"] = MakeTensor("F16", {in / 128, out}, scales);
  t["g.g_idx"] = MakeTensor("I32", {in}, g_idx);
  t["h.qweight"] = t["g.qweight"];
  t["h.qzeros"] = t["g.qzeros"];
  t["h.scales"] = t["g.scales"];
  t["h.g_idx"] = MakeTensor("I32", {in}, shuffled);
  t["a.qweight"] = MakeTensor("I32", {in, out / 8}, words(size_t(in * out / 8)));
  t["a.qzeros"] = t["g.qzeros"];
  t["a.scales"] = t["g.scales"];
  t["f.weight"] = MakeTensor("F8_E4M3", {out, in}, fp8);
  t["f.weight_scale_inv"] = MakeTensor("F32", {out / 128, in / 128},
                                       std::vector<float>(size_t(in / 128 * out / 128), 0.5f));
  const std::string folder = NewFolder("timing");
  WriteSafetensors(folder + "/model.safetensors", t);
  auto set = SafetensorsSet::OpenFolder(folder);
  ASSERT_TRUE(set.ok());
  auto time = [&](HfQuantConfig config, bool f32, const char* name) {
    HfQuantReader reader(config, **set, f32);
    std::deque<std::vector<float>> owned;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    auto view = reader.Read(std::string(name) + ".weight", owned);
    const double cpu = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(view.ok()) << view.status().message();
    std::printf("%s %s as %s: wall %.3f s, cpu %.3f s, %.2f cpu ns/weight\n",
                config.Describe().c_str(), name, DTypeName(view->desc.dtype), s, cpu,
                cpu * 1e9 / double(in * out));
  };
  HfQuantConfig gptq;
  gptq.method = HfQuantMethod::kGptq;
  gptq.group_size = 128;
  time(gptq, false, "g");
  time(gptq, true, "g");
  time(gptq, false, "h");
  HfQuantConfig awq = gptq;
  awq.method = HfQuantMethod::kAwq;
  time(awq, false, "a");
  time(awq, true, "a");
  HfQuantConfig fp8c;
  fp8c.method = HfQuantMethod::kFp8;
  fp8c.block_out = fp8c.block_in = 128;
  time(fp8c, false, "f");
  std::filesystem::remove_all(folder);
}
}  // namespace
}  // namespace petrel
