// Per-tensor type choice for `petrel quantize` and `petrel synth`, after llama.cpp's
// `llama_tensor_get_type` (src/llama-quant.cpp) for the mixes it names.
#include "core/convert/quant_mix.h"

#include <cctype>
#include <cstdlib>

#include "core/base/log.h"
#include "quant/quantize.h"           // CanQuantize
#include "quant/quantize_weighted.h"  // NeedsImportance, CanQuantizeWithImportance

namespace petrel {
namespace {

using Kind = QuantMix::Kind;

// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third between.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The block index N of "blk.N.*", or -1.
int LayerOf(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool Contains(const std::string& name, const char* part) {
  return name.find(part) != std::string::npos;
}

// llama.cpp's tensor categories, matched by name in its order (the first that matches wins).
enum class Category {
  kTokenEmbd,
  kOutput,
  kAttnV,  // attn_v and the fused attn_qkv / attn_kv_b, which take attn_v's rules
  kAttnK,
  kAttnQ,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,  // also the experts' ffn_down_exps and shared ffn_down_shexp
  kOther,
};

Category CategoryOf(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    return Category::kTokenEmbd;
  }
  if (Contains(name, "attn_qkv.weight") || Contains(name, "attn_kv_b.weight") ||
      Contains(name, "attn_v.weight")) {
    return Category::kAttnV;
  }
  if (Contains(name, "attn_k.weight")) return Category::kAttnK;
  if (Contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (Contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (Contains(name, "ffn_up")) return Category::kFfnUp;
  if (Contains(name, "ffn_gate")) return Category::kFfnGate;
  if (Contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// The mixes by llama.cpp's file type name: the default type of their 2-D weights and the
// `llama_ftype` number written as general.file_type.
struct NamedMix {
  const char* name;
  Kind kind;
  DType base;
  uint32_t ftype;
};
constexpr NamedMix kNamedMixes[] = {
    {"Q3_K_M", Kind::kQ3_K_M, DType::kQ3_K, 12},
    {"Q4_K_M", Kind::kQ4_K_M, DType::kQ4_K, 15},
    {"Q5_K_M", Kind::kQ5_K_M, DType::kQ5_K, 17},
    {"IQ2_XXS", Kind::kIQ2_XXS, DType::kIQ2_XXS, 19},
    {"IQ2_XS", Kind::kIQ2_XS, DType::kIQ2_XS, 20},
    {"IQ3_XS", Kind::kIQ3_XS, DType::kIQ3_S, 22},
    {"IQ3_XXS", Kind::kIQ3_XXS, DType::kIQ3_XXS, 23},
    {"IQ1_S", Kind::kIQ1_S, DType::kIQ1_S, 24},
    {"IQ3_S", Kind::kIQ3_S, DType::kIQ3_S, 26},
    {"IQ3_M", Kind::kIQ3_M, DType::kIQ3_S, 27},
    {"IQ2_S", Kind::kIQ2_S, DType::kIQ2_XS, 28},
    {"IQ2_M", Kind::kIQ2_M, DType::kIQ2_S, 29},
    {"IQ4_XS", Kind::kIQ4_XS, DType::kIQ4_XS, 30},
    {"IQ1_M", Kind::kIQ1_M, DType::kIQ1_M, 31},
    {"TQ1_0", Kind::kTQ1_0, DType::kTQ1_0, 36},
    {"TQ2_0", Kind::kTQ2_0, DType::kTQ2_0, 37},
    {"MXFP4_MOE", Kind::kMXFP4_MOE, DType::kMXFP4, 38},
};

const NamedMix* FindNamedMix(Kind kind) {
  for (const NamedMix& row : kNamedMixes) {
    if (row.kind == kind) return &row;
  }
  return nullptr;
}

// The IQ1/IQ2 mixes, which share one set of rules in llama.cpp.
bool IsIQ1IQ2Mix(Kind kind) {
  return kind == Kind::kIQ2_XXS || kind == Kind::kIQ2_XS || kind == Kind::kIQ1_S ||
         kind == Kind::kIQ2_S || kind == Kind::kIQ2_M || kind == Kind::kIQ1_M;
}

// The mixes whose IQ3_S tensors replace their Q2_K ones (IQ2_S and IQ2_M).
bool IsIQ2SMix(Kind kind) { return kind == Kind::kIQ2_S || kind == Kind::kIQ2_M; }

// The type llama.cpp's mixes give the output head (and token_embd where it doubles as one).
DType OutputHeadType(const QuantMix& mix, int64_t n_in) {
  if (mix.kind == Kind::kMXFP4_MOE) return DType::kQ8_0;
  if (n_in % int64_t(Traits(mix.base).block_elems) != 0) return DType::kQ8_0;
  switch (mix.kind) {
    case Kind::kIQ2_XXS:
    case Kind::kIQ2_XS:
    case Kind::kIQ3_XXS:
    case Kind::kIQ1_S:
    case Kind::kIQ2_S:
    case Kind::kIQ2_M:
    case Kind::kIQ1_M:
      return DType::kQ5_K;
    default:
      return mix.base == DType::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
  }
}

// llama.cpp's rules for one tensor of a mix that is not pure (before the short-row fallback).
DType MixTensorType(const QuantMix& mix, const std::string& name, int n_dims,
                    const QuantModelInfo& model, Category category, DType type) {
  const Kind kind = mix.kind;
  const int layer = LayerOf(name), n_layers = model.n_layers;
  const bool more_bits = layer >= 0 && UseMoreBits(layer, n_layers);
  const bool first_eighth = layer >= 0 && layer < n_layers / 8;
  if (kind == Kind::kMXFP4_MOE) {
    return n_dims >= 3 ? DType::kMXFP4 : DType::kQ8_0;  // stacked experts, the rest
  }
  if (category == Category::kTokenEmbd) {
    switch (kind) {
      case Kind::kIQ2_XXS:
      case Kind::kIQ2_XS:
      case Kind::kIQ1_S:
      case Kind::kIQ1_M:
        return DType::kQ2_K;
      case Kind::kIQ2_S:
      case Kind::kIQ2_M:
      case Kind::kIQ3_XXS:
        return DType::kIQ3_S;
      case Kind::kTQ1_0:
      case Kind::kTQ2_0:
        return DType::kQ4_K;
      default:
        return type;
    }
  }
  if (IsIQ1IQ2Mix(kind)) {
    switch (category) {
      case Category::kAttnV:
        if (model.n_gqa >= 4 || model.n_experts >= 4) return DType::kQ4_K;
        return IsIQ2SMix(kind) ? DType::kIQ3_S : DType::kQ2_K;
      case Category::kAttnK:
        return model.n_experts == 8 ? DType::kQ4_K : type;
      case Category::kFfnDown:
        if (first_eighth) return IsIQ2SMix(kind) ? DType::kIQ3_S : DType::kQ2_K;
        return type;
      case Category::kAttnOutput:
        if (model.n_experts == 8) return DType::kQ5_K;
        if (kind == Kind::kIQ1_S || kind == Kind::kIQ1_M) return DType::kIQ2_XXS;
        if (IsIQ2SMix(kind)) return DType::kIQ3_S;
        return type;
      default:
        return type;
    }
  }
  switch (category) {
    case Category::kAttnV:
      if (kind == Kind::kIQ3_XXS) {
        type = model.n_gqa >= 4         ? DType::kQ4_K
               : !model.with_importance ? DType::kIQ3_S
                                        : DType::kIQ3_XXS;
      } else if ((kind == Kind::kIQ3_XS || kind == Kind::kIQ3_S) && model.n_gqa >= 4) {
        type = DType::kQ4_K;
      } else if (kind == Kind::kIQ3_M) {
        type = DType::kQ4_K;
      } else if (kind == Kind::kQ3_K_M) {
        type = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      } else if (kind == Kind::kIQ4_XS && model.n_gqa >= 4) {
        type = DType::kQ5_K;
      } else if ((kind == Kind::kQ4_K_M || kind == Kind::kQ5_K_M) && more_bits) {
        type = DType::kQ6_K;
      }
      // Eight experts: attn_v is a small share of the model, so llama.cpp spends Q8_0 on it.
      if (model.n_experts == 8 && kind != Kind::kPlain) type = DType::kQ8_0;
      return type;
    case Category::kAttnK:
      if (model.n_experts == 8 && kind != Kind::kPlain) return DType::kQ8_0;
      if (kind == Kind::kIQ3_XS) return DType::kIQ3_XXS;
      if (kind == Kind::kIQ3_XXS) return DType::kIQ2_S;
      return type;
    case Category::kAttnQ:
      if (kind == Kind::kIQ3_XS) return DType::kIQ3_XXS;
      if (kind == Kind::kIQ3_XXS) return DType::kIQ2_S;
      return type;
    case Category::kFfnDown:
      if (kind == Kind::kIQ3_XXS && !model.with_importance) {
        return first_eighth ? DType::kQ4_K : DType::kQ3_K;
      }
      if (kind == Kind::kQ3_K_M) return layer < n_layers / 16 ? DType::kQ5_K : DType::kQ4_K;
      if (kind == Kind::kIQ3_M && (first_eighth || (model.n_experts == 8 && more_bits))) {
        return DType::kQ4_K;
      }
      if (kind == Kind::kQ4_K_M) return more_bits ? DType::kQ6_K : type;
      if (kind == Kind::kIQ4_XS && first_eighth && !model.with_importance) return DType::kQ5_K;
      if (kind == Kind::kQ5_K_M && more_bits) return DType::kQ6_K;
      return type;
    case Category::kAttnOutput:
      if (model.n_experts == 8) {
        switch (kind) {
          case Kind::kIQ3_XS:
          case Kind::kIQ3_XXS:
          case Kind::kQ3_K_M:
          case Kind::kQ4_K_M:
          case Kind::kIQ3_S:
          case Kind::kIQ3_M:
          case Kind::kIQ4_XS:
            return DType::kQ5_K;
          default:
            return type;
        }
      }
      if (kind == Kind::kIQ3_XXS) return DType::kIQ3_S;
      if (kind == Kind::kQ3_K_M || kind == Kind::kIQ3_M) return DType::kQ4_K;
      return type;
    case Category::kFfnGate:
    case Category::kFfnUp:
      if (kind == Kind::kIQ3_XS && layer >= n_layers / 8 && layer < 7 * n_layers / 8) {
        return DType::kIQ3_XXS;
      }
      return type;
    case Category::kTokenEmbd:
    case Category::kOutput:
    case Category::kOther:
      return type;
  }
  return type;
}

}  // namespace

std::optional<QuantMix> ParseQuantMix(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  QuantMix mix;
  for (const NamedMix& row : kNamedMixes) {
    if (upper == row.name) {
      mix.base = row.base, mix.kind = row.kind;
      return mix;
    }
  }
  const std::optional<DType> type = DTypeFromName(upper);
  if (!type || !CanQuantize(*type) || *type == DType::kQ8_1 || *type == DType::kQ8_K) {
    return std::nullopt;
  }
  mix.base = *type;
  return mix;
}

// The type llama-quantize writes instead when a row is not a whole number of the type's blocks
// (types without a row fall back to F16).
struct RowFallback {
  DType type;
  DType fallback;
};
constexpr RowFallback kRowFallbacks[] = {
    {DType::kQ2_K, DType::kQ4_0},      {DType::kQ3_K, DType::kQ4_0},
    {DType::kQ4_K, DType::kQ5_0},      {DType::kQ5_K, DType::kQ5_1},
    {DType::kQ6_K, DType::kQ8_0},      {DType::kIQ4_XS, DType::kIQ4_NL},
    {DType::kIQ1_S, DType::kIQ4_NL},   {DType::kIQ1_M, DType::kIQ4_NL},
    {DType::kIQ2_XXS, DType::kIQ4_NL}, {DType::kIQ2_XS, DType::kIQ4_NL},
    {DType::kIQ2_S, DType::kIQ4_NL},   {DType::kIQ3_XXS, DType::kIQ4_NL},
    {DType::kIQ3_S, DType::kIQ4_NL},   {DType::kTQ1_0, DType::kQ4_0},
    {DType::kTQ2_0, DType::kQ4_0},     {DType::kQ2_0, DType::kQ4_0},
};

DType FallbackForRow(DType type, int64_t n_in) {
  if (n_in % Traits(type).block_elems == 0) return type;
  DType fallback = type;
  for (const RowFallback& row : kRowFallbacks) {
    if (row.type == type) fallback = row.fallback;
  }
  return n_in % Traits(fallback).block_elems == 0 ? fallback : DType::kF16;
}

DType ChooseTensorType(const QuantMix& mix, const std::string& name, int64_t n_in, int n_dims,
                       const QuantModelInfo& model) {
  return FallbackForRow(MixedTensorType(mix, name, n_dims, model, n_in), n_in);
}

void FallbackReport::Note(const std::string& name, DType wanted, DType written, int64_t n_in) {
  if (wanted == written) return;
  ++count_;
  PETREL_LOG_WARN("quantize: %s: rows of %lld elements do not hold whole %s blocks (%zu); written "
                  "as %s",
                  name.c_str(), (long long)n_in, DTypeName(wanted),
                  size_t(Traits(wanted).block_elems), DTypeName(written));
}

void FallbackReport::Finish(size_t n_tensors) const {
  if (count_ == 0) return;
  PETREL_LOG_WARN("quantize: %zu of %zu tensors were written in a fallback type (see above)",
                  count_, n_tensors);
}

DType MixedTensorType(const QuantMix& mix, const std::string& name, int n_dims,
                      const QuantModelInfo& model, int64_t n_in) {
  // Vectors, and biases of any shape (gpt-oss's experts keep one row per expert), stay F32.
  if (n_dims < 2 || name.ends_with(".bias")) return DType::kF32;
  // The expert router is small and decides which experts run: llama.cpp keeps it F32 too.
  if (Contains(name, "ffn_gate_inp.weight")) return DType::kF32;
  DType type = mix.base;
  const bool is_float =
      mix.base == DType::kF32 || mix.base == DType::kF16 || mix.base == DType::kBF16;
  if (!mix.pure && !is_float) {
    const Category category = CategoryOf(name);
    if (category == Category::kOutput || (!model.has_output && category == Category::kTokenEmbd)) {
      // The output head is the most sensitive tensor; llama.cpp keeps it at Q6_K at least.
      type = OutputHeadType(mix, n_in);
    } else {
      type = MixTensorType(mix, name, n_dims, model, category, type);
    }
  }
  return type;
}

DType ChooseTensorType(const QuantMix& mix, const std::string& name, int64_t n_in, int n_dims,
                       int n_layers) {
  QuantModelInfo model;
  model.n_layers = n_layers;
  return ChooseTensorType(mix, name, n_in, n_dims, model);
}

// llama.cpp's `llama_ftype` of a file whose 2-D weights are all of one type.
struct PlainFileType {
  DType type;
  uint32_t ftype;
};
constexpr PlainFileType kPlainFileTypes[] = {
    {DType::kF32, 0},      {DType::kF16, 1},     {DType::kQ4_0, 2},     {DType::kQ4_1, 3},
    {DType::kQ8_0, 7},     {DType::kQ5_0, 8},    {DType::kQ5_1, 9},     {DType::kQ2_K, 10},
    {DType::kQ3_K, 12},    {DType::kQ4_K, 15},   {DType::kQ5_K, 17},    {DType::kQ6_K, 18},
    {DType::kIQ2_XXS, 19}, {DType::kIQ2_XS, 20}, {DType::kIQ3_XXS, 23}, {DType::kIQ1_S, 24},
    {DType::kIQ4_NL, 25},  {DType::kIQ3_S, 26},  {DType::kIQ2_S, 29},   {DType::kIQ4_XS, 30},
    {DType::kIQ1_M, 31},   {DType::kBF16, 32},   {DType::kTQ1_0, 36},   {DType::kTQ2_0, 37},
    {DType::kMXFP4, 38},   {DType::kQ1_0, 40},   {DType::kQ2_0, 41},
};

uint32_t GgufFileType(const QuantMix& mix) {
  if (const NamedMix* named = FindNamedMix(mix.kind)) return named->ftype;
  for (const PlainFileType& row : kPlainFileTypes) {
    if (row.type == mix.base) return row.ftype;
  }
  return 0;
}

Status CheckCanWrite(DType type, const std::string& tensor, bool has_importance) {
  if (NeedsImportance(type) && !has_importance) {
    return Error(
        "%s (tensor %s) needs an importance matrix: pass --imatrix FILE with an entry for it",
        DTypeName(type), tensor.c_str());
  }
  if (!CanQuantize(type) && !CanQuantizeWithImportance(type)) {
    return Error("tensor %s: petrel cannot write %s", tensor.c_str(), DTypeName(type));
  }
  return Status::Ok();
}

}  // namespace petrel
