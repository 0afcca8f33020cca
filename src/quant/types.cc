// Lookups in the DType traits table (types.h): by GGUF id, by name, and row sizes.
#include "quant/types.h"

#include <cctype>
#include <iterator>
#include <limits>

namespace petrel {

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
