// YaRN's hyperparameters from GGUF metadata and config.json (the frequencies themselves are
// RopeConfig::InverseFrequencies).
#include "core/model/arch/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/format/gguf.h"

namespace petrel {
namespace {

// transformers' `get_mscale`: the attention factor YaRN applies for a context stretched by
// `factor`.
double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

Result<double> NumberOr(const nlohmann::json& json, const char* field, double fallback) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number())
    return Error("config.json: rope_scaling field '%s' must be a number", field);
  return it->get<double>();
}

}  // namespace

Status ReadGgufYarn(const GgufFile& file, const Architecture& arch, double factor,
                    int64_t trained_context, bool truncate, RopeConfig* rope) {
  const std::string prefix = std::string(arch.gguf_name) + ".rope.scaling.";
  PETREL_ASSIGN_OR_RETURN(uint64_t original,
                          file.GetUintOr(prefix + "original_context_length",
                                         uint64_t(trained_context > 0 ? trained_context : 0)));
  PETREL_ASSIGN_OR_RETURN(double beta_fast, file.GetFloatOr(prefix + "yarn_beta_fast", 32.0));
  PETREL_ASSIGN_OR_RETURN(double beta_slow, file.GetFloatOr(prefix + "yarn_beta_slow", 1.0));
  PETREL_ASSIGN_OR_RETURN(double attn_factor, file.GetFloatOr(prefix + "attn_factor", 1.0));
  // petrel's own key, written for configs that do not round (llama.cpp has none).
  PETREL_ASSIGN_OR_RETURN(truncate, file.GetBoolOr(prefix + "yarn_truncate", truncate));
  if (!(factor > 0.0) || !std::isfinite(factor)) {
    return Error("key %sfactor: yarn rope scaling factor %g must be positive", prefix.c_str(),
                 factor);
  }
  rope->scaling = RopeScalingKind::kYarn;
  rope->factor = float(factor);
  rope->original_context = int64_t(std::min<uint64_t>(original, uint64_t(1) << 40));
  rope->beta_fast = float(beta_fast);
  rope->beta_slow = float(beta_slow);
  rope->yarn_truncate = truncate;
  rope->attn_factor = float(attn_factor * YarnMscale(factor, 1.0));
  return Status::Ok();
}

Status ReadHfYarn(const nlohmann::json& s, int64_t max_position_embeddings, RopeConfig* rope) {
  PETREL_ASSIGN_OR_RETURN(double factor, NumberOr(s, "factor", 1.0));
  if (!(factor > 0.0) || !std::isfinite(factor)) {
    return Error("config.json: rope_scaling field 'factor': yarn factor %g must be positive",
                 factor);
  }
  PETREL_ASSIGN_OR_RETURN(double original, NumberOr(s, "original_max_position_embeddings",
                                                    double(max_position_embeddings) / factor));
  PETREL_ASSIGN_OR_RETURN(double beta_fast, NumberOr(s, "beta_fast", 32.0));
  PETREL_ASSIGN_OR_RETURN(double beta_slow, NumberOr(s, "beta_slow", 1.0));
  PETREL_ASSIGN_OR_RETURN(double mscale, NumberOr(s, "mscale", 0.0));
  PETREL_ASSIGN_OR_RETURN(double mscale_all_dim, NumberOr(s, "mscale_all_dim", 0.0));
  PETREL_ASSIGN_OR_RETURN(double attention_factor, NumberOr(s, "attention_factor", 0.0));
  bool truncate = true;
  if (auto it = s.find("truncate"); it != s.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return Error("config.json: rope_scaling field 'truncate' must be true or false");
    }
    truncate = it->get<bool>();
  }
  if (!(original >= 1.0) || !std::isfinite(original)) {
    return Error("config.json: rope_scaling field 'original_max_position_embeddings' %g is invalid",
                 original);
  }
  if (s.contains("attention_factor") && !s["attention_factor"].is_null() &&
      !(attention_factor > 0.0)) {
    return Error("config.json: rope_scaling field 'attention_factor' %g must be positive",
                 attention_factor);
  }
  rope->scaling = RopeScalingKind::kYarn;
  rope->factor = float(factor);
  rope->original_context = int64_t(original);
  rope->beta_fast = float(beta_fast);
  rope->beta_slow = float(beta_slow);
  rope->yarn_truncate = truncate;
  if (attention_factor > 0.0) {
    rope->attn_factor = float(attention_factor);
  } else if (mscale != 0.0 && mscale_all_dim != 0.0) {
    rope->attn_factor = float(YarnMscale(factor, mscale) / YarnMscale(factor, mscale_all_dim));
  } else {
    rope->attn_factor = float(YarnMscale(factor, 1.0));
  }
  return Status::Ok();
}

}  // namespace petrel
