// ModelConfig validation, summaries, and RoPE frequency computation.
#include "core/model/model_config.h"

#include <cmath>
#include <cstdio>

namespace petrel {

std::vector<double> RopeConfig::InverseFrequencies() const {
  const int64_t n_pairs = dims / 2;
  std::vector<double> inv_freq(size_t(n_pairs > 0 ? n_pairs : 0));
  for (int64_t i = 0; i < n_pairs; ++i) {
    double freq = std::pow(double(base), -2.0 * double(i) / double(dims));
    switch (scaling) {
      case RopeScalingKind::kNone:
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
    }
    if (size_t(i) < freq_factors.size()) freq /= freq_factors[size_t(i)];
    inv_freq[size_t(i)] = freq;
  }
  return inv_freq;
}

std::string ModelConfig::Validate() const {
  auto positive = [](int64_t v) { return v > 0 && v < (int64_t(1) << 31); };
  if (!positive(n_vocab)) return "vocabulary size " + std::to_string(n_vocab) + " is invalid";
  if (!positive(dim)) return "embedding length " + std::to_string(dim) + " is invalid";
  if (n_layers > 4096) return "block count " + std::to_string(n_layers) + " is too large";
  if (!positive(n_layers)) return "block count " + std::to_string(n_layers) + " is invalid";
  if (!positive(n_heads)) return "head count " + std::to_string(n_heads) + " is invalid";
  if (!positive(n_kv_heads) || n_heads % n_kv_heads != 0) {
    return "kv head count " + std::to_string(n_kv_heads) + " does not divide head count " +
           std::to_string(n_heads);
  }
  if (!positive(head_dim)) return "head dimension " + std::to_string(head_dim) + " is invalid";
  if (!positive(ffn_dim)) return "feed-forward length " + std::to_string(ffn_dim) + " is invalid";
  if (rope.dims <= 0 || rope.dims > head_dim || rope.dims % 2 != 0) {
    return "rope dimension count " + std::to_string(rope.dims) + " is invalid for head dim " +
           std::to_string(head_dim);
  }
  if (!(rope.base > 0.0f) || !std::isfinite(rope.base)) return "rope base must be positive";
  if (!(rope.factor > 0.0f) || !std::isfinite(rope.factor))
    return "rope scaling factor must be positive";
  if (rope.scaling == RopeScalingKind::kLlama3 &&
      (!(rope.high_freq_factor > rope.low_freq_factor) || rope.original_context <= 0)) {
    return "llama3 rope scaling needs high_freq_factor > low_freq_factor and a context length";
  }
  if (!(norm_eps >= 0.0f) || !std::isfinite(norm_eps)) return "norm epsilon is invalid";
  if (max_context < 0) return "context length is negative";
  return "";
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
                                                           : "llama3",
                double(rope.factor), tied_embeddings ? "yes" : "no", qkv_bias ? "yes" : "no");
  return buffer;
}

}  // namespace petrel
