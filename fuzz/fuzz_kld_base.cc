// Fuzz target: a KL-divergence base file (`petrel perplexity --kl-divergence-base`), opened
// (KldBaseReader::Open: magic, version, header, size) and read position by position as
// `--kl-divergence` reads it. Each position that reads must be a distribution: finite
// log-probabilities, none above 0, whose probabilities sum to 1.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/eval/kld_base_file.h"
#include "input_file.h"

namespace {

constexpr int kMaxPositions = 64;  // enough to reach every code path of a record

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  fuzz::InputFile input(data, size);
  if (!input.ok()) return 0;
  auto reader = KldBaseReader::Open(input.path());
  if (!reader.ok()) return fuzz::Refused(reader.status());
  (void)reader->plan();
  KldBaseRecord record;
  for (int position = 0; position < kMaxPositions; ++position) {
    if (!reader->Next(&record).ok()) break;
    double mass = 0;
    for (float log_prob : record.log_probs) {
      if (!std::isfinite(log_prob) || log_prob > 1e-3f) {
        std::fprintf(stderr, "fuzz_kld_base: position %d: log-probability %g accepted\n", position,
                     log_prob);
        std::abort();
      }
      mass += std::exp(double(log_prob));
    }
    if (std::fabs(mass - 1.0) > 1e-3) {
      std::fprintf(stderr, "fuzz_kld_base: position %d: probabilities sum to %g\n", position, mass);
      std::abort();
    }
  }
  return 0;
}
