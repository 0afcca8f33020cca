// TensorDesc (type + shape) and TensorView (desc + borrowed data + the backend that holds it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace petrel {

constexpr int kMaxDims = 4;

// Shapes use GGUF order: ne[0] is the innermost (contiguous) dimension, so a weight matrix of a
// layer mapping `in` to `out` features is {ne[0] = in, ne[1] = out}, one output row per ne[1].
// Safetensors' row-major [out, in] is the same memory layout.
struct TensorDesc {
  DType dtype = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> ne = {1, 1, 1, 1};

  static TensorDesc Make(DType dtype, std::initializer_list<int64_t> dims) {
    TensorDesc desc;
    desc.dtype = dtype;
    for (int64_t d : dims) desc.ne[size_t(desc.n_dims++)] = d;
    return desc;
  }
  int64_t n_elems() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes of one row of ne[0] elements; callers validate divisibility at load.
  size_t row_bytes() const {
    const DTypeTraits& t = Traits(dtype);
    return size_t(ne[0] / t.block_elems) * t.block_bytes;
  }
  size_t bytes() const { return row_bytes() * size_t(n_rows()); }
  std::string ShapeString() const;  // "[128, 2048]"
  bool SameShape(const TensorDesc& other) const { return n_dims == other.n_dims && ne == other.ne; }
};

// Index of a backend in the registry (0 is always the CPU backend).
using BackendId = int;

// A borrowed view: the bytes belong to a mapped file, a KV cache, or a backend buffer.
struct TensorView {
  TensorDesc desc;
  void* data = nullptr;
  BackendId backend = 0;

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // Row `r` of a 2-D+ tensor.
  void* row(int64_t r) const { return static_cast<char*>(data) + size_t(r) * desc.row_bytes(); }
};

}  // namespace petrel
