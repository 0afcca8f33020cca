// The host kernel interface: plain entry points (pointers and sizes, no Highway types) that a
// host-memory backend calls per op. `cpu` fills it with Highway kernels, `ref` with the scalar
// reference kernels; tests compare the two on random inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/graph/ops.h"    // RopeStyle
#include "quant/types.h"  // DType

namespace petrel {

// One layer's paged K/V as the attention kernel reads it. Storage per layer is
// (n_blocks, block_tokens, n_kv_heads * head_dim) elements for K and the same for V; a row of
// Q8_0 is RowBytes(kQ8_0, row_elems) bytes and a head starts at head * head_dim / 32 blocks.
struct PagedKvView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF32;   // kF32, kF16 or kQ8_0 (each head a whole number of blocks)
  size_t block_tokens = 0;
  size_t row_elems = 0;        // n_kv_heads * head_dim
};

// Arguments of the attention of `n_queries` tokens of one sequence (a prompt's tokens, or one
// decode token). `block_table` lists the sequence's blocks in position order; query i attends
// positions [0, n_ctx[i]) (causal: n_ctx[i] = its position + 1). Every query's result is a fixed
// function of its own q and keys: computing it alone, with other queries or other heads gives
// the same bits, so callers may group queries freely to share K/V reads.
struct AttentionArgs {
  const float* q = nullptr;  // (n_queries, n_heads, head_dim)
  const PagedKvView* kv = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* n_ctx = nullptr;  // (n_queries), each >= 1
  size_t n_queries = 1;
  size_t n_heads = 0;
  size_t n_kv_heads = 0;
  size_t head_dim = 0;
  float scale = 1.0f;
  // 0: none; else each scaled score s becomes softcap * tanh(s / softcap) before masking.
  float softcap = 0.0f;
  // 0: every position up to n_ctx; else query i sees only positions [n_ctx[i] - window, n_ctx[i]).
  size_t window = 0;
  // nullptr: none; else one logit per query head (n_heads) that joins each row's softmax
  // denominator (exp(sink - max)) without a value row: attention sinks.
  const float* sinks = nullptr;
  float* out = nullptr;  // (n_queries, n_heads, head_dim)
};

struct HostKernels {
  const char* name;

  // out[t * out_stride + r] = dot(W row r, x[t * x_stride ...]) + (bias ? bias[r] : 0)
  // for t in [0, n_tokens), r in [row_begin, row_end). W rows are `n_in` elements of `w_type`,
  // `w_row_bytes` apart. The reduction order of a row never depends on n_tokens or on the row
  // range, so results are the same in any batch and with any thread split.
  void (*mat_mul)(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                  size_t x_stride, size_t n_tokens, const float* bias, float* out,
                  size_t out_stride, size_t row_begin, size_t row_end);

  // Quantized weights, optional (null in a table whose mat_mul takes f32 activations for every
  // weight type, as `ref`'s does). `activation_type(w_type)` names the block format (Q8_0, Q8_1,
  // Q8_K) mat_mul_quantized wants the activations in, or kF32 for "use mat_mul". The caller
  // quantizes each token's row once per op with `quantize_activation` and then splits
  // mat_mul_quantized over rows, so the activations are not re-quantized by every thread.
  // mat_mul also accepts these weight types (it quantizes internally) with identical results:
  // a token's row is quantized on its own, so batch invariance holds as above.
  DType (*activation_type)(DType w_type);
  void (*quantize_activation)(DType act_type, const float* x, size_t n, void* out);
  void (*mat_mul_quantized)(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                            const void* xq, size_t xq_row_bytes, size_t n_tokens,
                            const float* bias, float* out, size_t out_stride, size_t row_begin,
                            size_t row_end);

  // Converts `n` elements of a row of `type` (F32, F16, BF16 or a block format) to f32:
  // embedding lookups.
  void (*row_to_f32)(DType type, const void* row, size_t n, float* out);
  // Converts an f32 row into `type` (F32, F16, Q8_0): KV cache writes.
  void (*row_from_f32)(DType type, const float* row, size_t n, void* out);

  // out = x * weight / sqrt(mean(x^2) + eps), n elements.
  void (*rms_norm)(const float* x, const float* weight, size_t n, float eps, float* out);

  // out = (x - mean(x)) / sqrt(var(x) + eps) * weight + (bias ? bias : 0), n elements, with
  // the population variance (LayerNorm).
  void (*layer_norm)(const float* x, const float* weight, const float* bias, size_t n, float eps,
                     float* out);

  // Rotates each of n_heads heads of `x` (n_heads, head_dim) in place; cos/sin hold rot_dims/2
  // values for this token's position. Dimensions past rot_dims are left as they are.
  void (*rope)(float* x, size_t n_heads, size_t head_dim, size_t rot_dims, const float* cos,
               const float* sin, RopeStyle style);

  // Heads [head_begin, head_end) of every query's attention.
  void (*attention)(const AttentionArgs& args, size_t head_begin, size_t head_end);

  void (*silu_mul)(const float* gate, const float* up, size_t n, float* out);
  void (*add)(const float* a, const float* b, size_t n, float* out);
  // out = gelu(gate) * up with the tanh approximation of GELU, computed in float (no table).
  void (*gelu_mul)(const float* gate, const float* up, size_t n, float* out);
  // out = x / 2 * (1 + erf(x / sqrt(2))): the exact GELU (BERT, Hugging Face "gelu").
  void (*gelu)(const float* x, size_t n, float* out);
  // out = x * factor.
  void (*scale)(const float* x, float factor, size_t n, float* out);
  // out = cap * tanh(x / cap), cap > 0.
  void (*softcap)(const float* x, float cap, size_t n, float* out);
};

}  // namespace petrel
