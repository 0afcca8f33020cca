// mla_attention on a host backend. The cache row of a position is the latent [c | k_rope]
// (kv_lora + rope elements, one row for every head), so the keys and values of the heads are
// never stored. The attention runs in the absorbed form for every token: head h's query becomes
// [W_UK[h]^T q_nope | q_rope], which against the latent row gives exactly q_nope · W_UK[h] c +
// q_rope · k_rope, and the softmax-weighted sum of latent rows times W_UV[h] is the weighted sum
// of the head's values. That is the paged attention kernel with one KV head of kv_lora + rope
// whose V rows are its K rows (the rope part of the weighted sum is computed and not used), so
// every cache type and the kernel's batch invariance carry over: a token's result does not
// depend on its batch. The expanded form (materialising each head's keys and values for every
// cached position) costs fewer operations for long prompts but reads and writes
// heads x (nope + v) per position; it is not implemented.
#include "cpu/host_mla.h"

#include <algorithm>
#include <cmath>

#include "cpu/host_backend.h"

namespace petrel {

const char* MlaNodeError(const Node& node) {
  const MlaParams& p = node.mla;
  if (!node.weight || !node.weight_down) return "needs the per-head W_UK and W_UV tensors";
  if (p.n_heads <= 0 || p.kv_lora <= 0 || p.nope <= 0 || p.v_dim <= 0) return "has empty heads";
  if (p.rope <= 0 || p.rope % 2 != 0) return "needs an even, positive rope part";
  if (!node.rope.inv_freq || node.rope.rot_dims != p.rope) return "has no rope frequencies";
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale)) return "has an invalid scale";
  const TensorDesc& k_b = node.weight->desc;
  const TensorDesc& v_b = node.weight_down->desc;
  if (k_b.ne[0] != p.nope || k_b.ne[1] != p.kv_lora || k_b.ne[2] != p.n_heads || k_b.ne[3] != 1) {
    return "has a W_UK tensor of the wrong shape";
  }
  if (v_b.ne[0] != p.kv_lora || v_b.ne[1] != p.v_dim || v_b.ne[2] != p.n_heads || v_b.ne[3] != 1) {
    return "has a W_UV tensor of the wrong shape";
  }
  return nullptr;
}

