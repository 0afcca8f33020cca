// The attention kernels' launchers, shared by attention.cu's dispatch: each checks nothing
// (LaunchAttention has validated the arguments) and returns cudaGetLastError() after its launches.
#pragma once

#include <cuda_runtime.h>

#include "cuda/attention/attention.h"         // AttentionArgs
#include "cuda/attention/attention_math.cuh"  // attn::KvKind

namespace petrel::cuda {

// The kernels' element kind of a KV cache type SupportsAttention accepts (F32 for any other).
attn::KvKind KvKindOf(DType kv_type);

// Split-K decode (args.n_tokens <= attn::kDecodeMaxTokens): partial results of every chunk of
// the context in args.scratch, then one combine kernel.
cudaError_t LaunchSplitKDecode(cudaStream_t stream, const AttentionArgs& args, attn::KvKind kind);
// Tiled prefill: blocks of attn::kPrefillQueries tokens walking K/V tiles in shared memory.
cudaError_t LaunchTiledPrefill(cudaStream_t stream, const AttentionArgs& args, attn::KvKind kind);

}  // namespace petrel::cuda
