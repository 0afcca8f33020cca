// TensorDesc helpers.
#include "core/base/tensor.h"

namespace petrel {

std::string TensorDesc::ShapeString() const {
  std::string out = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i) out += ", ";
    out += std::to_string(ne[size_t(i)]);
  }
  return out + "]";
}

}  // namespace petrel
