// HostBackend: runs graph nodes with a HostKernels table, splitting work over the thread pool.
#include "cpu/host_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpu/host_mla.h"
#include "cpu/host_moe.h"
#include "cpu/threading/host_work_split.h"

namespace petrel {
namespace {

class HostBuffer final : public BackendBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes), owned_(true) {
    // 64-byte alignment for full-width vector loads; rounded size as aligned_alloc requires.
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_ = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  }
  HostBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes), owned_(false) {}
  ~HostBuffer() override {
    if (owned_) std::free(data_);
  }
  char* data() const { return static_cast<char*>(data_); }
  size_t bytes() const override { return bytes_; }
  const uint8_t* host_bytes() const override { return static_cast<const uint8_t*>(data_); }
  bool ok() const { return data_ != nullptr || bytes_ == 0; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
  bool owned_;
};

}  // namespace

HostBackend::HostBackend(const char* name, BackendId id, const HostKernels& kernels,
                         WeightTypeFilter supports_weight, size_t n_threads)
    : name_(name),
      id_(id),
      kernels_(kernels),
      supports_weight_(supports_weight),
      pool_(n_threads) {}

Result<std::unique_ptr<BackendBuffer>> HostBackend::Allocate(size_t bytes) {
  auto buffer = std::make_unique<HostBuffer>(bytes);
  if (!buffer->ok()) return Error("%s: cannot allocate %zu bytes", name_, bytes);
  return std::unique_ptr<BackendBuffer>(std::move(buffer));
}

Result<TensorView> HostBackend::PrepareWeight(const TensorView& host_view) {
  TensorView view = host_view;
  view.backend = id_;
  return view;
}

std::unique_ptr<BackendBuffer> HostBackend::WrapHostMemory(void* data, size_t bytes) {
  return std::make_unique<HostBuffer>(data, bytes);
}

char* HostBackend::HostAddress(const BackendBuffer& buffer, size_t offset) {
  // Every buffer a HostBackend is handed was made by a HostBackend's Allocate.
  return static_cast<const HostBuffer&>(buffer).data() + offset;
}

Status HostBackend::CopyToHost(const BackendBuffer& src, size_t src_offset, void* host_dst,
                               size_t bytes) {
  if (src_offset + bytes > src.bytes()) return Error("%s: copy past the end of a buffer", name_);
  std::memcpy(host_dst, HostAddress(src, src_offset), bytes);
  return Status::Ok();
}

Status HostBackend::CopyFromHost(const void* host_src, BackendBuffer& dst, size_t dst_offset,
                                 size_t bytes) {
  if (dst_offset + bytes > dst.bytes()) return Error("%s: copy past the end of a buffer", name_);
  quantized_ = {};  // the copy may overwrite the quantized activations' source
  std::memcpy(HostAddress(dst, dst_offset), host_src, bytes);
  return Status::Ok();
}

Status HostBackend::CopyWithin(const BackendBuffer& src, size_t src_offset, BackendBuffer& dst,
                               size_t dst_offset, size_t bytes) {
  if (src_offset + bytes > src.bytes() || dst_offset + bytes > dst.bytes())
    return Error("%s: copy past the end of a buffer", name_);
  quantized_ = {};
  std::memmove(HostAddress(dst, dst_offset), HostAddress(src, src_offset), bytes);
  return Status::Ok();
}

