// Readers of the RoPE scaling kinds that need more than a factor (YaRN, LongRoPE), from GGUF
// metadata and from config.json's `rope_scaling`, shared by the families whose configs may carry
// them.
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

// LongRoPE from a GGUF, as llama.cpp's converter writes Phi-3's long-context models: the
// tensors `rope_factors_long.weight` and `rope_factors_short.weight` (F32, one divisor per
// rotated pair; no `rope.scaling.type` key), `rope.scaling.original_context_length` (default:
// the trained context) and `rope.scaling.attn_factor`, the attention factor itself (default:
// sqrt(1 + ln(s) / ln(original)) for s = trained / original context). Neither tensor: nothing
// to read. The long table is selected for the trained context (the engine reselects for its
// own: RopeConfig::SelectLongRopeFactors).
Status ReadGgufLongRope(const GgufFile& file, const Architecture& arch, int64_t trained_context,
                        RopeConfig* rope);

// config.json `rope_scaling` of type "longrope" (or "su", its first name): `long_factor` and
// `short_factor` arrays, and the original context from the top-level
// `original_max_position_embeddings` (Phi-3's place) or the same field in rope_scaling; with it
// the stretch is `max_position_embeddings` / original (transformers ignores `factor` then),
// without it the original is `max_position_embeddings` and the stretch `factor`. The attention
// factor is `attention_factor` when given, else sqrt(1 + ln(stretch) / ln(original)) (1 for a
// stretch <= 1). The long table is selected for `max_position_embeddings`.
Status ReadHfLongRope(const nlohmann::json& config, const nlohmann::json& rope_scaling,
                      int64_t max_position_embeddings, RopeConfig* rope);

}  // namespace petrel
