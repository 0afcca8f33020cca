// The tunable numbers of SamplingParams as one table: each row's request field name, CLI flag,
// range and help. `petrel run`/`chat` build their flags from it and `petrel serve` reads its
// request fields through it, so a stage's name and the values it accepts are the same everywhere.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/base/status.h"
#include "core/generation/sampling/sampler.h"  // SamplingParams

namespace petrel {

struct SamplingField {
  const char* name;  // the request field ("typical_p"), llama.cpp's where it has one
  const char* flag;  // the CLI flag ("--typical"), with its short alias where there is one
  const char* help;  // --help text, default included
  double lo, hi;     // the accepted range: [lo, hi], or (lo, hi] when `lo_open`
  bool lo_open = false;
  // Exactly one of these points at the member the row sets.
  float SamplingParams::*real = nullptr;
  int32_t SamplingParams::*integer = nullptr;
  // Integer rows whose value must be one of these (mirostat: 0 or 2); empty: any in range.
  std::span<const int64_t> choices = {};
  // The row (its `name`) whose value turns this one's stage on when not 0, nullptr when none:
  // this value alone does nothing, a warning on the command line.
  const char* needs = nullptr;
};

// Every row, in the order --help lists them.
std::span<const SamplingField> SamplingFields();
// The row of request field `name`, nullptr when there is none.
const SamplingField* FindSamplingField(const std::string& name);
// Whether `value` fits `field` (range, integrality, choices); the error says which rule
// failed and names `field.name` (the caller may rename it to a flag).
Status CheckSamplingValue(const SamplingField& field, double value);
// Sets the member of `field` in `params` (`value` passed CheckSamplingValue).
void SetSamplingValue(const SamplingField& field, double value, SamplingParams* params);
// Whether `field`'s stage is on in `params` (always true for rows without `needs`).
bool SamplingStageOn(const SamplingField& field, const SamplingParams& params);
// Every row's value in `params`, and the DRY breakers: what SamplerChain::Create checks.
Status CheckSamplingParams(const SamplingParams& params);
// "[lo, hi]" or "(lo, hi]", or "one of 0, 2".
std::string SamplingRangeText(const SamplingField& field);

// Maximum entries of `dry_sequence_breakers`, and bytes in each.
inline constexpr size_t kMaxDrySequenceBreakers = 32;
inline constexpr size_t kMaxDrySequenceBreakerBytes = 64;

}  // namespace petrel
