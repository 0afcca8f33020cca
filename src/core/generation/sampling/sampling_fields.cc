// The sampling field table, and the checks every reader of it shares.
#include "core/generation/sampling/sampling_fields.h"

#include <cmath>
#include <cstdio>

namespace petrel {
namespace {

constexpr double kMaxWindow = 1 << 20;  // token counts: top_k and the look-back windows
constexpr int64_t kMirostatChoices[] = {0, 2};

using P = SamplingParams;

// A row of a float member; `lo_open`: (lo, hi].
constexpr SamplingField Real(const char* name, const char* flag, const char* help, double lo,
                             double hi, bool lo_open, float P::*member,
                             const char* needs = nullptr) {
  return SamplingField{name, flag, help, lo, hi, lo_open, member, nullptr, {}, needs};
}

constexpr SamplingField Int(const char* name, const char* flag, const char* help, double lo,
                            double hi, int32_t P::*member, const char* needs = nullptr,
                            std::span<const int64_t> choices = {}) {
  return SamplingField{name, flag, help, lo, hi, false, nullptr, member, choices, needs};
}

const SamplingField kFields[] = {
    Real("temperature", "--temp", "temperature; 0 = greedy (default 0.8)", 0, 100, false,
         &P::temperature),
    Int("top_k", "--top-k", "top-k (default 40; 0 = off)", 0, kMaxWindow, &P::top_k),
    Real("top_p", "--top-p", "top-p (default 0.95; 1 = off)", 0, 1, true, &P::top_p),
    Real("min_p", "--min-p", "min-p (default 0.05; 0 = off)", 0, 1, false, &P::min_p),
    Real("typical_p", "--typical", "typical-p (default 1 = off)", 0, 1, true, &P::typical_p),
    Real("top_n_sigma", "--top-n-sigma",
         "top-n-sigma: keep the logits within n standard deviations of the largest (default -1 = "
         "off)",
         -1, 100, false, &P::top_n_sigma),
    Real("dynatemp_range", "--dynatemp-range", "dynamic temperature range (default 0 = off)", 0,
         100, false, &P::dynatemp_range),
    Real("dynatemp_exponent", "--dynatemp-exp", "dynamic temperature exponent (default 1)", 0, 100,
         false, &P::dynatemp_exponent, "dynatemp_range"),
    Real("xtc_probability", "--xtc-probability", "XTC probability (default 0 = off)", 0, 1, false,
         &P::xtc_probability),
    Real("xtc_threshold", "--xtc-threshold", "XTC threshold (default 0.1)", 0, 1, false,
         &P::xtc_threshold, "xtc_probability"),
    Real("repeat_penalty", "--repeat-penalty", "repetition penalty (default 1 = off)", 0, 10, true,
         &P::repeat_penalty),
    Int("repeat_last_n", "--repeat-last-n", "penalty window (default 64; -1 = all)", -1, kMaxWindow,
        &P::penalty_last_n),
    Real("presence_penalty", "--presence-penalty", "presence penalty (default 0)", -2, 2, false,
         &P::presence_penalty),
    Real("frequency_penalty", "--frequency-penalty", "frequency penalty (default 0)", -2, 2, false,
         &P::frequency_penalty),
    Real("dry_multiplier", "--dry-multiplier", "DRY multiplier (default 0 = off)", 0, 100, false,
         &P::dry_multiplier),
    Real("dry_base", "--dry-base", "DRY base (default 1.75)", 1, 100, false, &P::dry_base,
         "dry_multiplier"),
    Int("dry_allowed_length", "--dry-allowed-length", "DRY allowed length (default 2)", 0,
        kMaxWindow, &P::dry_allowed_length, "dry_multiplier"),
    Int("dry_penalty_last_n", "--dry-penalty-last-n", "DRY window (default -1 = all)", -1,
        kMaxWindow, &P::dry_penalty_last_n, "dry_multiplier"),
    Int("mirostat", "--mirostat", "mirostat: 0 off (default), 2 mirostat v2", 0, 2, &P::mirostat,
        nullptr, kMirostatChoices),
    Real("mirostat_tau", "--mirostat-ent", "mirostat target entropy tau (default 5)", 0, 100, true,
         &P::mirostat_tau, "mirostat"),
    Real("mirostat_eta", "--mirostat-lr", "mirostat learning rate eta (default 0.1)", 0, 1, true,
         &P::mirostat_eta, "mirostat"),
};

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

double Value(const SamplingField& field, const SamplingParams& params) {
  return field.real ? double(params.*field.real) : double(params.*field.integer);
}

}  // namespace

std::span<const SamplingField> SamplingFields() { return kFields; }

const SamplingField* FindSamplingField(const std::string& name) {
  for (const SamplingField& field : kFields) {
    if (name == field.name) return &field;
  }
  return nullptr;
}

std::string SamplingRangeText(const SamplingField& field) {
  if (!field.choices.empty()) {
    std::string list;
    for (const int64_t choice : field.choices) {
      list += (list.empty() ? "" : ", ") + std::to_string(choice);
    }
    return "one of " + list;
  }
  std::string range(1, field.lo_open ? '(' : '[');
  range += Number(field.lo);
  range += ", ";
  range += Number(field.hi);
  return range + "]";
}

Status CheckSamplingValue(const SamplingField& field, double value) {
  if (!std::isfinite(value)) return Error("%s must be a finite number", field.name);
  if (field.integer && value != std::floor(value)) {
    return Error("%s must be an integer", field.name);
  }
  const bool above_lo = field.lo_open ? value > field.lo : value >= field.lo;
  bool fits = above_lo && value <= field.hi;
  if (!field.choices.empty()) {
    fits = false;
    for (const int64_t choice : field.choices) fits = fits || value == double(choice);
  }
  if (!fits) {
    return Error("%s is %s, outside %s", field.name, Number(value).c_str(),
                 SamplingRangeText(field).c_str());
  }
  return Status::Ok();
}

void SetSamplingValue(const SamplingField& field, double value, SamplingParams* params) {
  if (field.real) {
    params->*field.real = float(value);
  } else {
    params->*field.integer = int32_t(value);
  }
}

bool SamplingStageOn(const SamplingField& field, const SamplingParams& params) {
  if (!field.needs) return true;
  const SamplingField* stage = FindSamplingField(field.needs);
  return stage && Value(*stage, params) != 0.0;
}

Status CheckSamplingParams(const SamplingParams& params) {
  for (const SamplingField& field : kFields) {
    PETREL_RETURN_IF_ERROR(CheckSamplingValue(field, Value(field, params)));
  }
  if (params.dry_sequence_breakers.size() > kMaxDrySequenceBreakers) {
    return Error("dry_sequence_breakers has more than %zu entries", kMaxDrySequenceBreakers);
  }
  for (const std::string& breaker : params.dry_sequence_breakers) {
    if (breaker.empty() || breaker.size() > kMaxDrySequenceBreakerBytes) {
      return Error("each of dry_sequence_breakers must be 1 to %zu bytes",
                   kMaxDrySequenceBreakerBytes);
    }
  }
  return Status::Ok();
}

}  // namespace petrel