bool HostBackend::Supports(const Node& node) const {
  switch (node.op) {
    case OpKind::kMatMul:
    case OpKind::kEmbed:
      return node.weight != nullptr && supports_weight_(node.weight->desc.dtype);
    case OpKind::kGatedFfn:
      return node.weight != nullptr && node.weight_up != nullptr &&
             node.weight->desc.dtype == node.weight_up->desc.dtype &&
             supports_weight_(node.weight->desc.dtype);
    case OpKind::kAttention: {
      const AttentionParams& p = node.attention;
      return p.logit_softcap >= 0.0f && p.window >= 0 && p.n_kv_heads > 0 &&
             p.n_heads % p.n_kv_heads == 0 && (p.causal || p.window == 0) &&
             (p.sinks == nullptr ||
              (p.sinks->desc.dtype == DType::kF32 && p.sinks->desc.n_elems() == p.n_heads));
    }
    case OpKind::kMoeFfn:
      return MoeNodeError(node) == nullptr && supports_weight_(node.weight->desc.dtype) &&
             supports_weight_(node.weight_down->desc.dtype);
    case OpKind::kMlaAttention:
      return MlaNodeError(node) == nullptr && supports_weight_(node.weight->desc.dtype) &&
             supports_weight_(node.weight_down->desc.dtype);
    case OpKind::kHeadRmsNorm:
      return node.weight != nullptr && node.norm.head_dim > 0 &&
             node.weight->desc.n_elems() == node.norm.head_dim;
    case OpKind::kSoftcap:
      return node.scalar > 0.0f;
    case OpKind::kRope:
      return node.rope.inv_freq != nullptr && node.rope.rot_dims % 2 == 0 &&
             node.rope.rot_dims <= node.rope.head_dim && std::isfinite(node.rope.attn_factor);
    case OpKind::kLayerNorm:
      return node.weight != nullptr && node.weight->desc.dtype == DType::kF32 &&
             (node.bias == nullptr || node.bias->desc.dtype == DType::kF32);
    case OpKind::kAddRows:
      return node.weight != nullptr && supports_weight_(node.weight->desc.dtype) &&
             node.add_rows.row >= 0 && node.add_rows.row < node.weight->desc.ne[1];
    case OpKind::kScaleRows:
      return node.row_scales >= 0;
    case OpKind::kRmsNorm:
    case OpKind::kGelu:
    case OpKind::kSiluMul:
    case OpKind::kGeluMul:
    case OpKind::kAdd:
    case OpKind::kScale:
    case OpKind::kGetRows:
      return true;
    case OpKind::kCount:
      break;
  }
  return false;
}

Status HostBackend::BeginBatch(const BatchContext& batch) {
  batch_ = batch;
  rope_tables_used_ = 0;
  return Status::Ok();
}

const HostBackend::RopeTable& HostBackend::RopeTableFor(const double* inv_freq, size_t pairs,
                                                        float attn_factor) {
  for (size_t i = 0; i < rope_tables_used_; ++i) {
    const RopeTable& table = rope_tables_[i];
    if (table.inv_freq == inv_freq && table.pairs == pairs && table.attn_factor == attn_factor) {
      return table;
    }
  }
  if (rope_tables_used_ == rope_tables_.size()) rope_tables_.emplace_back();
  RopeTable& table = rope_tables_[rope_tables_used_++];
  table.inv_freq = inv_freq;
  table.pairs = pairs;
  table.attn_factor = attn_factor;
  const size_t n = batch_.n_tokens;
  table.cos.resize(n * pairs);
  table.sin.resize(n * pairs);
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < pairs; ++i) {
      // Angles in double: large positions times small frequencies lose bits in float.
      const double angle = double(batch_.positions[t]) * inv_freq[i];
      // YaRN's attention factor scales cos and sin (1 otherwise: the same bits as without).
      table.cos[t * pairs + i] = float(std::cos(angle) * attn_factor);
      table.sin[t * pairs + i] = float(std::sin(angle) * attn_factor);
    }
  }
  return table;
}

HostBackend::MatMulInput HostBackend::PrepareMatMulInput(ValueId value, const TensorView& x,
                                                         DType weight_type) {
  const size_t n_in = size_t(x.desc.ne[0]);
  const size_t n_tokens = size_t(x.desc.ne[1]);
  const DType act_type =
      kernels_.activation_type ? kernels_.activation_type(weight_type) : DType::kF32;
  if (act_type == DType::kF32) return {DType::kF32, x.data, n_in * sizeof(float)};
  // Quantized weights: quantize each token's activations once (split over tokens), then split
  // the rows. The scratch grows to the largest batch seen and then stays.
  // Q, K and V read the same value: the mat_muls after the first reuse its quantized rows,
  // which saves a pass and a barrier each.
  const size_t xq_row_bytes = *RowBytes(act_type, n_in);
  const QuantizedInput key{value, x.data, act_type, n_tokens, n_in};
  if (!(quantized_ == key)) {
    if (act_scratch_.size() < n_tokens * xq_row_bytes) act_scratch_.resize(n_tokens * xq_row_bytes);
    uint8_t* xq = act_scratch_.data();
    pool_.ParallelFor(n_tokens, [&](size_t begin, size_t end) {
      for (size_t t = begin; t < end; ++t) {
        kernels_.quantize_activation(act_type, x.as<const float>() + t * n_in, n_in,
                                     xq + t * xq_row_bytes);
      }
    });
    quantized_ = key;
  }
  return {act_type, act_scratch_.data(), xq_row_bytes};
}

