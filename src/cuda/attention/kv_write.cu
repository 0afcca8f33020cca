// The batch's K and V rows into their slots of the paged cache, converted to the cache's type with
// attention_math.cuh's converters (Q8_0 byte for byte as the CPU backend quantizes it).
#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/attention/attention_kernels.h"  // KvKindOf
#include "cuda/attention/attention_math.cuh"
#include "cuda/kernels_common.cuh"  // BlocksFor

namespace petrel::cuda {
namespace {

constexpr unsigned kKvWriteThreads = 256;

// One thread per (token, unit): an element for F32 and F16, a 32-element block for Q8_0, of
// both the K and the V row.
template <attn::KvKind kKind>
__global__ void __launch_bounds__(kKvWriteThreads)
    KvWriteKernel(const AttentionArgs args, int64_t row_elems, int64_t row_bytes) {
  const int64_t units_per_row = row_elems / attn::KvUnitElems<kKind>();
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= int64_t(args.n_tokens) * units_per_row) return;
  const int64_t token = index / units_per_row, unit = index % units_per_row;
  const int64_t slot_offset = int64_t(args.kv_slot[token]) * row_bytes;
  attn::WriteKvUnit<kKind>(args.k + token * row_elems, unit,
                           static_cast<uint8_t*>(args.k_cache) + slot_offset);
  attn::WriteKvUnit<kKind>(args.v + token * row_elems, unit,
                           static_cast<uint8_t*>(args.v_cache) + slot_offset);
}

template <attn::KvKind kKind>
cudaError_t LaunchKvWriteFor(cudaStream_t stream, const AttentionArgs& args) {
  const int64_t row_elems = int64_t(args.params.n_kv_heads) * args.params.head_dim;
  const int64_t units = int64_t(args.n_tokens) * (row_elems / attn::KvUnitElems<kKind>());
  if (units == 0) return cudaSuccess;
  KvWriteKernel<kKind><<<BlocksFor(units, kKvWriteThreads), kKvWriteThreads, 0, stream>>>(
      args, row_elems, attn::KvBytes(kKind, row_elems));
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchKvWrite(cudaStream_t stream, const AttentionArgs& args) {
  if (!SupportsAttention(args.params, args.kv_type) || args.n_tokens < 0 ||
      (args.n_tokens > 0 && (args.k == nullptr || args.v == nullptr || args.k_cache == nullptr ||
                             args.v_cache == nullptr || args.kv_slot == nullptr))) {
    return cudaErrorInvalidValue;
  }
  switch (KvKindOf(args.kv_type)) {
    case attn::KvKind::kF32:
      return LaunchKvWriteFor<attn::KvKind::kF32>(stream, args);
    case attn::KvKind::kF16:
      return LaunchKvWriteFor<attn::KvKind::kF16>(stream, args);
    case attn::KvKind::kQ8_0:
      return LaunchKvWriteFor<attn::KvKind::kQ8_0>(stream, args);
  }
  return cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
