// ModelConfig validation, summaries, and RoPE frequency computation.
#include "core/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace petrel {

namespace {

// YaRN's correction dimension: the pair index whose wavelength turns `n_rotations` times over
// the original context (transformers' `find_correction_dim`).
double YarnCorrectionDim(double n_rotations, int64_t dims, double base, int64_t original_context) {
  return double(dims) * std::log(double(original_context) / (n_rotations * 2.0 * M_PI)) /
         (2.0 * std::log(base));
}

}  // namespace

std::vector<double> RopeConfig::InverseFrequencies() const {
  const int64_t n_pairs = dims / 2;
  std::vector<double> inv_freq(size_t(n_pairs > 0 ? n_pairs : 0));
  // YaRN's ramp [low, high] over pair indices (transformers' `find_correction_range`).
  double yarn_low = 0.0, yarn_high = 0.0;
  if (scaling == RopeScalingKind::kYarn) {
    yarn_low = YarnCorrectionDim(beta_fast, dims, base, original_context);
    yarn_high = YarnCorrectionDim(beta_slow, dims, base, original_context);
    if (yarn_truncate) {
      yarn_low = std::floor(yarn_low);
      yarn_high = std::ceil(yarn_high);
    }
    yarn_low = std::max(yarn_low, 0.0);
    yarn_high = std::min(yarn_high, double(dims - 1));
    if (yarn_low == yarn_high) yarn_high += 0.001;  // as transformers: no division by zero
  }
  for (int64_t i = 0; i < n_pairs; ++i) {
    double freq = std::pow(double(base), -2.0 * double(i) / double(dims));
    switch (scaling) {
      case RopeScalingKind::kNone:
      case RopeScalingKind::kLongRope:  // its divisors are `freq_factors`, applied below
        break;
      case RopeScalingKind::kLinear:
        freq /= factor;
        break;
      case RopeScalingKind::kLlama3: {
        // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth ramp
        // between (as transformers' `_compute_llama3_parameters`).
        const double low_wavelen = original_context / low_freq_factor;
        const double high_wavelen = original_context / high_freq_factor;
        const double wavelen = 2.0 * M_PI / freq;
        if (wavelen > low_wavelen) {
          freq /= factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth =
              (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
          freq = (1.0 - smooth) * freq / factor + smooth * freq;
        }
        break;
      }
      case RopeScalingKind::kYarn: {
        // Blend of the interpolated (freq / factor) and the original frequency: the original
        // below the ramp (fast pairs), the interpolated above it.
        const double ramp = std::clamp((double(i) - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        freq = freq / factor * (1.0 - extrapolation) + freq * extrapolation;
        break;
      }
    }
    if (size_t(i) < freq_factors.size()) freq /= freq_factors[size_t(i)];
    inv_freq[size_t(i)] = freq;
  }
  return inv_freq;
}

void RopeConfig::SelectLongRopeFactors(int64_t context) {
  if (scaling != RopeScalingKind::kLongRope) return;
  freq_factors = context > original_context ? long_factors : short_factors;
}

RopeConfig ModelConfig::LocalRope() const {
  if (!(rope_local_base > 0.0f)) return rope;
  RopeConfig local = rope;
  local.base = rope_local_base;
  local.scaling = RopeScalingKind::kNone;
  local.factor = 1.0f;
  local.attn_factor = 1.0f;
  local.freq_factors.clear();
  return local;
}

Status CheckBlockCount(int64_t n_layers, const std::string& where) {
  if (n_layers > kMaxLayers) {
    return Error("%s: block count %lld is too large (at most %lld)", where.c_str(),
                 (long long)n_layers, (long long)kMaxLayers);
  }
  if (n_layers <= 0) return Error("%s: block count %lld is invalid", where.c_str(), (long long)n_layers);
  return Status::Ok();
}

Status ModelConfig::Validate() const {
  auto positive = [](int64_t v) { return v > 0 && v < (int64_t(1) << 31); };
  auto value = [](int64_t v) { return (long long)v; };
  if (!positive(n_vocab)) return Error("vocabulary size %lld is invalid", value(n_vocab));
  if (!positive(dim)) return Error("embedding length %lld is invalid", value(dim));
  if (n_layers > kMaxLayers) return Error("block count %lld is too large", value(n_layers));
  if (!positive(n_layers)) return Error("block count %lld is invalid", value(n_layers));
  if (!positive(n_heads)) return Error("head count %lld is invalid", value(n_heads));
  if (!positive(n_kv_heads) || n_heads % n_kv_heads != 0) {
    return Error("kv head count %lld does not divide head count %lld", value(n_kv_heads),
                 value(n_heads));
  }
  if (!positive(head_dim)) return Error("head dimension %lld is invalid", value(head_dim));
  if (!positive(ffn_dim)) return Error("feed-forward length %lld is invalid", value(ffn_dim));
  if (rope.dims <= 0 || rope.dims > head_dim || rope.dims % 2 != 0) {
    return Error("rope dimension count %lld is invalid for head dim %lld", value(rope.dims),
                 value(head_dim));
  }
  if (!(rope.base > 0.0f) || !std::isfinite(rope.base)) return Error("rope base must be positive");
  if (!(rope.factor > 0.0f) || !std::isfinite(rope.factor)) {
    return Error("rope scaling factor must be positive");
  }
  if (rope.scaling == RopeScalingKind::kLlama3 &&
      (!(rope.high_freq_factor > rope.low_freq_factor) || rope.original_context <= 0)) {
    return Error(
        "llama3 rope scaling needs high_freq_factor > low_freq_factor and a context length");
  }
  if (rope.scaling == RopeScalingKind::kYarn &&
      (!(rope.beta_fast > rope.beta_slow) || !(rope.beta_slow > 0.0f) ||
       !std::isfinite(rope.beta_fast) || rope.original_context <= 0)) {
    return Error(
        "yarn rope scaling needs beta_fast > beta_slow > 0 (got %g, %g) and an original context "
        "length (got %lld)",
        double(rope.beta_fast), double(rope.beta_slow), value(rope.original_context));
  }
  if (rope.scaling == RopeScalingKind::kLongRope) {
    if (rope.original_context <= 0) {
      return Error("longrope rope scaling needs an original context length (got %lld)",
                   value(rope.original_context));
    }
    const size_t n_pairs = size_t(rope.dims / 2);
    for (const auto* table : {&rope.long_factors, &rope.short_factors}) {
      const char* which = table == &rope.long_factors ? "long" : "short";
      if (table->size() != n_pairs) {
        return Error("longrope %s factors: %zu values, expected %zu (one per rotated pair)", which,
                     table->size(), n_pairs);
      }
      for (float f : *table) {
        if (!(f > 0.0f) || !std::isfinite(f)) {
          return Error("longrope %s factor %g is invalid (must be positive)", which, double(f));
        }
      }
    }
  }
  if (!(rope.attn_factor > 0.0f) || !std::isfinite(rope.attn_factor)) {
    return Error("rope attention factor %g is invalid (must be positive)",
                 double(rope.attn_factor));
  }
  if (!(expert_glu_alpha > 0.0f) || !std::isfinite(expert_glu_alpha) ||
      !(expert_glu_limit >= 0.0f) || !std::isfinite(expert_glu_limit) ||
      !std::isfinite(expert_glu_up_offset)) {
    return Error(
        "expert activation alpha %g / limit %g is invalid (alpha and limit must be "
        "positive)",
        double(expert_glu_alpha), double(expert_glu_limit));
  }
  if (!(norm_eps >= 0.0f) || !std::isfinite(norm_eps)) return Error("norm epsilon is invalid");
  if (max_context < 0) return Error("context length is negative");
  if (n_positions < 0 || n_positions > (int64_t(1) << 24)) {
    return Error("position embedding count %lld is invalid", value(n_positions));
  }
  if (n_positions > 0 && max_context > n_positions) {
    return Error("context length %lld exceeds the %lld position embeddings", value(max_context),
                 value(n_positions));
  }
  if (sliding_window < 0) return Error("sliding window %lld is negative", value(sliding_window));
  if (!sliding_layers.empty()) {
    if (sliding_layers.size() != size_t(n_layers)) {
      return Error("sliding-window pattern has %zu layers, the model %lld", sliding_layers.size(),
                   value(n_layers));
    }
    for (uint8_t slides : sliding_layers) {
      if (slides && sliding_window <= 0) {
        return Error("sliding window %lld is invalid for windowed layers (must be positive)",
                     value(sliding_window));
      }
    }
  }
  if (!std::isfinite(rope_local_base) || rope_local_base < 0.0f) {
    return Error("local rope base must be positive");
  }
  auto check_cap = [](float cap, const char* what) -> Status {
    if (!std::isfinite(cap) || cap < 0.0f) {
      return Error("%s soft-cap %g is invalid (must be positive, or 0 for none)", what, double(cap));
    }
    return Status::Ok();
  };
  PETREL_RETURN_IF_ERROR(check_cap(attn_softcap, "attention-logit"));
  PETREL_RETURN_IF_ERROR(check_cap(final_softcap, "final-logit"));
  if (!std::isfinite(attention_scale) || attention_scale < 0.0f) {
    return Error("attention scale %g is invalid", double(attention_scale));
  }
  if (!std::isfinite(embedding_scale) || !(embedding_scale > 0.0f)) {
    return Error("embedding scale %g is invalid", double(embedding_scale));
  }
  if (!std::isfinite(residual_scale) || !(residual_scale > 0.0f)) {
    return Error("residual scale %g is invalid (must be positive)", double(residual_scale));
  }
  if (!std::isfinite(logits_divisor) || !(logits_divisor > 0.0f)) {
    return Error("logits divisor %g is invalid (must be positive)", double(logits_divisor));
  }
  if (!nope_layers.empty() && nope_layers.size() != size_t(n_layers)) {
    return Error("the NoPE layer list has %zu layers, the model %lld", nope_layers.size(),
                 value(n_layers));
  }
  if (n_experts < 0 || n_experts > 4096) {
    return Error("expert count %lld is invalid", value(n_experts));
  }
  if (n_experts > 0) {
    if (n_experts_used <= 0 || n_experts_used > n_experts) {
      return Error("experts used per token %lld is invalid for %lld experts (must be 1..%lld)",
                   value(n_experts_used), value(n_experts), value(n_experts));
    }
    if (!positive(expert_ffn_dim)) {
      return Error("expert feed-forward length %lld is invalid", value(expert_ffn_dim));
    }
    if (n_expert_groups <= 0 || n_expert_groups > n_experts || n_experts % n_expert_groups != 0) {
      return Error("expert group count %lld does not divide the %lld experts", value(n_expert_groups),
                   value(n_experts));
    }
    if (n_expert_groups_used <= 0 || n_expert_groups_used > n_expert_groups) {
      return Error("expert groups used %lld is invalid for %lld groups (must be 1..%lld)",
                   value(n_expert_groups_used), value(n_expert_groups), value(n_expert_groups));
    }
    if (n_expert_groups > 1 && expert_group_score == MoeGroupScore::kTopTwoSum &&
        n_experts / n_expert_groups < 2) {
      return Error("expert groups of %lld expert cannot be scored by their two best",
                   value(n_experts / n_expert_groups));
    }
    if (n_experts_used > n_experts / n_expert_groups * n_expert_groups_used) {
      return Error("experts used per token %lld exceed the %lld experts of the %lld groups used",
                   value(n_experts_used), value(n_experts / n_expert_groups * n_expert_groups_used),
                   value(n_expert_groups_used));
    }
    if (!std::isfinite(expert_weights_scale) || !(expert_weights_scale > 0.0f)) {
      return Error("expert weights scale %g is invalid", double(expert_weights_scale));
    }
    if (n_shared_experts < 0 || n_shared_experts > 4096) {
      return Error("shared expert count %lld is invalid", value(n_shared_experts));
    }
  }
  if (n_dense_layers < 0 || n_dense_layers > n_layers) {
    return Error("leading dense block count %lld is invalid for %lld blocks", value(n_dense_layers),
                 value(n_layers));
  }
  if (q_lora_rank < 0 || q_lora_rank > (int64_t(1) << 20)) {
    return Error("q lora rank %lld is invalid", value(q_lora_rank));
  }
  if (mla()) {
    if (kv_lora_rank > (int64_t(1) << 20)) {
      return Error("kv lora rank %lld is invalid", value(kv_lora_rank));
    }
    if (!positive(qk_nope_dim) || !positive(v_head_dim) || qk_nope_dim + rope.dims != head_dim) {
      return Error("latent attention heads are invalid: nope %lld + rope %lld must make the key "
                   "head of %lld, and value heads (%lld) must be positive",
                   value(qk_nope_dim), value(rope.dims), value(head_dim), value(v_head_dim));
    }
  }
  return Status::Ok();
}

const char* PoolingName(PoolingKind pooling) {
  switch (pooling) {
    case PoolingKind::kUnset: return "unset";
    case PoolingKind::kNone: return "none";
    case PoolingKind::kMean: return "mean";
    case PoolingKind::kCls: return "cls";
    case PoolingKind::kLast: return "last";
  }
  return "?";
}

Result<PoolingKind> ParsePooling(std::string_view name) {
  for (PoolingKind kind :
       {PoolingKind::kNone, PoolingKind::kMean, PoolingKind::kCls, PoolingKind::kLast}) {
    if (name == PoolingName(kind)) return kind;
  }
  return Error("pooling '%.*s' is not known (none, mean, cls, last)", int(name.size()),
               name.data());
}

Result<PoolingKind> PoolingFromGguf(uint64_t value) {
  switch (value) {
    case 0: return PoolingKind::kNone;
    case 1: return PoolingKind::kMean;
    case 2: return PoolingKind::kCls;
    case 3: return PoolingKind::kLast;
    case 4: return Error("pooling type 4 (rank, a reranker's score) is not supported");
    default: break;
  }
  return Error("pooling type %llu is not known (0 none, 1 mean, 2 cls, 3 last)",
               (unsigned long long)value);
}

std::string ModelConfig::Summary() const {
  char buffer[768];
  std::snprintf(buffer, sizeof(buffer),
                "architecture     %s\n"
                "vocabulary       %lld\n"
                "embedding        %lld\n"
                "layers           %lld\n"
                "heads            %lld (kv %lld, head dim %lld)\n"
                "feed-forward     %lld\n"
                "context          %lld%s\n"
                "rms norm eps     %g\n"
                "rope             base %g, dims %lld, %s, scaling %s x%g\n"
                "tied embeddings  %s\n"
                "qkv bias         %s\n",
                architecture.c_str(), (long long)n_vocab, (long long)dim, (long long)n_layers,
                (long long)n_heads, (long long)n_kv_heads, (long long)head_dim, (long long)ffn_dim,
                (long long)max_context, sliding_window ? " (sliding window)" : "", double(norm_eps),
                double(rope.base), (long long)rope.dims,
                rope.style == RopeStyle::kInterleaved ? "interleaved pairs" : "half-split",
                rope.scaling == RopeScalingKind::kNone     ? "none"
                : rope.scaling == RopeScalingKind::kLinear ? "linear"
                : rope.scaling == RopeScalingKind::kLlama3 ? "llama3"
                : rope.scaling == RopeScalingKind::kYarn   ? "yarn"
                                                           : "longrope",
                double(rope.factor), tied_embeddings ? "yes" : "no", qkv_bias ? "yes" : "no");
  std::string summary = buffer;
  // The variants of the other families, only when present.
  if (sliding_window > 0) {
    size_t windowed = 0;
    for (int64_t l = 0; l < n_layers; ++l) windowed += LayerSlides(l);
    std::snprintf(buffer, sizeof(buffer), "sliding window   %lld tokens on %zu of %lld layers\n",
                  (long long)sliding_window, windowed, (long long)n_layers);
    summary += buffer;
  }
  if (rope.scaling == RopeScalingKind::kYarn) {
    std::snprintf(buffer, sizeof(buffer),
                  "yarn             original context %lld, beta %g/%g, %s range, attention "
                  "factor %g\n",
                  (long long)rope.original_context, double(rope.beta_fast), double(rope.beta_slow),
                  rope.yarn_truncate ? "rounded" : "unrounded", double(rope.attn_factor));
    summary += buffer;
  }
  if (rope.scaling == RopeScalingKind::kLongRope) {
    std::snprintf(buffer, sizeof(buffer),
                  "longrope         original context %lld, %s factors in use, attention factor "
                  "%g\n",
                  (long long)rope.original_context,
                  rope.freq_factors == rope.long_factors ? "long" : "short",
                  double(rope.attn_factor));
    summary += buffer;
  }
  if (!nope_layers.empty()) {
    std::string layers;
    for (size_t l = 0; l < nope_layers.size(); ++l) {
      if (!nope_layers[l]) continue;
      if (!layers.empty()) layers += ',';
      layers += std::to_string(l);
    }
    std::snprintf(buffer, sizeof(buffer), "nope layers      %s of %lld (no rope)\n",
                  layers.empty() ? "none" : layers.c_str(), (long long)n_layers);
    summary += buffer;
  }
  if (norms_after_sublayers) {
    summary += "block norms      after attention and FFN (post-norm)\n";
  }
  if (residual_scale != 1.0f || logits_divisor != 1.0f) {
    std::snprintf(buffer, sizeof(buffer), "residual scale   x%g, logits divided by %g\n",
                  double(residual_scale), double(logits_divisor));
    summary += buffer;
  }
  if (expert_glu_limit > 0.0f || expert_glu_alpha != 1.0f || expert_glu_up_offset != 0.0f) {
    std::snprintf(buffer, sizeof(buffer),
                  "expert glu       clamped at %g, sigmoid(%g x), up + %g\n",
                  double(expert_glu_limit), double(expert_glu_alpha), double(expert_glu_up_offset));
    summary += buffer;
  }
  if (rope_local_base > 0.0f) {
    std::snprintf(buffer, sizeof(buffer), "local rope       base %g (windowed layers, no scaling)\n",
                  double(rope_local_base));
    summary += buffer;
  }
  if (n_experts > 0) {
    std::snprintf(buffer, sizeof(buffer),
                  "experts          %lld of width %lld, %lld per token, weights %s\n",
                  (long long)n_experts, (long long)expert_ffn_dim, (long long)n_experts_used,
                  expert_weights_norm ? "renormalised" : "as routed");
    summary += buffer;
  }
  if (mla()) {
    std::snprintf(buffer, sizeof(buffer),
                  "latent attention q rank %lld%s, kv rank %lld, heads nope %lld + rope %lld, "
                  "value %lld; KV row %lld elements\n",
                  (long long)q_lora_rank, q_lora_rank == 0 ? " (direct q)" : "",
                  (long long)kv_lora_rank, (long long)qk_nope_dim, (long long)rope.dims,
                  (long long)v_head_dim, (long long)kv_row_elems());
    summary += buffer;
  }
  if (n_experts > 0 && (n_dense_layers > 0 || n_shared_experts > 0 || n_expert_groups > 1 ||
                        expert_gating != MoeGating::kSoftmax || expert_weights_scale != 1.0f)) {
    std::snprintf(buffer, sizeof(buffer),
                  "expert routing   %s, groups %lld (%lld used), scale %g, %lld shared, first "
                  "%lld blocks dense\n",
                  expert_gating == MoeGating::kSigmoid ? "sigmoid" : "softmax",
                  (long long)n_expert_groups, (long long)n_expert_groups_used,
                  double(expert_weights_scale), (long long)n_shared_experts,
                  (long long)n_dense_layers);
    summary += buffer;
  }
  if (attn_softcap > 0.0f || final_softcap > 0.0f) {
    std::snprintf(buffer, sizeof(buffer), "soft-caps        attention %g, final %g\n",
                  double(attn_softcap), double(final_softcap));
    summary += buffer;
  }
  if (!causal_attention || n_positions > 0 || embeddings_only ||
      pooling != PoolingKind::kUnset) {
    std::snprintf(buffer, sizeof(buffer),
                  "encoder          attention %s, %s, %s, pooling %s\n",
                  causal_attention ? "causal" : "bidirectional",
                  n_positions > 0 ? "learned positions" : "rope",
                  embeddings_only ? "embeddings only" : "output head", PoolingName(pooling));
    summary += buffer;
  }
  if (embedding_scale != 1.0f || attention_scale > 0.0f || qk_norm) {
    std::snprintf(buffer, sizeof(buffer),
                  "scales           embedding x%g, attention %g, q/k norm %s\n",
                  double(embedding_scale),
                  double(attention_scale > 0.0f ? attention_scale : 1.0f / std::sqrt(float(head_dim))),
                  qk_norm ? "yes" : "no");
    summary += buffer;
  }
  return summary;
}

}  // namespace petrel