void HostBackend::MatMulRows(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                             const MatMulInput& in, size_t n_tokens, const float* bias,
                             float* out, size_t out_stride, size_t row_begin,
                             size_t row_end) const {
  if (in.type == DType::kF32) {
    kernels_.mat_mul(w_type, w, w_row_bytes, n_in, static_cast<const float*>(in.data), n_in,
                     n_tokens, bias, out, out_stride, row_begin, row_end);
  } else {
    kernels_.mat_mul_quantized(w_type, w, w_row_bytes, n_in, in.data, in.row_bytes, n_tokens,
                               bias, out, out_stride, row_begin, row_end);
  }
}

void HostBackend::RunMatMul(const Node& node, const TensorView* values) {
  const TensorView& x = values[node.inputs[0]];
  const TensorView& w = *node.weight;
  const size_t n_in = size_t(w.desc.ne[0]);
  const size_t n_out = size_t(w.desc.ne[1]);
  const size_t n_tokens = size_t(x.desc.ne[1]);
  const float* bias = node.bias ? node.bias->as<const float>() : nullptr;
  float* out = values[node.output].as<float>();
  const MatMulInput in = PrepareMatMulInput(node.inputs[0], x, w.desc.dtype);
  // Split output rows: every thread streams a disjoint slice of the weight matrix once, for all
  // tokens of the batch.
  pool_.ParallelFor(n_out, [&](size_t row_begin, size_t row_end) {
    MatMulRows(w.desc.dtype, w.data, w.desc.row_bytes(), n_in, in, n_tokens, bias, out, n_out,
               row_begin, row_end);
  }, MatMulRowGrain(in.type), MatMulChunksPerThread(in.type, n_tokens));
}

void HostBackend::RunGatedFfn(const Node& node, const TensorView* values) {
  const TensorView& x = values[node.inputs[0]];
  const TensorView& gate = *node.weight;
  const TensorView& up = *node.weight_up;
  const size_t n_in = size_t(gate.desc.ne[0]);
  const size_t n_ff = size_t(gate.desc.ne[1]);
  const size_t n_tokens = size_t(x.desc.ne[1]);
  float* out = values[node.output].as<float>();
  const MatMulInput in = PrepareMatMulInput(node.inputs[0], x, gate.desc.dtype);
  const size_t gate_row_bytes = gate.desc.row_bytes();
  // Each chunk of rows: its gate rows into a per-thread scratch, its up rows into the output,
  // then silu(gate) * up in place, while both are in cache. The same kernels on the same rows
  // as separate mat_mul and silu_mul ops, so the same bits.
  const size_t chunks_per_thread = MatMulChunksPerThread(in.type, n_tokens);
  // Sized for the largest chunk at once: a thread that has only had the short last chunk must
  // not grow it later (decode steps allocate nothing).
  // Each thread's gate scratch is sized here, by the calling thread, for the largest chunk, so
  // the first time a worker gets a chunk of a given shape costs no allocation (decode steps
  // allocate nothing).
  const size_t row_grain = MatMulRowGrain(in.type);
  const size_t max_rows = pool_.MaxChunk(n_ff, row_grain, chunks_per_thread);
  gate_scratch_.resize(pool_.size());
  for (std::vector<float>& scratch : gate_scratch_) {
    if (scratch.size() < n_tokens * max_rows) scratch.resize(n_tokens * max_rows);
  }
  pool_.ParallelFor(n_ff, [&](size_t row_begin, size_t row_end) {
    const size_t rows = row_end - row_begin;
    std::vector<float>& gate_rows = gate_scratch_[cpu::ThreadPool::ThreadIndex()];
    MatMulRows(gate.desc.dtype, static_cast<const char*>(gate.data) + row_begin * gate_row_bytes,
               gate_row_bytes, n_in, in, n_tokens, nullptr, gate_rows.data(), rows, 0, rows);
    MatMulRows(up.desc.dtype, up.data, up.desc.row_bytes(), n_in, in, n_tokens, nullptr, out,
               n_ff, row_begin, row_end);
    for (size_t t = 0; t < n_tokens; ++t) {
      float* out_row = out + t * n_ff + row_begin;
      kernels_.silu_mul(gate_rows.data() + t * rows, out_row, rows, out_row);
    }
  }, row_grain, chunks_per_thread);
}

