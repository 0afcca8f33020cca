// YaRN's and LongRoPE's hyperparameters from GGUF metadata and config.json (the frequencies
// themselves are RopeConfig::InverseFrequencies).
#include "core/model/arch/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

// LongRoPE's attention factor for a context stretched by `factor` from `original` (the paper's
// and transformers' `_compute_longrope_parameters`).
double LongRopeAttentionFactor(double factor, double original) {
  return factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original));
}

// One of config.json's factor tables: an array of numbers.
Result<std::vector<float>> FactorArray(const nlohmann::json& s, const char* field) {
  auto it = s.find(field);
  if (it == s.end() || !it->is_array()) {
    return Error("config.json: rope_scaling field '%s' must be an array of numbers (longrope)",
                 field);
  }
  std::vector<float> values;
  for (const nlohmann::json& value : *it) {
    if (!value.is_number()) {
      return Error("config.json: rope_scaling field '%s' must be an array of numbers, found %s",
                   field, value.dump().c_str());
    }
    values.push_back(value.get<float>());
  }
  return values;
}

// A GGUF factor table: an F32 vector.
Result<std::vector<float>> FactorTensor(const GgufFile& file, const char* name) {
  const GgufTensorInfo* info = file.FindTensor(name);
  if (!info)
    return Error("tensor %s is missing (longrope needs the long and the short table)", name);
  if (info->desc.dtype != DType::kF32 || info->desc.n_dims != 1) {
    return Error("tensor %s: expected a F32 vector, found %s %s", name, DTypeName(info->desc.dtype),
                 info->desc.ShapeString().c_str());
  }
  const float* values = static_cast<const float*>(info->data);
  return std::vector<float>(values, values + info->desc.ne[0]);
}

}  // namespace

Status ReadGgufLongRope(const GgufFile& file, const Architecture& arch, int64_t trained_context,
                        RopeConfig* rope) {
  if (!file.FindTensor("rope_factors_long.weight") &&
      !file.FindTensor("rope_factors_short.weight")) {
    return Status::Ok();
  }
  if (!rope->freq_factors.empty() || rope->scaling != RopeScalingKind::kNone) {
    return Error(
        "rope_factors_long/short with another rope scaling (rope_freqs.weight or "
        "rope.scaling.type) is not supported");
  }
  const std::string prefix = std::string(arch.gguf_name) + ".rope.scaling.";
  PETREL_ASSIGN_OR_RETURN(rope->long_factors, FactorTensor(file, "rope_factors_long.weight"));
  PETREL_ASSIGN_OR_RETURN(rope->short_factors, FactorTensor(file, "rope_factors_short.weight"));
  PETREL_ASSIGN_OR_RETURN(uint64_t original,
                          file.GetUintOr(prefix + "original_context_length",
                                         uint64_t(trained_context > 0 ? trained_context : 0)));
  if (original == 0) return Error("key %soriginal_context_length is 0", prefix.c_str());
  const double stretch = double(trained_context) / double(original);
  PETREL_ASSIGN_OR_RETURN(
      double attn_factor,
      file.GetFloatOr(prefix + "attn_factor", LongRopeAttentionFactor(stretch, double(original))));
  rope->scaling = RopeScalingKind::kLongRope;
  rope->original_context = int64_t(std::min<uint64_t>(original, uint64_t(1) << 40));
  rope->factor = float(stretch > 0.0 ? stretch : 1.0);
  rope->attn_factor = float(attn_factor);
  rope->SelectLongRopeFactors(trained_context);
  return Status::Ok();
}

Status ReadHfLongRope(const nlohmann::json& config, const nlohmann::json& s,
                      int64_t max_position_embeddings, RopeConfig* rope) {
  PETREL_ASSIGN_OR_RETURN(rope->long_factors, FactorArray(s, "long_factor"));
  PETREL_ASSIGN_OR_RETURN(rope->short_factors, FactorArray(s, "short_factor"));
  // Phi-3 keeps the original context beside max_position_embeddings, newer configs inside
  // rope_scaling; either way the stretch is their ratio.
  const char* kOriginal = "original_max_position_embeddings";
  const nlohmann::json* holder =
      config.contains(kOriginal) && !config[kOriginal].is_null()
          ? &config
          : (s.contains(kOriginal) && !s[kOriginal].is_null() ? &s : nullptr);
  double original = double(max_position_embeddings), factor = 1.0;
  if (holder) {
    const nlohmann::json& value = (*holder)[kOriginal];
    if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
      return Error("config.json: field '%s' must be a positive integer, not %s", kOriginal,
                   value.dump().c_str());
    }
    original = double(value.get<int64_t>());
    factor = double(max_position_embeddings) / original;
  } else {
    PETREL_ASSIGN_OR_RETURN(factor, NumberOr(s, "factor", 1.0));
    if (!(factor > 0.0) || !std::isfinite(factor)) {
      return Error("config.json: rope_scaling field 'factor': longrope factor %g must be positive",
                   factor);
    }
  }
  if (!(original > 1.0)) {
    return Error("config.json: longrope needs an original context above 1 (got %g)", original);
  }
  PETREL_ASSIGN_OR_RETURN(double attention_factor, NumberOr(s, "attention_factor", 0.0));
  if (s.contains("attention_factor") && !s["attention_factor"].is_null() &&
      !(attention_factor > 0.0 && std::isfinite(attention_factor))) {
    return Error("config.json: rope_scaling field 'attention_factor' %g must be positive",
                 attention_factor);
  }
  rope->scaling = RopeScalingKind::kLongRope;
  rope->original_context = int64_t(original);
  rope->factor = float(factor);
  rope->attn_factor =
      float(attention_factor > 0.0 ? attention_factor : LongRopeAttentionFactor(factor, original));
  rope->SelectLongRopeFactors(max_position_embeddings);
  return Status::Ok();
}

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
