// WriteSynthModel: metadata of a Llama (or DeepSeek2) GGUF, a vocabulary, and the weights the
// architecture declares, drawn as embeddings N(0,1), projections N(0, 1/n_in) (1/dim, and 1/ffn
// for ffn_down), norms 1 + N(0, 0.01), output N(0, 16/dim) — the recipe of the baseline files —
// or, for ternary weights, each matrix row as t * s with the same variance per element.
#include "core/convert/synth_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/format/atomic_file.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/architecture.h"
#include "quant/f16.h"
#include "quant/quantize.h"  // QuantizeRow

namespace petrel {
namespace {

// SplitMix64 stream + Box–Muller: fast, portable, reproducible from (seed, tensor index).
class Normal {
 public:
  explicit Normal(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (double(Bits() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    const double u2 = double(Bits() >> 11) * (1.0 / 9007199254740992.0);
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = float(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return float(r * std::cos(2.0 * M_PI * u2));
  }
  // Uniform in [0, 1).
  double Uniform() { return double(Bits() >> 11) * (1.0 / 9007199254740992.0); }
  // -1, 0 or +1, each with probability 1/3 (the bias of `% 3` on 64 bits is 2^-64).
  float Ternary() { return float(int(Bits() % 3) - 1); }

 private:
  uint64_t Bits() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

// Fills `dst` with `n` values of `type` drawn as mean + stddev * N(0,1).
void FillRandom(void* dst, DType type, size_t n, uint64_t seed, float mean, float stddev) {
  Normal normal(seed);
  std::vector<float> row(4096);
  for (size_t done = 0; done < n; done += row.size()) {
    const size_t count = std::min(row.size(), n - done);
    for (size_t i = 0; i < count; ++i) row[i] = mean + stddev * normal.Next();
    if (type == DType::kF32) {
      std::memcpy(static_cast<float*>(dst) + done, row.data(), count * sizeof(float));
    } else if (type == DType::kF16) {
      F32ToF16Row(row.data(), static_cast<uint16_t*>(dst) + done, count);
    } else if (type == DType::kBF16) {
      F32ToBF16Row(row.data(), static_cast<uint16_t*>(dst) + done, count);
    }  // block types are rejected in WriteSynthModel
  }
}

// A scale near `stddev * sqrt(3/2)` (ternary values of that scale have variance stddev^2),
// varied by +-25 % from row to row and rounded so that both f16 and bf16 hold it exactly: a
// bf16 value has 8 significant bits, f16 has 11, and the scales stay inside f16's normal range.
float TernaryScale(Normal& rng, float stddev) {
  const double scale = double(stddev) * std::sqrt(1.5) * (0.75 + 0.5 * rng.Uniform());
  return F16ToF32(F32ToF16(BF16ToF32(F32ToBF16(float(scale)))));
}

// Rows of `n_in` values, each encoded as `type` as it is drawn, so a large model never exists
// in f32. kNormal: stddev * N(0,1), the same stream as FillRandom; kTernary: t * s per row.
void FillRows(void* dst, DType type, size_t n_in, size_t n_rows, uint64_t seed, float stddev,
              SynthWeights weights) {
  Normal rng(seed);
  std::vector<float> row(n_in);  // (n_in)
  const size_t row_bytes = *RowBytes(type, n_in);
  for (size_t r = 0; r < n_rows; ++r) {
    switch (weights) {
      case SynthWeights::kNormal:
        for (float& v : row) v = stddev * rng.Next();
        break;
      case SynthWeights::kTernary: {
        const float scale = TernaryScale(rng, stddev);
        for (float& v : row) v = scale * rng.Ternary();
        break;
      }
    }
    const bool encoded =
        QuantizeRow(type, row.data(), static_cast<char*>(dst) + r * row_bytes, n_in);
    PETREL_CHECK(encoded);  // WriteSynthModel refuses types it cannot encode before writing
  }
}

void AddByteVocab(GgufWriter& writer, int64_t n_vocab) {
  // <unk>, <s>, </s>, the 256 byte tokens, then filler pieces.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    tokens.push_back(piece);
    scores.push_back(0);
    types.push_back(6);
  }
  for (int64_t i = int64_t(tokens.size()); i < n_vocab; ++i) {
    tokens.push_back("\xE2\x96\x81tok" + std::to_string(i));
    scores.push_back(-float(i));
    types.push_back(1);
  }
  writer.SetString("tokenizer.ggml.model", "llama");
  writer.SetStringArray("tokenizer.ggml.tokens", tokens);
  writer.SetF32Array("tokenizer.ggml.scores", scores);
  writer.SetI32Array("tokenizer.ggml.token_type", types);
  writer.SetU32("tokenizer.ggml.bos_token_id", 1);
  writer.SetU32("tokenizer.ggml.eos_token_id", 2);
  writer.SetU32("tokenizer.ggml.unknown_token_id", 0);
}

}  // namespace

Result<SynthSpec> ParseSynthShape(const std::string& shape) {
  SynthSpec spec;
  if (shape == "small") return spec;  // defaults are the small shape
  if (shape == "tinyllama") {
    spec.dim = 2048;
    spec.n_layers = 22;
    spec.n_heads = 32;
    spec.n_kv_heads = 4;
    spec.ffn_dim = 5632;
    return spec;
  }
  // A mixture whose decode reads ~3.3x fewer bytes than the dense model of the same total size
  // below (8 experts of 2816, two per token, against one FFN of 8 x 2816).
  if (shape == "moe" || shape == "moe-dense") {
    spec.dim = 2048;
    spec.n_layers = 4;
    spec.n_heads = 16;
    spec.n_kv_heads = 4;
    spec.ffn_dim = shape == "moe" ? 2816 : 8 * 2816;
    spec.n_experts = shape == "moe" ? 8 : 0;
    spec.n_experts_used = shape == "moe" ? 2 : 0;
    return spec;
  }
  if (shape == "moe-tiny") {
    spec.dim = 64;
    spec.n_layers = 2;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.ffn_dim = 96;
    spec.n_experts = 4;
    spec.n_experts_used = 2;
    return spec;
  }
  // DeepSeek-V2-Lite (27 blocks, 15.7 G parameters, 2.4 G active) cut to 8 blocks: the widths
  // that decide a decode step's reads and kernels, in a file of ~2.3 GB at Q4_0.
  if (shape == "deepseek2-lite" || shape == "deepseek2-tiny") {
    const bool lite = shape == "deepseek2-lite";
    spec.dim = lite ? 2048 : 64;
    spec.n_layers = lite ? 8 : 3;
    spec.n_heads = lite ? 16 : 4;
    spec.n_kv_heads = 1;
    spec.ffn_dim = lite ? 10944 : 160;
    spec.kv_lora_rank = lite ? 512 : 32;
    spec.qk_nope_dim = lite ? 128 : 32;
    spec.qk_rope_dim = lite ? 64 : 32;
    spec.v_head_dim = lite ? 128 : 32;
    spec.n_experts = lite ? 64 : 8;
    spec.n_experts_used = lite ? 6 : 2;
    spec.expert_ffn_dim = lite ? 1408 : 64;
    spec.n_shared_experts = 2;
    spec.n_dense_layers = 1;
    return spec;
  }
  long long v[7];
  char tail = 0;
  const int n_values = std::sscanf(shape.c_str(), "%lldx%lldx%lldx%lldx%lldx%lldx%lld%c", &v[0],
                                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &tail);
  if (n_values != 5 && n_values != 7) {
    return Error("--shape '%s': expected small, tinyllama, moe, moe-dense, moe-tiny, "
                 "deepseek2-lite, deepseek2-tiny or DIMxLAYERSxHEADSxKV_HEADSxFFN[xEXPERTSxUSED]",
                 shape.c_str());
  }
  if (n_values == 7) {
    if (v[5] <= 0 || v[6] <= 0 || v[6] > v[5] || v[5] > 256) {
      return Error("--shape '%s': experts must be in 1..256 and experts used in 1..experts",
                   shape.c_str());
    }
    spec.n_experts = v[5];
    spec.n_experts_used = v[6];
  }
  for (int i = 0; i < 5; ++i) {
    const long long value = v[i];
    if (value <= 0 || value > (1 << 20))
      return Error("--shape '%s': every value must be in 1..1048576", shape.c_str());
  }
  spec.dim = v[0];
  spec.n_layers = v[1];
  spec.n_heads = v[2];
  spec.n_kv_heads = v[3];
  spec.ffn_dim = v[4];
  if (spec.dim % spec.n_heads || spec.n_heads % spec.n_kv_heads || (spec.dim / spec.n_heads) % 2) {
    return Error(
        "--shape '%s': heads must divide dim (even head size) and kv heads must divide heads",
        shape.c_str());
  }
  return spec;
}

Status WriteSynthModel(const SynthSpec& spec, const std::string& path) {
  if (!spec.quant_mix && spec.type != DType::kF32 && spec.type != DType::kF16 &&
      spec.type != DType::kBF16) {
    return Error("--type %s: block types go through SynthSpec::quant_mix", DTypeName(spec.type));
  }
  PETREL_RETURN_IF_ERROR(CheckOutputIsNotInput(path, {spec.vocab_gguf}));
  const bool deepseek2 = spec.kv_lora_rank > 0;
  GgufWriter writer;
  writer.SetString("general.architecture", deepseek2 ? "deepseek2" : "llama");
  writer.SetString("general.name", "petrel-synth");
  writer.SetU32("general.file_type", spec.quant_mix              ? GgufFileType(*spec.quant_mix)
                                     : spec.type == DType::kF32 ? 0
                                     : spec.type == DType::kF16 ? 1
                                                                : 32);
  if (!deepseek2) {  // the baselines' keys, in their order
    writer.SetU32("llama.context_length", uint32_t(spec.context));
    writer.SetU32("llama.embedding_length", uint32_t(spec.dim));
    writer.SetU32("llama.block_count", uint32_t(spec.n_layers));
    writer.SetU32("llama.feed_forward_length", uint32_t(spec.ffn_dim));
    writer.SetU32("llama.attention.head_count", uint32_t(spec.n_heads));
    writer.SetU32("llama.attention.head_count_kv", uint32_t(spec.n_kv_heads));
    writer.SetU32("llama.rope.dimension_count", uint32_t(spec.dim / spec.n_heads));
    writer.SetF32("llama.rope.freq_base", 10000.0f);
    writer.SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  }

  int64_t n_vocab = spec.n_vocab;
  if (!spec.vocab_gguf.empty()) {
    PETREL_ASSIGN_OR_RETURN(auto vocab, GgufFile::Open(spec.vocab_gguf));
    const GgufValue* tokens = vocab->Find("tokenizer.ggml.tokens");
    if (!tokens) return Error("%s: no tokenizer.ggml.tokens", spec.vocab_gguf.c_str());
    n_vocab = int64_t(tokens->count);
    for (const auto& [key, value] : vocab->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) writer.CopyValue(key, value);
    }
  } else {
    if (n_vocab < 259) n_vocab = 259;
    AddByteVocab(writer, n_vocab);
  }
  if (!deepseek2) {
    writer.SetU32("llama.vocab_size", uint32_t(n_vocab));
    if (spec.n_experts > 0) {
      writer.SetU32("llama.expert_count", uint32_t(spec.n_experts));
      writer.SetU32("llama.expert_used_count", uint32_t(spec.n_experts_used));
    }
  }

  uint64_t seed = spec.seed;
  const float dim = float(spec.dim);
  // The first tensor the mix puts in a type that cannot be drawn here: one written only with an
  // importance matrix (IQ1, IQ2, IQ3), or rows that are no whole number of its blocks.
  Status unwritable;
  // n_mats > 0: an experts tensor of n_mats stacked matrices (3-D even for one).
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, float stddev,
                    int64_t n_mats = 0) {
    const int n_dims = n_mats > 0 ? 3 : 2;
    const int64_t n_rows = n_out * std::max<int64_t>(n_mats, 1);
    auto desc = [&](DType type) {
      return n_mats > 0 ? TensorDesc::Make(type, {n_in, n_out, n_mats})
                        : TensorDesc::Make(type, {n_in, n_out});
    };
    const SynthWeights weights = spec.weights;
    if (spec.quant_mix || weights != SynthWeights::kNormal) {
      const DType type =
          spec.quant_mix ? ChooseTensorType(*spec.quant_mix, name, n_in, n_dims, int(spec.n_layers))
                         : spec.type;
      if (unwritable.ok() && !CanQuantize(type)) {
        unwritable = Error(
            "--type: %s would be %s, which is quantized only with an importance matrix: write "
            "--type f16, then `petrel quantize --imatrix FILE` it",
            name.c_str(), DTypeName(type));
      } else if (unwritable.ok() && n_in % Traits(type).block_elems != 0) {
        unwritable = Error("--type: %s has rows of %lld, not a whole number of %s blocks of %zu",
                           name.c_str(), static_cast<long long>(n_in), DTypeName(type),
                           size_t(Traits(type).block_elems));
      }
      writer.AddTensor(name, desc(type), [=](void* dst) {
        FillRows(dst, type, size_t(n_in), size_t(n_rows), seed, stddev, weights);
      });
    } else {  // the float files of the baselines, byte for byte as they have always been
      const DType type = spec.type;
      writer.AddTensor(name, desc(type), [=](void* dst) {
        FillRandom(dst, type, size_t(n_in * n_rows), seed, 0.0f, stddev);
      });
    }
    ++seed;
  };
  auto norm = [&](const std::string& name, int64_t n) {
    writer.AddTensor(name, TensorDesc::Make(DType::kF32, {n}), [=](void* dst) {
      FillRandom(dst, DType::kF32, size_t(n), seed, 1.0f, 0.01f);
    });
    ++seed;
  };
  // The weights the architecture declares, in its order; optional ones, the parts of fused
  // tensors and those of other blocks (DeepSeek2's dense and expert FFNs) are left out.
  const Architecture* arch = FindArchitectureByGguf(deepseek2 ? "deepseek2" : "llama");
  PETREL_CHECK(arch != nullptr);
  ModelConfig config;
  config.n_vocab = n_vocab;
  config.dim = spec.dim;
  config.n_layers = spec.n_layers;
  config.n_heads = spec.n_heads;
  config.n_kv_heads = spec.n_kv_heads;
  config.head_dim = spec.dim / spec.n_heads;
  config.ffn_dim = spec.ffn_dim;
  config.tied_embeddings = spec.tied_embeddings;
  config.n_experts = spec.n_experts;
  config.n_experts_used = spec.n_experts_used;
  config.expert_ffn_dim = spec.ffn_dim;
  if (deepseek2) {
    config.architecture = arch->gguf_name;
    config.n_kv_heads = 1;
    config.max_context = spec.context;
    config.norm_eps = 1e-6f;
    config.rope.base = 10000.0f;
    config.rope.dims = spec.qk_rope_dim;
    config.kv_lora_rank = spec.kv_lora_rank;
    config.qk_nope_dim = spec.qk_nope_dim;
    config.head_dim = spec.qk_nope_dim + spec.qk_rope_dim;
    config.v_head_dim = spec.v_head_dim;
    config.expert_ffn_dim = spec.expert_ffn_dim;
    config.n_shared_experts = spec.n_shared_experts;
    config.n_dense_layers = spec.n_dense_layers;
    config.expert_weights_norm = false;  // V2's routing: softmax, not renormalised
    arch->config_to_gguf(config, *arch, &writer);
  }
  // Projections are drawn N(0, 1/n_in) so activations keep their scale; vectors as norms.
  auto weight = [&](const WeightSpec& weight_spec, int layer) {
    if (!weight_spec.IsRequired(config) || weight_spec.IsFusedPart() ||
        !weight_spec.InLayer(config, layer)) {
      return;
    }
    const std::string name = GgufWeightName(weight_spec, layer);
    const WeightShape shape = weight_spec.shape(config);
    switch (weight_spec.kind) {
      case WeightKind::kMatrix:
        matrix(name, shape.n_in, shape.n_out, 1.0f / std::sqrt(float(shape.n_in)));
        break;
      case WeightKind::kVector:
        norm(name, shape.n_in);
        break;
      case WeightKind::kExperts:
        matrix(name, shape.n_in, shape.n_out, 1.0f / std::sqrt(float(shape.n_in)),
               config.n_experts);
        break;
      case WeightKind::kHeads:
        matrix(name, shape.n_in, shape.n_out, 1.0f / std::sqrt(float(shape.n_in)),
               config.n_heads);
        break;
    }
  };
  matrix(GgufWeightName(arch->token_embd, -1), spec.dim, n_vocab, 1.0f);
  for (int l = 0; l < int(spec.n_layers); ++l) {
    for (const WeightSpec& weight_spec : arch->layer_weights) weight(weight_spec, l);
  }
  weight(arch->output_norm, -1);
  if (arch->output.IsRequired(config)) {
    matrix(GgufWeightName(arch->output, -1), spec.dim, n_vocab, 4.0f / std::sqrt(dim));
  }
  PETREL_RETURN_IF_ERROR(unwritable);
  return writer.Write(path);
}

}  // namespace petrel
