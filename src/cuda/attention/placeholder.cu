// Stand-in replaced by the real attention kernels when they land: reports "no kernels".
#include "cuda/attention/attention.h"

namespace petrel::cuda {

bool SupportsAttention(const AttentionParams&, DType) { return false; }

size_t AttentionScratchBytes(const AttentionArgs&) { return 0; }

cudaError_t LaunchKvWrite(cudaStream_t, const AttentionArgs&) { return cudaErrorNotSupported; }

cudaError_t LaunchAttention(cudaStream_t, const AttentionArgs&) { return cudaErrorNotSupported; }

}  // namespace petrel::cuda
