// `petrel quantize` from a Hugging Face folder: the model's config as GGUF metadata, its
// tokenizer.json carried as `tokenizer.huggingface.json` (the GGUF key for it), Q/K rows permuted
// to llama.cpp's interleaved layout where the architecture's GGUF files use it, and every weight
// re-encoded per the mix.
#pragma once

#include <string>

#include "core/convert/quant_mix.h"
#include "core/base/status.h"
#include "core/format/gguf_writer.h"  // GgufWriter::ProgressFn

namespace petrel {

// An `out_path` that is one of the folder's files (by path or link) is refused before anything
// is written; on any error `out_path` is left as it was (AtomicFile).
Status QuantizeHfFolder(const std::string& folder, const std::string& out_path, const QuantMix& mix,
                        bool verbose, const GgufWriter::ProgressFn& progress = {});

}  // namespace petrel
