// Re-encodes a GGUF model's weights into another type or mix (`petrel quantize`).
#pragma once

#include <span>
#include <string>

#include "core/base/status.h"
#include "core/convert/quant_mix.h"
#include "core/format/gguf_writer.h"  // GgufWriter::ProgressFn
#include "core/model/lora_adapter.h"  // LoraFile

namespace petrel {

struct Imatrix;
class GgufFile;

// What the mixes' rules read about the model in `file` (ChooseTensorType): its block count,
// heads per KV head (of the first layer where the counts are per layer), experts, and whether
// it has an output head of its own; `with_importance` is left false.
Result<QuantModelInfo> ReadQuantModelInfo(const GgufFile& file);

// Reads `in_path` (GGUF with F32/F16/BF16 or block-format tensors), writes `out_path` with every
// metadata key copied (general.file_type updated), 2-D weights re-encoded per `mix`
// (ChooseTensorType) and 1-D tensors as F32. `verbose` prints one line per tensor
// on stderr; `progress` (if set) is called after each tensor is written. An `out_path` that is
// the input file (by path or link) is refused before anything is written; on any error
// `out_path` is left as it was (AtomicFile). So is a tensor whose type cannot be written, or
// needs an importance matrix that `imatrix` has no entry for (CheckCanWrite).
//
// With an `imatrix`, the types that take one (TakesImportance) weight each row's rounding error
// by its columns' importance; tensors without an entry (the embeddings, the output head unless
// collected) quantize as without. Every entry must name a matrix of the model with as many
// columns, else the imatrix was made for another model: an error before anything is written.
// Without one, the output is byte for byte what it was before importance matrices existed.
//
// With `lora` adapters, each adapted matrix is written as W + s·B·A (merged in f32 before it is
// re-encoded); the adapters are checked against the model as at run time first.
Status QuantizeGgufModel(const std::string& in_path, const std::string& out_path,
                         const QuantMix& mix, bool verbose,
                         const GgufWriter::ProgressFn& progress = {},
                         const Imatrix* imatrix = nullptr, const std::string& imatrix_path = "",
                         std::span<const LoraFile> lora = {});

}  // namespace petrel
