// `petrel quantize` from a Hugging Face folder: the model's config as GGUF metadata, its
// tokenizer.json carried as `tokenizer.huggingface.json` (the GGUF key for it), Q/K rows permuted
// to llama.cpp's interleaved layout where the architecture's GGUF files use it, and every weight
// re-encoded per the mix.
#pragma once

#include <string>

#include "core/convert/quant_mix.h"
#include "core/base/status.h"

namespace petrel {

Status QuantizeHfFolder(const std::string& folder, const std::string& out_path, const QuantMix& mix,
                        bool verbose);

}  // namespace petrel
