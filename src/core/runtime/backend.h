// The backend interface: memory, weights and op execution for one device. The CPU backend
// implements it first; `ref` (scalar kernels) proves the seams; Vulkan/CUDA plug in the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/graph/graph.h"   // Node
#include "core/base/status.h"
#include "core/base/tensor.h"
#include "cpu/kernel_table.h"  // PagedKvView

namespace petrel {

// Host-side facts about the batch that ops need, computed once per batch by the engine.
struct BatchContext {
  size_t n_tokens = 0;
  const int32_t* tokens = nullptr;         // (n_tokens)
  const float* rope_cos = nullptr;         // (n_tokens, rope_pairs)
  const float* rope_sin = nullptr;         // (n_tokens, rope_pairs)
  size_t rope_pairs = 0;
  // Attention, per token: its sequence's block table, the number of positions it attends
  // (its position + 1) and the flat KV slot (block * block_tokens + offset) its K/V go to.
  const int32_t* const* block_tables = nullptr;
  const int32_t* n_ctx = nullptr;
  const int32_t* kv_slot = nullptr;
  size_t max_ctx = 0;                      // max of n_ctx (scratch sizing)
  // Rows kept for the output head (tokens whose logits are wanted).
  const int32_t* selected_rows = nullptr;
  size_t n_selected = 0;
  // Shapes the attention op needs.
  size_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  size_t rope_dims = 0;
  RopeStyle rope_style = RopeStyle::kInterleaved;
};

// Memory owned by a backend. For host backends `data` is a host pointer.
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* Name() const = 0;
  virtual BackendId id() const = 0;
  // Whether matmul can use weights of this type / attention can use a KV cache of this type.
  virtual bool SupportsWeight(DType type) const = 0;
  virtual bool SupportsKv(DType type) const = 0;

  virtual Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) = 0;
  // Makes a host-resident weight usable here. Host backends return it unchanged, so the bytes
  // stay in the memory-mapped file; device backends upload into memory they own.
  virtual Result<TensorView> PrepareWeight(const TensorView& host_view) = 0;
  // Moves activation bytes between this backend's memory and the host.
  virtual void CopyToHost(const void* src, void* host_dst, size_t bytes) = 0;
  virtual void CopyFromHost(const void* host_src, void* dst, size_t bytes) = 0;

  // Runs one node. `values[v]` is value v's view on this backend (only the node's inputs and
  // output are bound); `kv` is the node's layer KV storage (attention only).
  virtual Status Run(const Node& node, const TensorView* values, const PagedKvView* kv,
                     const BatchContext& batch) = 0;
};

}  // namespace petrel
