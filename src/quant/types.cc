// The DType traits table: names, ggml ids and block sizes of every element type.
#include "quant/types.h"

#include <cctype>
#include <iterator>
#include <limits>

#include "quant/blocks.h"  // block structs, checked against the table below

namespace petrel {
namespace {

// Order follows `enum class DType`. Block sizes are those of ggml's block structs.
constexpr DTypeTraits kDTypeTraits[] = {
    {"F32", 0, 1, 4},        {"F16", 1, 1, 2},       {"BF16", 30, 1, 2},
    {"Q4_0", 2, 32, 18},     {"Q4_1", 3, 32, 20},    {"Q5_0", 6, 32, 22},
    {"Q5_1", 7, 32, 24},     {"Q8_0", 8, 32, 34},    {"Q8_1", 9, 32, 36},
    {"Q2_K", 10, 256, 84},   {"Q3_K", 11, 256, 110}, {"Q4_K", 12, 256, 144},
    {"Q5_K", 13, 256, 176},  {"Q6_K", 14, 256, 210}, {"Q8_K", 15, 256, 292},
    {"IQ4_NL", 20, 32, 18},  {"IQ4_XS", 23, 256, 136},
    {"IQ1_S", 19, 256, 50},  {"IQ1_M", 29, 256, 56}, {"IQ2_XXS", 16, 256, 66},
    {"IQ2_XS", 17, 256, 74}, {"IQ2_S", 22, 256, 82}, {"IQ3_XXS", 18, 256, 98},
    {"IQ3_S", 21, 256, 110}, {"TQ1_0", 34, 256, 54}, {"TQ2_0", 35, 256, 66},
    {"MXFP4", 39, 32, 17},   {"Q1_0", 41, 128, 18},  {"Q2_0", 42, 64, 18},
    {"I8", 24, 1, 1},
    {"I16", 25, 1, 2},       {"I32", 26, 1, 4},      {"I64", 27, 1, 8},
    {"F64", 28, 1, 8},
};
static_assert(std::size(kDTypeTraits) == size_t(DType::kCount), "one row per DType");

// The table's block sizes are those of the structs the codecs and kernels read.
constexpr bool BlockBytesMatch(DType type, size_t struct_bytes) {
  return kDTypeTraits[size_t(type)].block_bytes == struct_bytes;
}
static_assert(BlockBytesMatch(DType::kQ4_0, sizeof(quant::BlockQ4_0)));
static_assert(BlockBytesMatch(DType::kQ4_1, sizeof(quant::BlockQ4_1)));
static_assert(BlockBytesMatch(DType::kQ5_0, sizeof(quant::BlockQ5_0)));
static_assert(BlockBytesMatch(DType::kQ5_1, sizeof(quant::BlockQ5_1)));
static_assert(BlockBytesMatch(DType::kQ8_0, sizeof(quant::BlockQ8_0)));
static_assert(BlockBytesMatch(DType::kQ8_1, sizeof(quant::BlockQ8_1)));
static_assert(BlockBytesMatch(DType::kQ2_K, sizeof(quant::BlockQ2_K)));
static_assert(BlockBytesMatch(DType::kQ3_K, sizeof(quant::BlockQ3_K)));
static_assert(BlockBytesMatch(DType::kQ4_K, sizeof(quant::BlockQ4_K)));
static_assert(BlockBytesMatch(DType::kQ5_K, sizeof(quant::BlockQ5_K)));
static_assert(BlockBytesMatch(DType::kQ6_K, sizeof(quant::BlockQ6_K)));
static_assert(BlockBytesMatch(DType::kQ8_K, sizeof(quant::BlockQ8_K)));
static_assert(BlockBytesMatch(DType::kIQ4_NL, sizeof(quant::BlockIQ4_NL)));
static_assert(BlockBytesMatch(DType::kIQ4_XS, sizeof(quant::BlockIQ4_XS)));
static_assert(BlockBytesMatch(DType::kIQ1_S, sizeof(quant::BlockIQ1_S)));
static_assert(BlockBytesMatch(DType::kIQ1_M, sizeof(quant::BlockIQ1_M)));
static_assert(BlockBytesMatch(DType::kIQ2_XXS, sizeof(quant::BlockIQ2_XXS)));
static_assert(BlockBytesMatch(DType::kIQ2_XS, sizeof(quant::BlockIQ2_XS)));
static_assert(BlockBytesMatch(DType::kIQ2_S, sizeof(quant::BlockIQ2_S)));
static_assert(BlockBytesMatch(DType::kIQ3_XXS, sizeof(quant::BlockIQ3_XXS)));
static_assert(BlockBytesMatch(DType::kIQ3_S, sizeof(quant::BlockIQ3_S)));
static_assert(BlockBytesMatch(DType::kTQ1_0, sizeof(quant::BlockTQ1_0)));
static_assert(BlockBytesMatch(DType::kTQ2_0, sizeof(quant::BlockTQ2_0)));
static_assert(BlockBytesMatch(DType::kMXFP4, sizeof(quant::BlockMXFP4)));
static_assert(BlockBytesMatch(DType::kQ1_0, sizeof(quant::BlockQ1_0)));
static_assert(BlockBytesMatch(DType::kQ2_0, sizeof(quant::BlockQ2_0)));

}  // namespace

const DTypeTraits& Traits(DType type) { return kDTypeTraits[size_t(type)]; }

std::optional<DType> DTypeFromGgmlId(uint32_t ggml_id) {
  for (size_t i = 0; i < std::size(kDTypeTraits); ++i) {
    if (kDTypeTraits[i].ggml_id == ggml_id) return DType(i);
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (size_t i = 0; i < std::size(kDTypeTraits); ++i) {
    std::string_view candidate = kDTypeTraits[i].name;
    if (candidate.size() != name.size()) continue;
    bool same = true;
    for (size_t c = 0; c < name.size() && same; ++c) {
      same = std::toupper(static_cast<unsigned char>(name[c])) == candidate[c];
    }
    if (same) return DType(i);
  }
  return std::nullopt;
}

std::optional<uint64_t> RowBytes(DType type, uint64_t n_elems) {
  const DTypeTraits& traits = Traits(type);
  if (n_elems % traits.block_elems != 0) return std::nullopt;
  const uint64_t blocks = n_elems / traits.block_elems;
  if (blocks > std::numeric_limits<uint64_t>::max() / traits.block_bytes) return std::nullopt;
  return blocks * traits.block_bytes;
}

}  // namespace petrel
