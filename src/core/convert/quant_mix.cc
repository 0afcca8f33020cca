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

DType FallbackForRow(DType type, int64_t n_in) {
  if (n_in % Traits(type).block_elems == 0) return type;
  DType fallback = type;
  switch (type) {
    case DType::kQ4_K:
      fallback = DType::kQ5_0;
      break;
    case DType::kQ5_K:
      fallback = DType::kQ5_1;
      break;
    case DType::kQ6_K:
      fallback = DType::kQ8_0;
      break;
    case DType::kQ2_K:
    case DType::kQ3_K:
      fallback = DType::kQ4_0;
      break;
    case DType::kIQ4_XS:
      fallback = DType::kIQ4_NL;
      break;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ8_1:
    case DType::kQ8_K:
    case DType::kIQ4_NL:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
    case DType::kCount:
      break;  // no fallback of their own: F16 when their blocks do not fit the row
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
  switch (mix.base) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 7;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ2_K:
      return 10;
    case DType::kQ3_K:
      return 12;
    case DType::kQ4_K:
      return 15;
    case DType::kQ5_K:
      return 17;
    case DType::kQ6_K:
      return 18;
    case DType::kIQ4_NL:
      return 25;
    case DType::kIQ4_XS:
      return 30;
    case DType::kBF16:
      return 32;
    case DType::kQ8_1:
    case DType::kQ8_K:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
    case DType::kCount:
      break;  // not a file type of its own (ParseQuantMix never yields them)
  }
  return 0;
}

}  // namespace petrel