void HostBackend::RunRope(const Node& node, const TensorView* values) {
  const RopeParams& p = node.rope;
  float* q = values[node.inputs[0]].as<float>();
  float* k = values[node.inputs[1]].as<float>();
  const size_t head_dim = size_t(p.head_dim), pairs = size_t(p.rot_dims) / 2;
  const size_t q_dim = size_t(p.n_heads) * head_dim;
  const size_t kv_dim = size_t(p.n_kv_heads) * head_dim;
  const RopeTable& table = RopeTableFor(p.inv_freq, pairs, p.attn_factor);
  pool_.ParallelFor(batch_.n_tokens, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const float* cos = table.cos.data() + t * pairs;
      const float* sin = table.sin.data() + t * pairs;
      kernels_.rope(q + t * q_dim, size_t(p.n_heads), head_dim, size_t(p.rot_dims), cos, sin,
                    p.style);
      kernels_.rope(k + t * kv_dim, size_t(p.n_kv_heads), head_dim, size_t(p.rot_dims), cos, sin,
                    p.style);
    }
  });
}

Status HostBackend::Run(const Node& node, const ValueView* bound, const KvLayerView* kv_layer) {
  if (!profiling_) return RunNode(node, bound, kv_layer);
  const auto start = std::chrono::steady_clock::now();
  Status status = RunNode(node, bound, kv_layer);
  OpProfile& op = profile_[node.op];
  op.op = node.op;
  ++op.calls;
  op.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

std::vector<OpProfile> HostBackend::TakeProfile() {
  std::vector<OpProfile> out;
  for (const auto& [kind, op] : profile_) out.push_back(op);
  profile_.clear();
  return out;
}

Status HostBackend::RunNode(const Node& node, const ValueView* bound,
                            const KvLayerView* kv_layer) {
  // The node's values as host views (only its inputs and output are bound).
  for (ValueId v : {node.inputs[0], node.inputs[1], node.inputs[2], node.output}) {
    if (v == kNoValue) continue;
    if (host_values_.size() <= size_t(v)) host_values_.resize(size_t(v) + 1);
    const ValueView& value = bound[v];
    host_values_[size_t(v)] = TensorView{value.desc, HostAddress(*value.buffer, value.offset), id_};
  }
  const TensorView* values = host_values_.data();
  const BatchContext& batch = batch_;
  // Any other op may write where a mat_mul's input was (in place, or into a reused slot), and
  // every graph run starts with one (embedding, norm, row selection).
  if (node.op != OpKind::kMatMul) quantized_ = {};
  switch (node.op) {
    case OpKind::kEmbed: {
      const TensorView& table = *node.weight;
      const size_t dim = size_t(table.desc.ne[0]);
      float* out = values[node.output].as<float>();
      pool_.ParallelFor(batch.n_tokens, [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
          kernels_.row_to_f32(table.desc.dtype, table.row(batch.tokens[t]), dim, out + t * dim);
        }
      });
      return Status::Ok();
    }
    case OpKind::kRmsNorm: {
      const TensorView& x = values[node.inputs[0]];
      const size_t n = size_t(x.desc.ne[0]);
      const float* weight = node.weight->as<const float>();
      float* out = values[node.output].as<float>();
      pool_.ParallelFor(size_t(x.desc.ne[1]), [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
          kernels_.rms_norm(x.as<const float>() + t * n, weight, n, node.norm.eps, out + t * n);
        }
      });
      return Status::Ok();
    }
    case OpKind::kMatMul:
      RunMatMul(node, values);
      return Status::Ok();
    case OpKind::kGatedFfn:
      if (node.weight_up == nullptr || node.weight_up->desc.dtype != node.weight->desc.dtype) {
        return Error("%s: gated_ffn of layer %d needs gate and up weights of one type", name_,
                     node.layer);
      }
      RunGatedFfn(node, values);
      return Status::Ok();
    case OpKind::kMoeFfn:
      return RunMoeFfn(node, values);
    case OpKind::kRope:
      RunRope(node, values);
      return Status::Ok();
    case OpKind::kAttention: {
      if (kv_layer == nullptr)
        return Error("%s: attention node of layer %d has no KV cache", name_, node.layer);
      if (!node.attention.causal && batch.n_ctx_all == nullptr)
        return Error("%s: bidirectional attention of layer %d without sequence lengths", name_,
                     node.layer);
      const PagedKvView kv{HostAddress(*kv_layer->k, 0), HostAddress(*kv_layer->v, 0),
                           kv_layer->dtype, kv_layer->block_tokens, kv_layer->row_elems};
      RunAttention(node, values, kv);
      return Status::Ok();
    }
    case OpKind::kMlaAttention: {
      if (kv_layer == nullptr)
        return Error("%s: mla_attention node of layer %d has no KV cache", name_, node.layer);
      // One latent row per position: the values are read from the key rows.
      const PagedKvView kv{HostAddress(*kv_layer->k, 0), HostAddress(*kv_layer->k, 0),
                           kv_layer->dtype, kv_layer->block_tokens, kv_layer->row_elems};
      return RunMlaAttention(node, values, kv);
    }
    case OpKind::kSiluMul:
    case OpKind::kGeluMul:
    case OpKind::kAdd: {
      const TensorView& a = values[node.inputs[0]];
      const float* a_data = a.as<const float>();
      const float* b_data = values[node.inputs[1]].as<const float>();
      float* out = values[node.output].as<float>();
      const size_t cols = size_t(a.desc.ne[0]);
      auto* kernel = node.op == OpKind::kSiluMul   ? kernels_.silu_mul
                     : node.op == OpKind::kGeluMul ? kernels_.gelu_mul
                                                   : kernels_.add;
      pool_.ParallelFor(size_t(a.desc.ne[1]), [&](size_t begin, size_t end) {
        const size_t offset = begin * cols, n = (end - begin) * cols;
        kernel(a_data + offset, b_data + offset, n, out + offset);
      });
      return Status::Ok();
    }
    case OpKind::kScale:
    case OpKind::kSoftcap: {
      const TensorView& x = values[node.inputs[0]];
      const float* x_data = x.as<const float>();
      float* out = values[node.output].as<float>();
      const size_t cols = size_t(x.desc.ne[0]);
      if (node.op == OpKind::kSoftcap && !(node.scalar > 0.0f)) {
        return Error("%s: softcap of layer %d needs a positive cap, not %g", name_, node.layer,
                     double(node.scalar));
      }
      auto* kernel = node.op == OpKind::kScale ? kernels_.scale : kernels_.softcap;
      pool_.ParallelFor(size_t(x.desc.ne[1]), [&](size_t begin, size_t end) {
        const size_t offset = begin * cols;
        kernel(x_data + offset, node.scalar, (end - begin) * cols, out + offset);
      });
      return Status::Ok();
    }
    case OpKind::kScaleRows: {
      if (node.row_scales < 0 || size_t(node.row_scales) >= batch_.n_row_scales) {
        return Error("%s: scale_rows of layer %d reads row scales %d of the batch's %zu", name_,
                     node.layer, node.row_scales, batch_.n_row_scales);
      }
      const TensorView& x = values[node.inputs[0]];
      const float* x_data = x.as<const float>();
      float* out = values[node.output].as<float>();
      const size_t cols = size_t(x.desc.ne[0]);
      const float* scales = batch_.row_scales + size_t(node.row_scales) * batch_.n_tokens;
      pool_.ParallelFor(size_t(x.desc.ne[1]), [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
          kernels_.scale(x_data + t * cols, scales[t], cols, out + t * cols);
        }
      });
      return Status::Ok();
    }
    case OpKind::kLayerNorm: {
      const TensorView& x = values[node.inputs[0]];
      const size_t n = size_t(x.desc.ne[0]);
      const float* weight = node.weight->as<const float>();
      const float* bias = node.bias ? node.bias->as<const float>() : nullptr;
      float* out = values[node.output].as<float>();
      pool_.ParallelFor(size_t(x.desc.ne[1]), [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
          kernels_.layer_norm(x.as<const float>() + t * n, weight, bias, n, node.norm.eps,
                              out + t * n);
        }
      });
      return Status::Ok();
    }
    case OpKind::kGelu: {
      const TensorView& x = values[node.inputs[0]];
      const size_t cols = size_t(x.desc.ne[0]);
      float* out = values[node.output].as<float>();
      pool_.ParallelFor(size_t(x.desc.ne[1]), [&](size_t begin, size_t end) {
        kernels_.gelu(x.as<const float>() + begin * cols, (end - begin) * cols,
                      out + begin * cols);
      });
      return Status::Ok();
    }
    case OpKind::kAddRows: {
      // out[t] = x[t] + table row r(t). The position is checked against the table here: a
      // model's context is capped at its rows when loaded, so this guards a caller's mistake.
      const TensorView& x = values[node.inputs[0]];
      const TensorView& table = *node.weight;
      const size_t dim = size_t(table.desc.ne[0]);
      const int64_t n_rows = table.desc.ne[1];
      if (size_t(x.desc.ne[0]) != dim) {
        return Error("%s: add_rows of layer %d: rows of %zu values, table rows of %zu", name_,
                     node.layer, size_t(x.desc.ne[0]), dim);
      }
      for (size_t t = 0; t < batch.n_tokens; ++t) {
        const int64_t row = node.add_rows.by_position ? batch.positions[t] : node.add_rows.row;
        if (row < 0 || row >= n_rows) {
          return Error("%s: add_rows of layer %d: row %lld is outside the table's %lld rows",
                       name_, node.layer, (long long)row, (long long)n_rows);
        }
      }
      float* out = values[node.output].as<float>();
      const float* x_data = x.as<const float>();
      pool_.ParallelFor(batch.n_tokens, [&](size_t begin, size_t end) {
        std::vector<float> row_f32(dim);
        for (size_t t = begin; t < end; ++t) {
          const int64_t row = node.add_rows.by_position ? batch.positions[t] : node.add_rows.row;
          kernels_.row_to_f32(table.desc.dtype, table.row(row), dim, row_f32.data());
          kernels_.add(x_data + t * dim, row_f32.data(), dim, out + t * dim);
        }
      });
      return Status::Ok();
    }
    case OpKind::kHeadRmsNorm: {
      // Every head of every row, normed on its own with the one head_dim weight.
      const TensorView& x = values[node.inputs[0]];
      const size_t cols = size_t(x.desc.ne[0]);
      const size_t head_dim = size_t(node.norm.head_dim);
      if (head_dim == 0 || cols % head_dim != 0) {
        return Error("%s: head_rms_norm of layer %d: %zu columns are not whole heads of %zu",
                     name_, node.layer, cols, head_dim);
      }
      const float* weight = node.weight->as<const float>();
      float* out = values[node.output].as<float>();
      const size_t n_heads = size_t(x.desc.ne[1]) * (cols / head_dim);
      pool_.ParallelFor(n_heads, [&](size_t begin, size_t end) {
        for (size_t h = begin; h < end; ++h) {
          kernels_.rms_norm(x.as<const float>() + h * head_dim, weight, head_dim, node.norm.eps,
                            out + h * head_dim);
        }
      });
      return Status::Ok();
    }
    case OpKind::kGetRows: {
      const TensorView& in = values[node.inputs[0]];
      const size_t cols = size_t(in.desc.ne[0]);
      float* out = values[node.output].as<float>();
      for (size_t i = 0; i < batch.n_selected; ++i) {
        std::memcpy(out + i * cols, in.as<const float>() + size_t(batch.selected_rows[i]) * cols,
                    cols * sizeof(float));
      }
      return Status::Ok();
    }
    case OpKind::kCount:
      break;
  }
  return Error("%s: unknown op %d", name_, int(node.op));
}

}  // namespace petrel
