// Placement descriptions for logs and `petrel info`.
#include "core/runtime/placement.h"

namespace petrel {

std::string Placement::Describe(const std::vector<std::string>& names) const {
  // Runs of consecutive layers on one backend: "layers 0-5: cpu, layers 6-11: ref, output: cpu".
  std::string out;
  size_t start = 0;
  for (size_t l = 1; l <= layers.size(); ++l) {
    if (l == layers.size() || layers[l] != layers[start]) {
      out += out.empty() ? "" : ", ";
      out += "layers " + std::to_string(start) + "-" + std::to_string(l - 1) + ": " +
             names[size_t(layers[start])];
      start = l;
    }
  }
  out += ", output: " + names[size_t(output)];
  for (const std::string& note : notes) out += "; " + note;
  return out;
}

}  // namespace petrel
