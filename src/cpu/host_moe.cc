// moe_ffn on a host backend. Tokens are grouped by expert so that each active expert's rows are
// read once per pass for all of its tokens, and a decode step reads only the routed experts'
// rows (the others are never touched). The matrix products are the backend's mat_mul kernels
// over row slices of the stacked expert tensors, so every weight type mat_mul takes works here,
// and a token's result does not depend on the batch it is in: the kernels' per-row reductions
// never do, and its k expert outputs are summed in its own ranking order.
#include "cpu/host_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/host_backend.h"
#include "cpu/threading/host_work_split.h"

namespace petrel {

void ClampedSwiGlu(const MoeParams& p, const float* gate, const float* up, size_t n, float* out) {
  const bool clamp = p.glu_limit > 0.0f;
  for (size_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (clamp) {
      g = std::min(g, p.glu_limit);
      u = std::clamp(u, -p.glu_limit, p.glu_limit);
    }
    out[i] = g / (1.0f + std::exp(-p.glu_alpha * g)) * (u + p.glu_up_offset);
  }
}

Status HostBackend::RunMoeFfn(const Node& node, const TensorView* values) {
  if (const char* error = MoeNodeError(node)) {
    return Error("%s: moe_ffn of layer %d %s", name_, node.layer, error);
  }
  const TensorView& x = values[node.inputs[0]];
  const TensorView& logits = values[node.inputs[1]];
  const TensorView& gate = *node.weight;
  const TensorView& up = *node.weight_up;
  const TensorView& down = *node.weight_down;
  const size_t n_experts = size_t(node.moe.n_experts), top_k = size_t(node.moe.top_k);
  const size_t n_in = size_t(gate.desc.ne[0]), n_ff = size_t(gate.desc.ne[1]);
  const size_t n_out = size_t(down.desc.ne[1]);
  const size_t n_tokens = size_t(x.desc.ne[1]);
  if (size_t(x.desc.ne[0]) != n_in || size_t(logits.desc.ne[0]) != n_experts ||
      size_t(logits.desc.ne[1]) != n_tokens) {
    return Error("%s: moe_ffn of layer %d: inputs of %s and router logits of %s do not fit "
                 "experts of %s",
                 name_, node.layer, x.desc.ShapeString().c_str(),
                 logits.desc.ShapeString().c_str(), gate.desc.ShapeString().c_str());
  }
  MoeScratch& m = moe_;
  const size_t n_rows = n_tokens * top_k;  // grouped rows: one per (token, choice)

  // 1. Route every token.
  m.choice_expert.resize(n_rows);
  m.choice_weight.resize(n_rows);
  m.choice_row.resize(n_rows);
  m.probs.resize(2 * n_experts + size_t(node.moe.n_groups));
  const float* bias = node.select_bias ? node.select_bias->as<const float>() : nullptr;
  for (size_t t = 0; t < n_tokens; ++t) {
    RouteTopK(node.moe, logits.as<const float>() + t * n_experts, bias, m.probs.data(),
              m.choice_expert.data() + t * top_k, m.choice_weight.data() + t * top_k);
  }
  // 2. Group: experts ascending, each one's tokens in batch order.
  m.count.assign(n_experts, 0);
  m.first.assign(n_experts, 0);
  for (size_t i = 0; i < n_rows; ++i) ++m.count[size_t(m.choice_expert[i])];
  m.active.clear();
  for (size_t e = 0, row = 0; e < n_experts; ++e) {
    m.first[e] = int32_t(row);
    row += size_t(m.count[e]);
    if (m.count[e] > 0) m.active.push_back(int32_t(e));
  }
  m.row_token.resize(n_rows);
  {
    std::vector<int32_t>& next = m.count;  // reused as each expert's fill position
    for (size_t e = 0; e < n_experts; ++e) next[e] = m.first[e];
    for (size_t i = 0; i < n_rows; ++i) {
      const int32_t row = next[size_t(m.choice_expert[i])]++;
      m.row_token[size_t(row)] = int32_t(i / top_k);
      m.choice_row[i] = row;
    }
    for (size_t e = 0; e < n_experts; ++e) next[e] -= m.first[e];  // back to the counts
  }

  // 3. The grouped input rows, in the activation format of the gate/up weights.
  const MatMulInput in_all = PrepareMatMulInput(node.inputs[0], x, gate.desc.dtype);
  m.x.resize(n_rows * in_all.row_bytes);
  for (size_t row = 0; row < n_rows; ++row) {
    std::memcpy(m.x.data() + row * in_all.row_bytes,
                static_cast<const uint8_t*>(in_all.data) +
                    size_t(m.row_token[row]) * in_all.row_bytes,
                in_all.row_bytes);
  }

  // 4. Gate and up of every active expert, split over all their rows at once (one barrier).
  const size_t n_active = m.active.size();
  size_t max_tokens = 0;
  for (int32_t e : m.active) max_tokens = std::max(max_tokens, size_t(m.count[size_t(e)]));
  const size_t chunks_per_thread = MatMulChunksPerThread(in_all.type, max_tokens);
  const size_t max_rows = pool_.MaxChunk(n_active * n_ff, kRowGrain, chunks_per_thread);
  gate_scratch_.resize(pool_.size());
  for (std::vector<float>& scratch : gate_scratch_) {
    if (scratch.size() < max_tokens * max_rows) scratch.resize(max_tokens * max_rows);
  }
  m.act.resize(n_rows * n_ff);
  const bool plain_silu = node.moe.PlainSilu();
  const float* gate_bias = node.bias ? node.bias->as<const float>() : nullptr;
  const float* up_bias = node.bias_up ? node.bias_up->as<const float>() : nullptr;
  const float* down_bias = node.bias_down ? node.bias_down->as<const float>() : nullptr;
  const size_t gate_row_bytes = gate.desc.row_bytes(), up_row_bytes = up.desc.row_bytes();
  // Calls fn(e, first grouped row, its tokens, row_begin, row_end) for the part of expert
  // `active[a]`'s rows [a * rows, (a + 1) * rows) that [begin, end) covers.
  auto for_each_expert_part = [&](size_t begin, size_t end, size_t rows, const auto& fn) {
    for (size_t a = begin / rows; a < n_active && a * rows < end; ++a) {
      const size_t lo = std::max(begin, a * rows) - a * rows;
      const size_t hi = std::min(end, (a + 1) * rows) - a * rows;
      const size_t e = size_t(m.active[a]);
      fn(e, size_t(m.first[e]), size_t(m.count[e]), lo, hi);
    }
  };
  pool_.ParallelFor(n_active * n_ff, [&](size_t begin, size_t end) {
    std::vector<float>& gate_rows = gate_scratch_[cpu::ThreadPool::ThreadIndex()];
    for_each_expert_part(begin, end, n_ff, [&](size_t e, size_t first, size_t tokens, size_t lo,
                                               size_t hi) {
      const size_t rows = hi - lo;
      const MatMulInput in{in_all.type, m.x.data() + first * in_all.row_bytes, in_all.row_bytes};
      const char* gate_e = static_cast<const char*>(gate.data) + e * n_ff * gate_row_bytes;
      const char* up_e = static_cast<const char*>(up.data) + e * n_ff * up_row_bytes;
      float* act = m.act.data() + first * n_ff;
      MatMulRows(gate.desc.dtype, gate_e + lo * gate_row_bytes, gate_row_bytes, n_in, in, tokens,
                 gate_bias ? gate_bias + e * n_ff + lo : nullptr, gate_rows.data(), rows, 0, rows);
      MatMulRows(up.desc.dtype, up_e, up_row_bytes, n_in, in, tokens,
                 up_bias ? up_bias + e * n_ff : nullptr, act, n_ff, lo, hi);
      for (size_t t = 0; t < tokens; ++t) {
        float* out_row = act + t * n_ff + lo;
        if (plain_silu) {
          kernels_.silu_mul(gate_rows.data() + t * rows, out_row, rows, out_row);
        } else {
          ClampedSwiGlu(node.moe, gate_rows.data() + t * rows, out_row, rows, out_row);
        }
      }
    });
  }, kRowGrain, chunks_per_thread);

  // 5. The down projections' inputs, quantized once per row when the weights want that.
  const DType down_act =
      kernels_.activation_type ? kernels_.activation_type(down.desc.dtype) : DType::kF32;
  MatMulInput act_in{DType::kF32, m.act.data(), n_ff * sizeof(float)};
  if (down_act != DType::kF32) {
    const size_t row_bytes = *RowBytes(down_act, n_ff);
    m.act_q.resize(n_rows * row_bytes);
    auto quantize_rows = [&](size_t begin, size_t end) {
      for (size_t row = begin; row < end; ++row) {
        kernels_.quantize_activation(down_act, m.act.data() + row * n_ff, n_ff,
                                     m.act_q.data() + row * row_bytes);
      }
    };
    // A decode step's few rows are quicker here than a pool round trip (a barrier that waits
    // for every worker, costly when the cores are shared).
    if (n_rows * n_ff < (size_t(1) << 16)) {
      quantize_rows(0, n_rows);
    } else {
      pool_.ParallelFor(n_rows, quantize_rows);
    }
    act_in = {down_act, m.act_q.data(), row_bytes};
  }
  quantized_ = {};  // act_scratch_ was not touched, but keep the cache honest about this op

  // 6. Down of every active expert.
  m.y.resize(n_rows * n_out);
  const size_t down_row_bytes = down.desc.row_bytes();
  pool_.ParallelFor(n_active * n_out, [&](size_t begin, size_t end) {
    for_each_expert_part(begin, end, n_out, [&](size_t e, size_t first, size_t tokens, size_t lo,
                                                size_t hi) {
      const MatMulInput in{act_in.type,
                           static_cast<const uint8_t*>(act_in.data) + first * act_in.row_bytes,
                           act_in.row_bytes};
      const char* down_e = static_cast<const char*>(down.data) + e * n_out * down_row_bytes;
      MatMulRows(down.desc.dtype, down_e, down_row_bytes, n_ff, in, tokens,
                 down_bias ? down_bias + e * n_out : nullptr, m.y.data() + first * n_out, n_out, lo,
                 hi);
    });
  }, kRowGrain, MatMulChunksPerThread(act_in.type, max_tokens));

  // 7. Each token's weighted sum, in its own ranking order.
  float* out = values[node.output].as<float>();
  pool_.ParallelFor(n_tokens, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      float* o = out + t * n_out;
      for (size_t r = 0; r < top_k; ++r) {
        const float w = m.choice_weight[t * top_k + r];
        const float* y = m.y.data() + size_t(m.choice_row[t * top_k + r]) * n_out;
        if (r == 0) {
          for (size_t i = 0; i < n_out; ++i) o[i] = w * y[i];
        } else {
          for (size_t i = 0; i < n_out; ++i) o[i] += w * y[i];
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace petrel
