// Registration and parsing of the sampling flags.
#include "tools/sampling_options.h"

#include <cmath>
#include <cstdlib>

namespace petrel::tools {

void SamplingOptions::AddTo(CLI::App& app) {
  SamplingParams& s = generate.sampling;
  app.add_option("-n,--n-predict", generate.max_new_tokens, "tokens to generate (default 64)");
  app.add_option("--min-tokens", generate.min_new_tokens, "generate at least this many tokens");
  app.add_flag("--ignore-eos", generate.ignore_eos, "never stop at end-of-generation tokens");
  app.add_option("--stop", generate.stop, "stop string (repeatable); not included in the output");
  app.add_option("--temp", s.temperature, "temperature; 0 = greedy (default 0.8)");
  app.add_option("--top-k", s.top_k, "top-k (default 40; 0 = off)");
  app.add_option("--top-p", s.top_p, "top-p (default 0.95; 1 = off)");
  app.add_option("--min-p", s.min_p, "min-p (default 0.05; 0 = off)");
  app.add_option("--typical", s.typical_p, "typical-p (default 1 = off)");
  app.add_option("--dynatemp-range", s.dynatemp_range, "dynamic temperature range (default 0 = off)");
  app.add_option("--dynatemp-exp", s.dynatemp_exponent, "dynamic temperature exponent (default 1)");
  app.add_option("--xtc-probability", s.xtc_probability, "XTC probability (default 0 = off)");
  app.add_option("--xtc-threshold", s.xtc_threshold, "XTC threshold (default 0.1)");
  app.add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (default 1 = off)");
  app.add_option("--repeat-last-n", s.penalty_last_n, "penalty window (default 64; -1 = all)");
  app.add_option("--presence-penalty", s.presence_penalty, "presence penalty (default 0)");
  app.add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty (default 0)");
  app.add_option("--dry-multiplier", s.dry_multiplier, "DRY multiplier (default 0 = off)");
  app.add_option("--dry-base", s.dry_base, "DRY base (default 1.75)");
  app.add_option("--dry-allowed-length", s.dry_allowed_length, "DRY allowed length (default 2)");
  app.add_option("--dry-penalty-last-n", s.dry_penalty_last_n, "DRY window (default -1 = all)");
  app.add_option("--mirostat", s.mirostat, "mirostat: 0 off, 2 mirostat v2");
  app.add_option("--mirostat-ent", s.mirostat_tau, "mirostat target entropy tau (default 5)");
  app.add_option("--mirostat-lr", s.mirostat_eta, "mirostat learning rate eta (default 0.1)");
  app.add_option("--samplers", samplers, "stage order, e.g. penalties;top_k;top_p;temperature");
  app.add_option("-l,--logit-bias", logit_bias, "TOKEN+BIAS or TOKEN-BIAS (repeatable; -inf bans)");
  app.add_option("--seed", s.seed, "random seed (default 0)");
  app.add_option("--n-probs", s.n_probs, "report the N most likely tokens at each step (--json)");
}

Result<GenerateOptions> SamplingOptions::ToGenerateOptions() const {
  GenerateOptions options = generate;
  if (!samplers.empty()) {
    auto order = ParseSamplerOrder(samplers);
    if (!order.ok()) return order.status().Wrap("--samplers");
    options.sampling.order = *order;
  }
  for (const std::string& item : logit_bias) {
    const size_t sign = item.find_first_of("+-", 1);
    char* end = nullptr;
    const long long token = std::strtoll(item.substr(0, sign).c_str(), &end, 10);
    if (sign == std::string::npos || *end != '\0' || token < 0) {
      return Error("--logit-bias '%s': expected TOKEN+BIAS or TOKEN-BIAS", item.c_str());
    }
    const std::string value = item.substr(sign);
    float bias;
    if (value == "-inf") {
      bias = -INFINITY;
    } else {
      bias = std::strtof(value.c_str(), &end);
      if (*end != '\0' || !std::isfinite(bias)) return Error("--logit-bias '%s': bad bias", item.c_str());
    }
    options.sampling.logit_bias[int32_t(token)] = bias;
  }
  return options;
}

}  // namespace petrel::tools
