// Element types of tensors: the DType enum and its one traits table (GGUF-compatible ids and sizes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace petrel {

// Every element type, one row each: enum name, name as GGUF tools print it, the type id stored in
// GGUF tensor infos, elements per block (1 for plain types) and bytes per block. The enum and the
// traits table below are both made from this list, so a type's traits cannot drift from its
// enum value; block structs check their sizes against it (blocks.h). Adding a weight type: a row
// here, its block struct, and its row in each layer's table that should handle it (the quant
// codec table, a backend's kernel table; docs/ARCHITECTURE.md, "What adding X touches").
#define PETREL_DTYPES(X)                \
  X(F32, "F32", 0, 1, 4)                \
  X(F16, "F16", 1, 1, 2)                \
  X(BF16, "BF16", 30, 1, 2)             \
  X(Q4_0, "Q4_0", 2, 32, 18)            \
  X(Q4_1, "Q4_1", 3, 32, 20)            \
  X(Q5_0, "Q5_0", 6, 32, 22)            \
  X(Q5_1, "Q5_1", 7, 32, 24)            \
  X(Q8_0, "Q8_0", 8, 32, 34)            \
  X(Q8_1, "Q8_1", 9, 32, 36)            \
  X(Q2_K, "Q2_K", 10, 256, 84)          \
  X(Q3_K, "Q3_K", 11, 256, 110)         \
  X(Q4_K, "Q4_K", 12, 256, 144)         \
  X(Q5_K, "Q5_K", 13, 256, 176)         \
  X(Q6_K, "Q6_K", 14, 256, 210)         \
  X(Q8_K, "Q8_K", 15, 256, 292)         \
  X(IQ4_NL, "IQ4_NL", 20, 32, 18)       \
  X(IQ4_XS, "IQ4_XS", 23, 256, 136)     \
  X(IQ1_S, "IQ1_S", 19, 256, 50)        \
  X(IQ1_M, "IQ1_M", 29, 256, 56)        \
  X(IQ2_XXS, "IQ2_XXS", 16, 256, 66)    \
  X(IQ2_XS, "IQ2_XS", 17, 256, 74)      \
  X(IQ2_S, "IQ2_S", 22, 256, 82)        \
  X(IQ3_XXS, "IQ3_XXS", 18, 256, 98)    \
  X(IQ3_S, "IQ3_S", 21, 256, 110)       \
  X(TQ1_0, "TQ1_0", 34, 256, 54)        \
  X(TQ2_0, "TQ2_0", 35, 256, 66)        \
  X(MXFP4, "MXFP4", 39, 32, 17)         \
  X(Q1_0, "Q1_0", 41, 128, 18)          \
  X(Q2_0, "Q2_0", 42, 64, 18)           \
  X(I8, "I8", 24, 1, 1)                 \
  X(I16, "I16", 25, 1, 2)               \
  X(I32, "I32", 26, 1, 4)               \
  X(I64, "I64", 27, 1, 8)               \
  X(F64, "F64", 28, 1, 8)

enum class DType : uint8_t {
#define PETREL_DTYPE_ENUM(id, name, ggml_id, block_elems, block_bytes) k##id,
  PETREL_DTYPES(PETREL_DTYPE_ENUM)
#undef PETREL_DTYPE_ENUM
      kCount
};

struct DTypeTraits {
  const char* name;       // as GGUF tools print it: "F16", "Q4_K"
  uint32_t ggml_id;       // the type id stored in GGUF tensor infos
  uint32_t block_elems;   // elements per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
};

inline constexpr DTypeTraits kDTypeTraits[] = {
#define PETREL_DTYPE_TRAITS(id, name, ggml_id, block_elems, block_bytes) \
  {name, ggml_id, block_elems, block_bytes},
    PETREL_DTYPES(PETREL_DTYPE_TRAITS)
#undef PETREL_DTYPE_TRAITS
};
static_assert(sizeof(kDTypeTraits) / sizeof(kDTypeTraits[0]) == size_t(DType::kCount));

constexpr const DTypeTraits& Traits(DType type) { return kDTypeTraits[size_t(type)]; }

inline const char* DTypeName(DType type) { return Traits(type).name; }

// Maps a GGUF type id to our enum; nullopt for ids we do not know (a load error, not a crash).
std::optional<DType> DTypeFromGgmlId(uint32_t ggml_id);
// Case-insensitive lookup by name ("f16", "Q8_0").
std::optional<DType> DTypeFromName(std::string_view name);

// Bytes of a row of `n_elems` elements; nullopt when n_elems is not a whole number of blocks or
// the size overflows.
std::optional<uint64_t> RowBytes(DType type, uint64_t n_elems);

}  // namespace petrel
