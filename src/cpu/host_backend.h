// A backend whose memory is host memory and whose ops are a HostKernels table run on a thread
// pool. The CPU backend (Highway kernels) and the `ref` backend (scalar kernels) are both this.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/runtime/backend.h"
#include "cpu/attention/attention_split.h"
#include "cpu/kernel_table.h"
#include "cpu/threading/thread_pool.h"

namespace petrel {

class HostBackend final : public Backend {
 public:
  using WeightTypeFilter = bool (*)(DType);
  HostBackend(const char* name, BackendId id, const HostKernels& kernels,
              WeightTypeFilter supports_weight, size_t n_threads);

  const char* Name() const override { return name_; }
  BackendId id() const override { return id_; }
  bool Supports(const Node& node) const override;
  bool SupportsKv(DType type) const override {
    return type == DType::kF32 || type == DType::kF16 || type == DType::kQ8_0;
  }
  DType MatMulActivationType(DType weight_type) const override {
    return kernels_.activation_type ? kernels_.activation_type(weight_type) : DType::kF32;
  }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override;
  Result<TensorView> PrepareWeight(const TensorView& host_view) override;
  // Host memory: copies are memcpy and complete on return.
  Status CopyToHost(const BackendBuffer& src, size_t src_offset, void* host_dst,
                    size_t bytes) override;
  Status CopyFromHost(const void* host_src, BackendBuffer& dst, size_t dst_offset,
                      size_t bytes) override;
  Status CopyWithin(const BackendBuffer& src, size_t src_offset, BackendBuffer& dst,
                    size_t dst_offset, size_t bytes) override;
  Status Synchronize() override { return Status::Ok(); }
  // Nodes run as they come: BeginBatch keeps the batch's host arrays, Submit has nothing to do.
  Status BeginBatch(const BatchContext& batch) override;
  Status Run(const Node& node, const ValueView* values, const KvLayerView* kv) override;
  Status Submit() override { return Status::Ok(); }
  // Wall time per op kind (`petrel bench --profile`): each node runs to its end inside Run.
  void EnableProfiling(bool enabled) override { profiling_ = enabled; }
  std::vector<OpProfile> TakeProfile() override;

  // The host address of a place in one of this backend's buffers.
  static char* HostAddress(const BackendBuffer& buffer, size_t offset);
  // Host memory the caller owns, as a buffer any host backend can use in place (tests, and
  // values a caller already holds on the host).
  static std::unique_ptr<BackendBuffer> WrapHostMemory(void* data, size_t bytes);

  cpu::ThreadPool& pool() { return pool_; }
  // The split-K kernels (attention_split.h) of this backend's attention; without them each
  // row is computed whole by one item.
  void SetAttentionSplitKernels(const AttentionSplitKernels* kernels) { split_kernels_ = kernels; }
  // Shared-prefix attention (host_attention.cc, needs the split-K kernels) on or off; the same
  // bits either way.
  void SetSharedPrefixAttention(bool on) { shared_prefix_attention_ = on; }

 private:
  Status RunNode(const Node& node, const ValueView* values, const KvLayerView* kv);
  bool profiling_ = false;
  std::map<OpKind, OpProfile> profile_;

  // The activations a mat_mul reads: the f32 rows, or their copy quantized to the weights'
  // activation type (made once for consecutive mat_muls of one value).
  struct MatMulInput {
    DType type = DType::kF32;
    const void* data = nullptr;
    size_t row_bytes = 0;
  };
  MatMulInput PrepareMatMulInput(ValueId value, const TensorView& x, DType weight_type);
  // Rows [row_begin, row_end) of w (n_in columns) for all n_tokens tokens into out.
  void MatMulRows(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                  const MatMulInput& in, size_t n_tokens, const float* bias, float* out,
                  size_t out_stride, size_t row_begin, size_t row_end) const;
  void RunMatMul(const Node& node, const TensorView* values);
  void RunGatedFfn(const Node& node, const TensorView* values);
  // moe_ffn (host_moe.cc): routes, groups the tokens by expert, runs each active expert's gated
  // FFN over its tokens and sums the weighted results.
  Status RunMoeFfn(const Node& node, const TensorView* values);
  void RunRope(const Node& node, const TensorView* values);
  void RunAttention(const Node& node, const TensorView* values, const PagedKvView& kv);
  // Attention of the batch's queries q (n_tokens, n_heads * head_dim) over the cache `kv` (its
  // rows already written) into out (n_tokens, n_heads * head_dim), in work items of one
  // sequence's tokens and a KV head's query heads.
  void AttendPaged(const float* q, const AttentionParams& p, const PagedKvView& kv, float* out);
  // Groups the decode chunks whose sequences share leading blocks (shared_groups_) and marks
  // their shared splits.
  void PlanSharedPrefixes(const AttentionParams& p, size_t block_tokens);
  // mla_attention (host_mla.cc): writes the latent rows, then attends with W_UK absorbed into
  // the queries and W_UV applied to the weighted latents.
  Status RunMlaAttention(const Node& node, const TensorView* values, const PagedKvView& kv);
  // This batch's cos/sin of every position times `inv_freq` (pairs values each), made on first
  // use and kept for the other layers: (n_tokens, pairs) each.
  struct RopeTable {
    const double* inv_freq = nullptr;
    size_t pairs = 0;
    float attn_factor = 1.0f;  // multiplies cos and sin (YaRN)
    std::vector<float> cos, sin;
  };
  const RopeTable& RopeTableFor(const double* inv_freq, size_t pairs, float attn_factor);

