// Readers of the RoPE scaling kinds that need more than a factor (YaRN), from GGUF metadata and
// from config.json's `rope_scaling`, shared by the families whose configs may carry them.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "core/model/architecture.h"

namespace petrel {

// GGUF `<arch>.rope.scaling.*` for type "yarn": `factor` (already read by the caller),
// `original_context_length` (default: the trained context), `yarn_beta_fast` / `yarn_beta_slow`
// (32 / 1) and `attn_factor` (1), which multiplies 0.1·ln(factor) + 1 as llama.cpp does. The GGUF
// has no key for rounding the ramp: `truncate` is the family's (llama.cpp always rounds), unless
// petrel's own `yarn_truncate` key (written for configs that do not round) says otherwise.
Status ReadGgufYarn(const GgufFile& file, const Architecture& arch, double factor,
                    int64_t trained_context, bool truncate, RopeConfig* rope);

// config.json `rope_scaling` of rope_type "yarn": `factor`, `original_max_position_embeddings`
// (default: `max_position_embeddings` / factor), `beta_fast` / `beta_slow` (32 / 1),
// `truncate` (true) and the attention factor: `attention_factor` when given, else
// 0.1·mscale·ln(factor) + 1 over the same with `mscale_all_dim` (transformers'
// `_compute_yarn_parameters`).
Status ReadHfYarn(const nlohmann::json& rope_scaling, int64_t max_position_embeddings,
                  RopeConfig* rope);

}  // namespace petrel