Status HostBackend::RunMlaAttention(const Node& node, const TensorView* values,
                                    const PagedKvView& kv) {
  if (const char* error = MlaNodeError(node)) {
    return Error("%s: mla_attention of layer %d %s", name_, node.layer, error);
  }
  const MlaParams& p = node.mla;
  const size_t n_heads = size_t(p.n_heads), kv_lora = size_t(p.kv_lora);
  const size_t nope = size_t(p.nope), rope = size_t(p.rope), v_dim = size_t(p.v_dim);
  const size_t q_head = nope + rope, row = kv_lora + rope;
  const size_t n_tokens = batch_.n_tokens;
  const TensorView& q = values[node.inputs[0]];
  const TensorView& latent = values[node.inputs[1]];
  const TensorView& k_rope = values[node.inputs[2]];
  if (kv.row_elems != row || size_t(q.desc.ne[0]) != n_heads * q_head ||
      size_t(latent.desc.ne[0]) != kv_lora || size_t(k_rope.desc.ne[0]) != rope) {
    return Error("%s: mla_attention of layer %d: q %s, latent %s, rope key %s and cache rows of "
                 "%zu do not fit %zu heads of %zu + %zu over a latent of %zu",
                 name_, node.layer, q.desc.ShapeString().c_str(),
                 latent.desc.ShapeString().c_str(), k_rope.desc.ShapeString().c_str(),
                 kv.row_elems, n_heads, nope, rope, kv_lora);
  }
  const RopeTable& table = RopeTableFor(node.rope.inv_freq, rope / 2, node.rope.attn_factor);
  const RopeStyle style = node.rope.style;
  MlaScratch& m = mla_;
  m.rows.resize(n_tokens * row);
  m.queries.resize(n_tokens * n_heads * row);
  m.latents.resize(n_tokens * n_heads * row);
  const size_t row_bytes = *RowBytes(kv.dtype, row);  // checked when the cache was made

  // 1. The cache rows [c | RoPE(k_rope)], and each head's rope part of the absorbed query.
  pool_.ParallelFor(n_tokens, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const float* cos = table.cos.data() + t * (rope / 2);
      const float* sin = table.sin.data() + t * (rope / 2);
      float* cache_row = m.rows.data() + t * row;
      std::copy_n(latent.as<const float>() + t * kv_lora, kv_lora, cache_row);
      std::copy_n(k_rope.as<const float>() + t * rope, rope, cache_row + kv_lora);
      kernels_.rope(cache_row + kv_lora, 1, rope, rope, cos, sin, style);
      kernels_.row_from_f32(kv.dtype, cache_row, row,
                            static_cast<char*>(kv.k) + size_t(batch_.kv_slot[t]) * row_bytes);
      float* queries = m.queries.data() + t * n_heads * row;
      const float* q_t = q.as<const float>() + t * n_heads * q_head;
      for (size_t h = 0; h < n_heads; ++h) {
        std::copy_n(q_t + h * q_head + nope, rope, queries + h * row + kv_lora);
      }
      // Each head's rope part sits after its kv_lora latent dims: rotate from there, heads
      // `row` apart.
      kernels_.rope(queries + kv_lora, n_heads, row, rope, cos, sin, style);
    }
  });
  // 2. q_lat = W_UK[h]^T q_nope for every head: attn_k_b's rows of head h map nope to kv_lora.
  const TensorView& k_b = *node.weight;
  const size_t k_b_row_bytes = k_b.desc.row_bytes();
  pool_.ParallelFor(n_heads * kv_lora, [&](size_t begin, size_t end) {
    for (size_t h = begin / kv_lora; h < n_heads && h * kv_lora < end; ++h) {
      const size_t lo = std::max(begin, h * kv_lora) - h * kv_lora;
      const size_t hi = std::min(end, (h + 1) * kv_lora) - h * kv_lora;
      kernels_.mat_mul(k_b.desc.dtype,
                       static_cast<const char*>(k_b.data) + h * kv_lora * k_b_row_bytes,
                       k_b_row_bytes, nope, q.as<const float>() + h * q_head, n_heads * q_head,
                       n_tokens, nullptr, m.queries.data() + h * row, n_heads * row, lo, hi);
    }
  });
  // 3. Attention of the absorbed queries over the latent rows (values = the same rows).
  AttentionParams attention;
  attention.n_heads = int32_t(n_heads);
  attention.n_kv_heads = 1;
  attention.head_dim = int32_t(row);
  attention.scale = p.scale;
  AttendPaged(m.queries.data(), attention, kv, m.latents.data());
  // 4. out = W_UV[h] times the head's weighted latent (its first kv_lora elements).
  const TensorView& v_b = *node.weight_down;
  const size_t v_b_row_bytes = v_b.desc.row_bytes();
  float* out = values[node.output].as<float>();
  pool_.ParallelFor(n_heads * v_dim, [&](size_t begin, size_t end) {
    for (size_t h = begin / v_dim; h < n_heads && h * v_dim < end; ++h) {
      const size_t lo = std::max(begin, h * v_dim) - h * v_dim;
      const size_t hi = std::min(end, (h + 1) * v_dim) - h * v_dim;
      kernels_.mat_mul(v_b.desc.dtype,
                       static_cast<const char*>(v_b.data) + h * v_dim * v_b_row_bytes,
                       v_b_row_bytes, kv_lora, m.latents.data() + h * row, n_heads * row,
                       n_tokens, nullptr, out + h * v_dim, n_heads * v_dim, lo, hi);
    }
  });
  return Status::Ok();
}

}  // namespace petrel
