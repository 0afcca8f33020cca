// Scalar reference kernels: the straightforward loops every SIMD or GPU kernel is tested against.
#include "ref/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/base/status.h"  // PETREL_CHECK
#include "quant/f16.h"    // F16ToF32, BF16ToF32, F32ToF16, F32ToBF16
#include "quant/quantize.h"  // DequantizeRow, QuantizeRow, CanDequantize

namespace petrel::ref {
namespace {

void MatMul(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const float* x,
            size_t x_stride, size_t n_tokens, const float* bias, float* out, size_t out_stride,
            size_t row_begin, size_t row_end) {
  PETREL_CHECK(SupportsWeightType(w_type));
  // Every weight type goes through the exact scalar dequantizer: this is the exact-f32 path the
  // quantized kernels are measured against. The row buffer grows once per thread, then stays.
  thread_local std::vector<float> w_f32;
  if (w_f32.size() < n_in) w_f32.resize(n_in);
  for (size_t r = row_begin; r < row_end; ++r) {
    const void* w_row = static_cast<const char*>(w) + r * w_row_bytes;
    PETREL_CHECK(DequantizeRow(w_type, w_row, w_f32.data(), n_in));
    for (size_t t = 0; t < n_tokens; ++t) {
      const float* x_t = x + t * x_stride;  // (n_in)
      double sum = 0.0;
      for (size_t i = 0; i < n_in; ++i) sum += double(w_f32[i]) * x_t[i];
      out[t * out_stride + r] = float(sum) + (bias ? bias[r] : 0.0f);
    }
  }
}

void RowToF32(DType type, const void* row, size_t n, float* out) {
  PETREL_CHECK(DequantizeRow(type, row, out, n));
}

void RowFromF32(DType type, const float* row, size_t n, void* out) {
  if (type == DType::kF32) {
    std::memcpy(out, row, n * sizeof(float));
    return;
  }
  if (type == DType::kF16) {
    for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = F32ToF16(row[i]);
    return;
  }
  if (type == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = F32ToBF16(row[i]);
    return;
  }
  // Block types: the reference quantizer.
  if (QuantizeRow(type, row, out, n)) return;
  PETREL_CHECK(false && "row_from_f32: unsupported element type");
}

void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out) {
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const double inv_rms = 1.0 / std::sqrt(sum_sq / double(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = float(double(x[i]) * weight[i] * inv_rms);
}

// In double: mean, then the population variance about it.
void LayerNorm(const float* x, const float* weight, const float* bias, size_t n, float eps,
               float* out) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += (x[i] - mean) * (x[i] - mean);
  const double inv_std = 1.0 / std::sqrt(sum_sq / double(n) + eps);
  for (size_t i = 0; i < n; ++i) {
    out[i] = float((x[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0));
  }
}

void Rope(float* x, size_t n_heads, size_t head_dim, size_t rot_dims, const float* cos,
          const float* sin, RopeStyle style) {
  const size_t half = rot_dims / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;  // (head_dim)
    for (size_t i = 0; i < half; ++i) {
      size_t i0 = 0, i1 = 0;
      switch (style) {
        case RopeStyle::kInterleaved:
          i0 = 2 * i, i1 = 2 * i + 1;
          break;
        case RopeStyle::kHalfSplit:
          i0 = i, i1 = i + half;
          break;
      }
      const float x0 = head[i0], x1 = head[i1];
      head[i0] = x0 * cos[i] - x1 * sin[i];
      head[i1] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

// One head's K or V slice of the row at `kv_pos`, as f32 (any cache type).
void LoadHead(const AttentionArgs& args, const void* base, size_t kv_pos, size_t kv_head, float* out) {
  const PagedKvView& kv = *args.kv;
  const size_t block = size_t(args.block_table[kv_pos / kv.block_tokens]);
  const size_t slot = block * kv.block_tokens + kv_pos % kv.block_tokens;
  const size_t row_bytes = *RowBytes(kv.dtype, kv.row_elems);
  const size_t head_bytes = *RowBytes(kv.dtype, args.head_dim);
  const char* head = static_cast<const char*>(base) + slot * row_bytes + kv_head * head_bytes;
  PETREL_CHECK(DequantizeRow(kv.dtype, head, out, args.head_dim));
}

// Each query and head on its own, in double, with an exact softmax over all its keys.
void Attention(const AttentionArgs& args, size_t head_begin, size_t head_end) {
  const PagedKvView& kv = *args.kv;
  PETREL_CHECK(RowBytes(kv.dtype, args.head_dim).has_value());
  PETREL_CHECK(args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0);
  const size_t group = args.n_heads / args.n_kv_heads;  // query heads per KV head
  std::vector<double> acc(args.head_dim);
  std::vector<float> row(args.head_dim);
  for (size_t query = 0; query < args.n_queries; ++query) {
    const size_t n_ctx = size_t(args.n_ctx[query]);
    PETREL_CHECK(n_ctx > 0);
    // The window: only positions [first, n_ctx) are visible.
    const size_t first = args.window > 0 && n_ctx > args.window ? n_ctx - args.window : 0;
    std::vector<double> probs(n_ctx);
    for (size_t h = head_begin; h < head_end; ++h) {
      const size_t kv_head = h / group;
      const size_t row_index = query * args.n_heads + h;
      const float* q = args.q + row_index * args.head_dim;  // (head_dim)
      double max_score = -INFINITY;
      for (size_t p = first; p < n_ctx; ++p) {
        LoadHead(args, kv.k, p, kv_head, row.data());
        double dot = 0.0;
        for (size_t d = 0; d < args.head_dim; ++d) dot += double(q[d]) * row[d];
        probs[p] = double(args.scale) * dot;
        if (args.softcap > 0.0f) probs[p] = args.softcap * std::tanh(probs[p] / args.softcap);
        max_score = std::max(max_score, probs[p]);
      }
      // A sink logit (raw, not scaled) joins the denominator with no value row.
      const double sink = args.sinks ? double(args.sinks[h]) : -INFINITY;
      max_score = std::max(max_score, sink);
      double sum = args.sinks ? std::exp(sink - max_score) : 0.0;
      for (size_t p = first; p < n_ctx; ++p) {
        probs[p] = std::exp(probs[p] - max_score);
        sum += probs[p];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t p = first; p < n_ctx; ++p) {
        LoadHead(args, kv.v, p, kv_head, row.data());
        const double prob = probs[p] / sum;
        for (size_t d = 0; d < args.head_dim; ++d) acc[d] += prob * row[d];
      }
      for (size_t d = 0; d < args.head_dim; ++d)
        args.out[row_index * args.head_dim + d] = float(acc[d]);
    }
  }
}

void SiluMul(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void Add(const float* a, const float* b, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// tanh-form GELU, in double.
void GeluMul(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double inner = 0.7978845608028654 * (g + 0.044715 * g * g * g);
    out[i] = float(0.5 * g * (1.0 + std::tanh(inner)) * up[i]);
  }
}

// erf-form GELU, in double.
void Gelu(const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    out[i] = float(0.5 * v * (1.0 + std::erf(v * 0.7071067811865476)));
  }
}

void Scale(const float* x, float factor, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}

void Softcap(const float* x, float cap, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = float(double(cap) * std::tanh(double(x[i]) / cap));
}

}  // namespace

bool SupportsWeightType(DType type) { return CanDequantize(type); }

const HostKernels& ReferenceKernels() {
  static const HostKernels kKernels = {
      .name = "ref",
      .mat_mul = MatMul,
      // mat_mul takes f32 activations for every weight type: no quantized path.
      .activation_type = nullptr,
      .quantize_activation = nullptr,
      .mat_mul_quantized = nullptr,
      .row_to_f32 = RowToF32,
      .row_from_f32 = RowFromF32,
      .rms_norm = RmsNorm,
      .layer_norm = LayerNorm,
      .rope = Rope,
      .attention = Attention,
      .silu_mul = SiluMul,
      .add = Add,
      .gelu_mul = GeluMul,
      .gelu = Gelu,
      .scale = Scale,
      .softcap = Softcap,
  };
  return kKernels;
}

}  // namespace petrel::ref