  const char* name_;
  BackendId id_;
  const HostKernels& kernels_;
  WeightTypeFilter supports_weight_;
  cpu::ThreadPool pool_;
  // Attention work (host_attention.cc): runs of one sequence's tokens in the batch, costliest
  // first.
  struct AttentionChunk {
    size_t first_token, n_tokens;
    size_t cost = 0;           // keys read: sum of the tokens' n_ctx
    size_t max_ctx = 0;        // of its tokens
    size_t n_splits = 1;       // split-K splits of its keys (an upper bound: spares return at once)
    bool split_items = false;  // one item per split (split-K)
    size_t shared_splits = 0;  // leading splits computed by a shared-prefix item
  };
  std::vector<AttentionChunk> attention_chunks_;
  // One kernel call: heads [head_begin, + heads per item) of a chunk over every split (kWhole,
  // into the output) or splits [split_begin, split_end) (kSplits), or of a shared group over
  // one split (kShared); those two write partial states to attention_partials_.
  struct AttentionItem {
    enum Kind { kWhole, kSplits, kShared };
    size_t index;  // into attention_chunks_, or shared_groups_ for kShared
    size_t head_begin, split_begin, split_end;
    Kind kind;
  };
  std::vector<AttentionItem> attention_items_;
  std::vector<AttentionItem> attention_merges_;  // chunks computed in pieces: their heads to fold
  // (splits, n_tokens, n_heads, AttentionPartialFloats(head_dim)); capacity kept.
  std::vector<float> attention_partials_;
  // Shared-prefix attention: decode tokens whose sequences share their first blocks, and the
  // whole splits inside those blocks, which one item per split and KV head computes for all.
  struct SharedGroup {
    size_t rows_begin, n_rows;   // into shared_rows_ / shared_ctx_
    const int32_t* block_table;  // the first member's (the same blocks over the shared splits)
    size_t n_splits;
  };
  const AttentionSplitKernels* split_kernels_ = nullptr;
  bool shared_prefix_attention_ = true;
  std::vector<SharedGroup> shared_groups_;
  std::vector<int32_t> shared_rows_;    // members' token indices in the batch
  std::vector<int32_t> shared_ctx_;     // members' n_ctx
  std::vector<size_t> shared_order_;    // decode chunks by first block (planning scratch)
  BatchContext batch_;                  // the current batch (host arrays owned by the caller)
  std::vector<TensorView> host_values_;  // the current node's values as host views
  std::vector<RopeTable> rope_tables_;  // per frequency table; capacity kept across batches
  size_t rope_tables_used_ = 0;          // tables valid for the current batch
  std::vector<std::vector<float>> gate_scratch_;  // per pool thread: gated_ffn's gate rows
  // moe_ffn's routing and grouped rows; capacity kept across batches (decode allocates nothing).
  struct MoeScratch {
    std::vector<int32_t> choice_expert;  // (n_tokens, top_k): the chosen experts, best first
    std::vector<float> choice_weight;    // (n_tokens, top_k): their weights
    std::vector<int32_t> choice_row;     // (n_tokens, top_k): the choice's grouped row
    std::vector<float> probs;            // one token's routing scratch (RouteTopK)
    std::vector<int32_t> count, first;   // per expert: tokens routed, first grouped row
    std::vector<int32_t> active;         // experts with tokens, ascending
    std::vector<int32_t> row_token;      // grouped row -> token
    std::vector<uint8_t> x;              // grouped input rows (f32 or quantized)
    std::vector<float> act;              // grouped (rows, n_ff): silu(gate) * up
    std::vector<uint8_t> act_q;          // act quantized for the down projection
    std::vector<float> y;                // grouped (rows, n_out): the experts' outputs
  };
  MoeScratch moe_;
  // mla_attention's rows; capacity kept across batches.
  struct MlaScratch {
    std::vector<float> rows;     // (n_tokens, kv_lora + rope): latent rows before the cache write
    std::vector<float> queries;  // (n_tokens, heads, kv_lora + rope): absorbed queries
    std::vector<float> latents;  // (n_tokens, heads, kv_lora + rope): attention over the latents
  };
  MlaScratch mla_;
  std::vector<uint8_t> act_scratch_;  // quantized activations of one mat_mul, (n_tokens, row bytes)
  // What act_scratch_ holds: the quantized rows of value `value` (at `data`) of the current run.
  struct QuantizedInput {
    ValueId value = kNoValue;
    const void* data = nullptr;
    DType type = DType::kF32;
    size_t n_tokens = 0, n_in = 0;
    bool operator==(const QuantizedInput&) const = default;
  };
  QuantizedInput quantized_;
};

}  // namespace petrel
