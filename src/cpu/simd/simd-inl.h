// Per-target SIMD helpers shared by the CPU kernels: loading f32/f16/bf16 as f32 vectors, padded
// tails and the fixed-order dot product that makes results independent of batching.

// Per-target include guard: this header is re-included once per Highway target.
#if defined(PETREL_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_SIMD_INL_H_
#undef PETREL_CPU_SIMD_INL_H_
#else
#define PETREL_CPU_SIMD_INL_H_
#endif

#include <cstddef>
#include <cstring>

#include "hwy/aligned_allocator.h"  // AllocateAligned
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Upper bound on f32 lanes of any target, for stack buffers holding one zero-padded vector.
constexpr size_t kMaxF32Lanes = HWY_MAX_BYTES / sizeof(float);

// One vector of `d`'s lanes read from `p` (unaligned) and widened to f32. F16 uses F16C on AVX2
// and later; older targets emulate it (exact for finite values, which is what weights hold).
template <class D>
HWY_INLINE hn::Vec<D> LoadAsF32(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadAsF32(D d, const hwy::float16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::float16_t, D> d16;
  return hn::PromoteTo(d, hn::LoadU(d16, p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadAsF32(D d, const hwy::bfloat16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::bfloat16_t, D> d16;
  return hn::PromoteTo(d, hn::LoadU(d16, p));
}

// Copies the `n` (< lanes) elements at `src` into `padded` and zeroes the rest of its
// kMaxF32Lanes elements, so a tail can go through the same vector code as full vectors.
template <typename T>
HWY_INLINE void CopyPadded(const T* HWY_RESTRICT src, size_t n, T* HWY_RESTRICT padded) {
  std::memset(padded, 0, kMaxF32Lanes * sizeof(T));
  std::memcpy(padded, src, n * sizeof(T));
}

// Per-thread scratch that grows to the largest problem seen and then stays, aligned for vector
// loads and members (std::vector's allocator was seen to give 16-byte alignment here).
template <class T>
struct Scratch {
  hwy::AlignedFreeUniquePtr<T[]> data;
  size_t size = 0;
};

template <class T>
HWY_INLINE T* GrowScratch(Scratch<T>& scratch, size_t n) {
  if (scratch.size < n) {
    scratch.data = hwy::AllocateAligned<T>(n);
    scratch.size = n;
  }
  return scratch.data.get();
}

// Adds the products of one vector pair to the accumulator that owns vector `vec_index`.
// Dot layout used by every dot in this backend: full vector k of the row goes to acc[k % 2],
// the zero-padded tail to acc[n_full % 2], and the result is SumOfLanes(acc[0] + acc[1]). It
// depends only on the row length, so any blocking of rows or tokens gives identical bits.
template <class V>
HWY_INLINE void Accumulate(size_t vec_index, V w, V x, V& acc0, V& acc1) {
  if (vec_index & 1) {
    acc1 = hn::MulAdd(w, x, acc1);
  } else {
    acc0 = hn::MulAdd(w, x, acc0);
  }
}

template <class D, class V>
HWY_INLINE float FinishDot(D d, V acc0, V acc1) {
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
}

// dot(a, b) over n elements with the layout above; `a_tail` holds a's last n % lanes elements
// zero-padded (callers that reuse `a` prepare it once). `b` is f32, f16 or bf16.
template <class D, typename TB>
HWY_INLINE float Dot(D d, const float* HWY_RESTRICT a, const float* HWY_RESTRICT a_tail,
                     const TB* HWY_RESTRICT b, size_t n) {
  const size_t lanes = hn::Lanes(d);
  const size_t n_full = n / lanes;
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  size_t k = 0;
  for (; k + 2 <= n_full; k += 2) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + k * lanes), LoadAsF32(d, b + k * lanes), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + (k + 1) * lanes), LoadAsF32(d, b + (k + 1) * lanes), acc1);
  }
  if (k < n_full) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + k * lanes), LoadAsF32(d, b + k * lanes), acc0);
  }
  const size_t tail = n - n_full * lanes;
  if (tail != 0) {
    HWY_ALIGN TB b_tail[kMaxF32Lanes];
    CopyPadded(b + n_full * lanes, tail, b_tail);
    Accumulate(n_full, hn::LoadU(d, a_tail), LoadAsF32(d, b_tail), acc0, acc1);
  }
  return FinishDot(d, acc0, acc1);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
