// Fuzz target: an importance-matrix file (ReadImatrix), in either layout (GGUF, or llama.cpp's
// legacy .dat), then each entry's importance per matrix, which a quantization reads: a file
// that loads must give finite, non-negative importances of the stated width.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/eval/imatrix_file.h"
#include "input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  fuzz::InputFile input(data, size);
  if (!input.ok()) return 0;
  auto imatrix = ReadImatrix(input.path());
  if (!imatrix.ok()) return fuzz::Refused(imatrix.status());
  for (const auto& [name, entry] : imatrix->entries) {
    for (size_t mat = 0; mat < entry.n_mat(); ++mat) {
      const std::vector<float> importance = entry.Importance(mat);
      if (int64_t(importance.size()) != entry.n_in) std::abort();
      for (float value : importance) {
        if (!std::isfinite(value) || value < 0) {
          std::fprintf(stderr, "fuzz_imatrix: %s: importance %g accepted\n", name.c_str(), value);
          std::abort();
        }
      }
    }
  }
  return 0;
}
