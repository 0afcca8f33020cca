// Per-tensor type choice for `petrel quantize` and `petrel synth`, after llama.cpp's
// `llama_tensor_get_type` for the Llama family.
#include "core/convert/quant_mix.h"

#include <cctype>
#include <cstdlib>

#include "quant/quantize.h"  // CanQuantize

namespace petrel {
namespace {

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

}  // namespace

std::optional<QuantMix> ParseQuantMix(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  QuantMix mix;
  if (upper == "Q3_K_M") {
    mix.base = DType::kQ3_K, mix.kind = QuantMix::Kind::kQ3_K_M;
    return mix;
  }
  if (upper == "Q4_K_M") {
    mix.base = DType::kQ4_K, mix.kind = QuantMix::Kind::kQ4_K_M;
    return mix;
  }
  if (upper == "Q5_K_M") {
    mix.base = DType::kQ5_K, mix.kind = QuantMix::Kind::kQ5_K_M;
    return mix;
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
    {DType::kQ2_K, DType::kQ4_0},    {DType::kQ3_K, DType::kQ4_0},
    {DType::kQ4_K, DType::kQ5_0},    {DType::kQ5_K, DType::kQ5_1},
    {DType::kQ6_K, DType::kQ8_0},    {DType::kIQ4_XS, DType::kIQ4_NL},
    {DType::kIQ1_S, DType::kIQ4_NL}, {DType::kIQ1_M, DType::kIQ4_NL},
    {DType::kIQ2_XXS, DType::kIQ4_NL}, {DType::kIQ2_XS, DType::kIQ4_NL},
    {DType::kIQ2_S, DType::kIQ4_NL}, {DType::kIQ3_XXS, DType::kIQ4_NL},
    {DType::kIQ3_S, DType::kIQ4_NL}, {DType::kTQ1_0, DType::kQ4_0},
    {DType::kTQ2_0, DType::kQ4_0},   {DType::kQ2_0, DType::kQ4_0},
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
                       int n_layers) {
  if (n_dims < 2) return DType::kF32;
  // The expert router is small and decides which experts run: llama.cpp keeps it F32 too.
  if (Contains(name, "ffn_gate_inp.weight")) return DType::kF32;
  DType type = mix.base;
  const bool is_float =
      mix.base == DType::kF32 || mix.base == DType::kF16 || mix.base == DType::kBF16;
  if (!mix.pure && !is_float) {
    const int layer = LayerOf(name);
    const bool more_bits = layer >= 0 && UseMoreBits(layer, n_layers);
    if (name == "output.weight") {
      // The output head is the most sensitive tensor; llama.cpp keeps it at Q6_K at least.
      if (mix.base != DType::kQ8_0) type = DType::kQ6_K;
    } else if (Contains(name, "attn_v.weight")) {
      switch (mix.kind) {
        case QuantMix::Kind::kQ3_K_M:
          type = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
          break;
        case QuantMix::Kind::kQ4_K_M:
        case QuantMix::Kind::kQ5_K_M:
          if (more_bits) type = DType::kQ6_K;
          break;
        case QuantMix::Kind::kPlain:
          break;
      }
    } else if (Contains(name, "ffn_down.weight")) {
      switch (mix.kind) {
        case QuantMix::Kind::kQ3_K_M:
          type = layer < n_layers / 16 ? DType::kQ5_K : DType::kQ4_K;
          break;
        case QuantMix::Kind::kQ4_K_M:
        case QuantMix::Kind::kQ5_K_M:
          if (more_bits) type = DType::kQ6_K;
          break;
        case QuantMix::Kind::kPlain:
          break;
      }
    } else if (Contains(name, "attn_output.weight") && mix.kind == QuantMix::Kind::kQ3_K_M) {
      type = DType::kQ4_K;
    }
  }
  return FallbackForRow(type, n_in);
}

// llama.cpp's `llama_ftype` of a file whose 2-D weights are all of one type.
struct PlainFileType {
  DType type;
  uint32_t ftype;
};
constexpr PlainFileType kPlainFileTypes[] = {
    {DType::kF32, 0},      {DType::kF16, 1},     {DType::kQ4_0, 2},    {DType::kQ4_1, 3},
    {DType::kQ8_0, 7},     {DType::kQ5_0, 8},    {DType::kQ5_1, 9},    {DType::kQ2_K, 10},
    {DType::kQ3_K, 12},    {DType::kQ4_K, 15},   {DType::kQ5_K, 17},   {DType::kQ6_K, 18},
    {DType::kIQ2_XXS, 19}, {DType::kIQ2_XS, 20}, {DType::kIQ3_XXS, 23}, {DType::kIQ1_S, 24},
    {DType::kIQ4_NL, 25},  {DType::kIQ3_S, 26},  {DType::kIQ2_S, 28}, {DType::kIQ4_XS, 30},
    {DType::kIQ1_M, 31},   {DType::kBF16, 32},   {DType::kTQ1_0, 36}, {DType::kTQ2_0, 37},
    {DType::kMXFP4, 38},
};

uint32_t GgufFileType(const QuantMix& mix) {
  switch (mix.kind) {
    case QuantMix::Kind::kQ3_K_M:
      return 12;
    case QuantMix::Kind::kQ4_K_M:
      return 15;
    case QuantMix::Kind::kQ5_K_M:
      return 17;
    case QuantMix::Kind::kPlain:
      break;
  }
  for (const PlainFileType& row : kPlainFileTypes) {
    if (row.type == mix.base) return row.ftype;
  }
  return 0;
}

}  // namespace petrel
