// How the host backends split a matrix product's rows over the thread pool (shared by the
// dense ops in host_backend.cc and the experts in host_moe.cc).
#pragma once

#include <cstddef>

#include "quant/types.h"

namespace petrel {

// Row chunks of the matrix products are multiples of this, so kernels keep their row blocks:
// 16-row groups of the quantized lanes driver on AVX-512 (8 on AVX2, 4 on 128-bit targets),
// 3- and 4-row float tiles (chunks of 8 rows left one or two rows of each chunk to the slow
// 1-row float tile).
constexpr size_t kRowGrain = 48;

// Quantized weights (input_type is the activations' quantized type) need only whole lanes
// groups of 16 rows (8 on AVX2, 4 on 128-bit targets). With 48-row chunks two threads split a
// 2048-row matrix (the small shape's gate and up) into seven chunks of 288 rows and one of 32,
// so one thread took 1152 rows and the other 896; 16-row chunks make eight of 256.
constexpr size_t kQuantRowGrain = 16;

inline size_t MatMulRowGrain(DType input_type) {
  return input_type == DType::kF32 ? kRowGrain : kQuantRowGrain;
}

// Batches of at most this many tokens are "short" for float weights: a speculative
// verification pass (2-9 tokens), a server step's decoding sequences. Their product is bound by
// reading the weights once, as a single token's is, so the float kernels take the decode path
// (rows in long streams, F16/BF16 converted in the tiles) instead of the prompt panels, and the
// rows split into the decode's long chunks.
constexpr size_t kShortBatchTokens = 16;

// Chunks per thread of a matrix product. Float-weight prompts take 16: their chunks are long, so
// an op's last chunk can leave a thread idle for a large share of it (the pool's yields were
// ~5 % of an F16 prompt's profile with four per thread; eight measured no better than 16,
// tinyllama F16, three alternated runs). Quantized weights (input_type is the activations'
// quantized type) keep four: each call recomputes the activation blocks' terms for all its
// tokens, and 16 made small Q4_0 prompts slower (0.74-0.82 against 0.84-0.95 of the int8 roof).
// Single tokens and short batches take four: long row streams, and claiming would start to cost.
inline size_t MatMulChunksPerThread(DType input_type, size_t n_tokens) {
  return input_type == DType::kF32 && n_tokens > kShortBatchTokens ? 16 : 4;
}

}  // namespace petrel
