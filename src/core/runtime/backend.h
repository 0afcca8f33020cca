// The backend interface: memory, weights and op execution for one device. The CPU and `ref`
// backends implement it on host memory; a GPU backend implements the same calls on its own.
//
// The core never dereferences backend memory: it names a place as (buffer, offset) and moves
// bytes with copies that return a Status and may run asynchronously until Synchronize(). A batch
// is one BeginBatch (the backend takes the batch's host data: token ids, positions, block
// tables, KV slots), the nodes placed on the backend recorded in order with Run, and Submit; a
// host backend simply runs each node as it comes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/base/tensor.h"
#include "core/graph/graph.h"  // Node

namespace petrel {

// Memory owned by a backend, addressed by offsets. Only the owning backend knows what is behind
// it (a host allocation, a device buffer).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  virtual size_t bytes() const = 0;
  // The bytes where the CPU reads them in place (host memory), or null (device memory).
  virtual const uint8_t* host_bytes() const { return nullptr; }
};

// Device time of one op kind, summed over the nodes a backend ran since profiling was last read.
struct OpProfile {
  OpKind op = OpKind::kAdd;
  size_t calls = 0;
  double seconds = 0.0;
};

// A value (an f32 activation matrix) in a backend's memory.
struct ValueView {
  BackendBuffer* buffer = nullptr;
  size_t offset = 0;   // bytes from the buffer's start
  TensorDesc desc;     // F32 {cols, rows}
};

// One layer's paged K/V storage: (n_blocks, block_tokens, row_elems) elements each for K and V
// (rows of Q8_0 are RowBytes(kQ8_0, row_elems) bytes), on the layer's backend.
struct KvLayerView {
  BackendBuffer* k = nullptr;
  BackendBuffer* v = nullptr;
  DType dtype = DType::kF32;  // kF32, kF16 or kQ8_0
  size_t block_tokens = 0;
  size_t row_elems = 0;       // n_kv_heads * head_dim
};

// Host-side facts about a batch, computed once per batch by the engine and handed to every
// backend that runs part of it (a device backend uploads them once, in BeginBatch). All arrays
// stay valid until the batch is submitted.
struct BatchContext {
  size_t n_tokens = 0;
  const int32_t* tokens = nullptr;     // (n_tokens)
  const int32_t* positions = nullptr;  // (n_tokens)
  // Sequences in the batch: token t belongs to sequence token_seq[t] (0 .. n_seqs-1, tokens of
  // one sequence consecutive), whose block table is
  // block_tables[block_table_begin[s] .. block_table_begin[s + 1]), blocks in position order.
  size_t n_seqs = 0;
  const int32_t* token_seq = nullptr;          // (n_tokens)
  const int32_t* block_tables = nullptr;       // (block_table_begin[n_seqs])
  const int32_t* block_table_begin = nullptr;  // (n_seqs + 1)
  // Per token: the positions it attends (its position + 1) and the flat KV slot
  // (block * block_tokens + offset) its K/V go to.
  const int32_t* n_ctx = nullptr;    // (n_tokens)
  const int32_t* kv_slot = nullptr;  // (n_tokens)
  size_t max_ctx = 0;                // max of n_ctx and n_ctx_all (scratch sizing)
  // Per token: the positions a bidirectional query attends, its sequence's length once the
  // batch is written (attention with AttentionParams::causal false).
  const int32_t* n_ctx_all = nullptr;  // (n_tokens)
  // Rows kept for the output head (tokens whose logits are wanted).
  const int32_t* selected_rows = nullptr;  // (n_selected)
  size_t n_selected = 0;
  // Per-row scales read by scale_rows nodes: vector v is row_scales[v * n_tokens ..
  // (v + 1) * n_tokens) (one per LoRA adapter, each token's sequence's scale of it).
  const float* row_scales = nullptr;  // (n_row_scales, n_tokens)
  size_t n_row_scales = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* Name() const = 0;
  virtual BackendId id() const = 0;

  // Whether this backend can run `node`: its op, its weight type, its parameters (a soft-cap or
  // window the kernels lack). The engine places a layer with an unsupported node on the CPU.
  virtual bool Supports(const Node& node) const = 0;
  // Whether attention can keep its KV cache in this element type.
  virtual bool SupportsKv(DType type) const = 0;
  // The element type a mat_mul with `weight_type` weights rounds its activations to before
  // multiplying (kF32: none; a block format's 8-bit blocks; kBF16 for float weights on the
  // CPU's `--bf16-dot`): what a reference must allow for.
  virtual DType MatMulActivationType(DType /*weight_type*/) const { return DType::kF32; }

  // Memory. Contents are unspecified until written.
  virtual Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) = 0;
  // Makes a host-resident weight usable here, once, at load. Host backends return the view
  // unchanged, so the bytes stay in the memory-mapped file; device backends upload it into
  // memory they own and return a view whose `data` only they interpret.
  virtual Result<TensorView> PrepareWeight(const TensorView& host_view) = 0;

  // Copies. They may be asynchronous: the host memory must stay valid (and, for CopyFromHost,
  // unchanged) until Synchronize() returns, and a copy is ordered after the work submitted
  // before it.
  virtual Status CopyToHost(const BackendBuffer& src, size_t src_offset, void* host_dst,
                            size_t bytes) = 0;
  virtual Status CopyFromHost(const void* host_src, BackendBuffer& dst, size_t dst_offset,
                              size_t bytes) = 0;
  virtual Status CopyWithin(const BackendBuffer& src, size_t src_offset, BackendBuffer& dst,
                            size_t dst_offset, size_t bytes) = 0;
  // Into another backend's memory. The default stages through host memory; backends that can
  // reach each other directly override it.
  virtual Status CopyToBackend(const BackendBuffer& src, size_t src_offset, Backend& dst_backend,
                               BackendBuffer& dst, size_t dst_offset, size_t bytes);
  // Waits for every copy and every submitted batch.
  virtual Status Synchronize() = 0;

  // One batch: BeginBatch, then Run for each of the backend's nodes in graph order (`values[v]`
  // is value v on this backend, bound for the node's inputs and output; `kv` is the node's layer
  // storage, for attention only). Submit hands what was recorded since the last Submit to the
  // device: the executor calls it before another backend reads a value made here and at the end
  // of the batch, so a batch may be submitted in several segments. Results are complete after
  // Synchronize().
  virtual Status BeginBatch(const BatchContext& batch) = 0;
  virtual Status Run(const Node& node, const ValueView* values, const KvLayerView* kv) = 0;
  virtual Status Submit() = 0;

  // Device memory this backend can still allocate, for `--gpu-layers auto`; 0 for host
  // backends, whose limit is the process's (the engine's memory plan checks that).
  virtual size_t FreeMemory() const { return 0; }
  // Bytes of device memory holding the weights PrepareWeight made here, as allocated (0 for
  // host backends, which keep the mapped views): what the memory plan's weight bytes of this
  // device are checked against.
  virtual size_t WeightBytes() const { return 0; }
  // Per-op device time (`--profile`): measured from the next batch on when enabled, read and
  // reset by TakeProfile(). Backends that cannot time their work return nothing.
  virtual void EnableProfiling(bool /*enabled*/) {}
  virtual std::vector<OpProfile> TakeProfile() { return {}; }

 private:
  std::vector<uint8_t> staging_;  // CopyToBackend's default path
};

}  // namespace petrel
