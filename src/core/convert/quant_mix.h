// Which type each tensor of a model gets when quantizing: the plain types, llama.cpp's K-quant
// mixes (sensitive tensors at higher precision) and the 32-block fallback for short rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "quant/types.h"

namespace petrel {

struct QuantMix {
  DType base = DType::kQ4_K;  // the type of most 2-D weights
  enum class Kind { kPlain, kQ3_K_M, kQ4_K_M, kQ5_K_M } kind = Kind::kPlain;
  bool pure = false;  // every 2-D weight gets `base` (still with the short-row fallback)
};

// "Q4_0", "q8_0", "Q4_K_M", "Q5_K_M", "Q3_K_M", ... (case-insensitive); nullopt if unknown.
// Plain types are those quant/quantize.h can encode, except the activation formats Q8_1/Q8_K.
std::optional<QuantMix> ParseQuantMix(const std::string& name);

// The type of tensor `name` (GGUF naming: blk.N.attn_v.weight) with rows of `n_in` elements and
// `n_dims` dimensions in a model of `n_layers` blocks. 1-D tensors (norms, biases) stay F32.
DType ChooseTensorType(const QuantMix& mix, const std::string& name, int64_t n_in, int n_dims,
                       int n_layers);

// llama.cpp's fallback for rows that do not hold whole blocks of `type`: K-quants and IQ4_XS go
// to a 32-block type (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0, Q2_K/Q3_K→Q4_0, IQ4_XS→IQ4_NL), and
// rows that hold no whole 32-block to F16.
DType FallbackForRow(DType type, int64_t n_in);

// llama.cpp's `llama_ftype` for a file written with `mix` (the general.file_type key).
uint32_t GgufFileType(const QuantMix& mix);

}  // namespace petrel
