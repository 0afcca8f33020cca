// Comparing logits with the golden references: max |a−b|, rel RMS, top-1 agreement.
#pragma once

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace petrel::testing {

inline std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamsize bytes = in.tellg();
  std::vector<float> values(size_t(bytes) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  return values;
}

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return lines;
}

struct LogitStats {
  double max_abs = 0.0;
  double rel_rms = 0.0;
  double top1 = 0.0;  // share of rows with equal argmax

  std::string ToString() const {
    char buffer[128];
    std::snprintf(buffer, sizeof(buffer), "max abs %.3g, rel RMS %.3g, top-1 %.4f", max_abs, rel_rms, top1);
    return buffer;
  }
};

// Rows of `n_vocab` logits; `got` and `want` must have the same size.
inline LogitStats CompareLogits(const std::vector<float>& got, const std::vector<float>& want,
                                size_t n_vocab) {
  LogitStats stats;
  if (got.size() != want.size() || want.empty()) {
    stats.max_abs = INFINITY;
    stats.rel_rms = INFINITY;
    return stats;
  }
  double diff_sq = 0.0, ref_sq = 0.0;
  size_t agree = 0;
  const size_t rows = want.size() / n_vocab;
  for (size_t r = 0; r < rows; ++r) {
    size_t best_got = 0, best_want = 0;
    for (size_t i = 0; i < n_vocab; ++i) {
      const size_t k = r * n_vocab + i;
      const double d = double(got[k]) - double(want[k]);
      stats.max_abs = std::max(stats.max_abs, std::fabs(d));
      diff_sq += d * d;
      ref_sq += double(want[k]) * double(want[k]);
      if (got[k] > got[r * n_vocab + best_got]) best_got = i;
      if (want[k] > want[r * n_vocab + best_want]) best_want = i;
    }
    agree += best_got == best_want;
  }
  stats.rel_rms = std::sqrt(diff_sq / std::max(ref_sq, 1e-30));
  stats.top1 = double(agree) / double(rows);
  return stats;
}

// The tolerance rows of golden/README.md §4.
struct Tolerance {
  double max_abs, rel_rms, top1;
};
constexpr Tolerance kF32Tolerance{1e-3, 1e-5, 1.0};
constexpr Tolerance kF16Tolerance{0.05, 2e-3, 0.95};
constexpr Tolerance kBF16Tolerance{0.3, 1.5e-2, 0.90};

inline bool Within(const LogitStats& s, const Tolerance& t) {
  return s.max_abs <= t.max_abs && s.rel_rms <= t.rel_rms && s.top1 >= t.top1;
}

}  // namespace petrel::testing
