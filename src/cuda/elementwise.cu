// The CUDA backend's own kernels: element-wise ops, rms_norm, RoPE, get_rows. The arithmetic of
// each is in elementwise_math.cuh (tested on the host against the reference kernels).
#include "cuda/elementwise.h"
#include "cuda/elementwise_math.cuh"

namespace petrel::cuda {
namespace {

constexpr unsigned kBlock = 256;
// Grids past this many blocks loop (grid-stride), so any n launches.
constexpr unsigned kMaxBlocks = 65535;

unsigned GridFor(int64_t n) {
  const unsigned blocks = BlocksFor(n, kBlock);
  return blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks;
}

template <BinaryOp op>
__global__ void BinaryKernel(const float* __restrict__ a, const float* __restrict__ b,
                             float* __restrict__ out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (op == BinaryOp::kAdd) out[i] = AddOf(a[i], b[i]);
    if constexpr (op == BinaryOp::kSiluMul) out[i] = SiluMulOf(a[i], b[i]);
    if constexpr (op == BinaryOp::kGeluMul) out[i] = GeluMulOf(a[i], b[i]);
  }
}

template <UnaryOp op>
__global__ void UnaryKernel(const float* __restrict__ x, float scalar, float* __restrict__ out,
                            int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (op == UnaryOp::kScale) out[i] = ScaleOf(x[i], scalar);
    if constexpr (op == UnaryOp::kSoftcap) out[i] = SoftcapOf(x[i], scalar);
  }
}

// One block of kBlock threads per row: strided sum of squares, warp shuffles, then the warps'
// partial sums. The order is fixed by the row length alone, so a row's result does not depend on
// the batch it is in.
__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ weight,
                              float* __restrict__ out, int64_t n_rows, int32_t n_cols, float eps) {
  __shared__ float warp_sums[kBlock / 32];
  for (int64_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
    const float* in = x + row * n_cols;
    float sum = 0.0f;
    for (int32_t c = threadIdx.x; c < n_cols; c += blockDim.x) sum += in[c] * in[c];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    float total = 0.0f;
    for (unsigned w = 0; w < kBlock / 32; ++w) total += warp_sums[w];
    __syncthreads();  // warp_sums is rewritten by the next row
    const float inverse = RmsInverse(total, n_cols, eps);
    float* dst = out + row * n_cols;
    for (int32_t c = threadIdx.x; c < n_cols; c += blockDim.x)
      dst[c] = RmsNormOf(in[c], inverse, weight[c]);
  }
}

// One thread per (token, head of q then k, pair).
__global__ void RopeKernel(float* __restrict__ q, float* __restrict__ k,
                           const int32_t* __restrict__ positions,
                           const double* __restrict__ inv_freq, int32_t n_tokens, int32_t n_heads,
                           int32_t n_kv_heads, int32_t head_dim, int32_t pairs, bool half_split) {
  const int32_t heads = n_heads + n_kv_heads;
  const int64_t n = int64_t(n_tokens) * heads * pairs;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t pair = int32_t(i % pairs);
    const int32_t head = int32_t(i / pairs % heads);
    const int32_t token = int32_t(i / pairs / heads);
    float* row = head < n_heads ? q + (int64_t(token) * n_heads + head) * head_dim
                                : k + (int64_t(token) * n_kv_heads + (head - n_heads)) * head_dim;
    const double angle = RopeAngle(positions[token], inv_freq[pair]);
    const RopePair at = RopePairOf(pair, pairs, half_split);
    const Rotated r =
        RotatePair(row[at.first], row[at.second], float(cos(angle)), float(sin(angle)));
    row[at.first] = r.first;
    row[at.second] = r.second;
  }
}

__global__ void GetRowsKernel(const float* __restrict__ in, const int32_t* __restrict__ rows,
                              float* __restrict__ out, int64_t n_rows, int64_t n_cols) {
  const int64_t n = n_rows * n_cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n_cols, c = i % n_cols;
    out[i] = in[int64_t(rows[r]) * n_cols + c];
  }
}

}  // namespace

cudaError_t LaunchBinary(cudaStream_t stream, BinaryOp op, const float* a, const float* b,
                         float* out, int64_t n) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd:
      BinaryKernel<BinaryOp::kAdd><<<GridFor(n), kBlock, 0, stream>>>(a, b, out, n);
      break;
    case BinaryOp::kSiluMul:
      BinaryKernel<BinaryOp::kSiluMul><<<GridFor(n), kBlock, 0, stream>>>(a, b, out, n);
      break;
    case BinaryOp::kGeluMul:
      BinaryKernel<BinaryOp::kGeluMul><<<GridFor(n), kBlock, 0, stream>>>(a, b, out, n);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchUnary(cudaStream_t stream, UnaryOp op, const float* x, float scalar, float* out,
                        int64_t n) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
    case UnaryOp::kScale:
      UnaryKernel<UnaryOp::kScale><<<GridFor(n), kBlock, 0, stream>>>(x, scalar, out, n);
      break;
    case UnaryOp::kSoftcap:
      UnaryKernel<UnaryOp::kSoftcap><<<GridFor(n), kBlock, 0, stream>>>(x, scalar, out, n);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRmsNorm(cudaStream_t stream, const float* x, const float* weight, float* out,
                          int64_t n_rows, int32_t n_cols, float eps) {
  if (n_rows <= 0 || n_cols <= 0) return cudaSuccess;
  const unsigned blocks = n_rows > kMaxBlocks ? kMaxBlocks : unsigned(n_rows);
  RmsNormKernel<<<blocks, kBlock, 0, stream>>>(x, weight, out, n_rows, n_cols, eps);
  return cudaGetLastError();
}

cudaError_t LaunchRope(cudaStream_t stream, float* q, float* k, const int32_t* positions,
                       const double* inv_freq, int32_t n_tokens, int32_t n_heads,
                       int32_t n_kv_heads, int32_t head_dim, int32_t pairs, bool half_split) {
  const int64_t n = int64_t(n_tokens) * (n_heads + n_kv_heads) * pairs;
  if (n <= 0) return cudaSuccess;
  RopeKernel<<<GridFor(n), kBlock, 0, stream>>>(q, k, positions, inv_freq, n_tokens, n_heads,
                                                n_kv_heads, head_dim, pairs, half_split);
  return cudaGetLastError();
}

cudaError_t LaunchGetRows(cudaStream_t stream, const float* in, const int32_t* rows, float* out,
                          int64_t n_rows, int64_t n_cols) {
  const int64_t n = n_rows * n_cols;
  if (n <= 0) return cudaSuccess;
  GetRowsKernel<<<GridFor(n), kBlock, 0, stream>>>(in, rows, out, n_rows, n_cols);
  return cudaGetLastError();
}

}  // namespace petrel::cuda
