// Element types of tensors: the DType enum and its one traits table (GGUF-compatible ids and sizes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace petrel {

// Dense enum; the GGUF/ggml type id lives in the traits table. Adding a type: one enum value,
// one table row (the static_assert in types.cc counts them).
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ8_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ4_NL,
  kIQ4_XS,
  kIQ1_S,
  kIQ1_M,
  kIQ2_XXS,
  kIQ2_XS,
  kIQ2_S,
  kIQ3_XXS,
  kIQ3_S,
  kTQ1_0,
  kTQ2_0,
  kMXFP4,
  kQ1_0,
  kQ2_0,
  kI8,
  kI16,
  kI32,
  kI64,
  kF64,
  kCount
};

struct DTypeTraits {
  const char* name;       // as GGUF tools print it: "F16", "Q4_K"
  uint32_t ggml_id;       // the type id stored in GGUF tensor infos
  uint32_t block_elems;   // elements per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
};

const DTypeTraits& Traits(DType type);
inline const char* DTypeName(DType type) { return Traits(type).name; }

// Maps a GGUF type id to our enum; nullopt for ids we do not know (a load error, not a crash).
std::optional<DType> DTypeFromGgmlId(uint32_t ggml_id);
// Case-insensitive lookup by name ("f16", "Q8_0").
std::optional<DType> DTypeFromName(std::string_view name);

// Bytes of a row of `n_elems` elements; nullopt when n_elems is not a whole number of blocks or
// the size overflows.
std::optional<uint64_t> RowBytes(DType type, uint64_t n_elems);

}  // namespace petrel
