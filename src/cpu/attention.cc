// attention: one token's softmax(q k^T * scale) v over a paged F32 or F16 KV cache, per head.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cmath>
#include <cstring>

#include "core/status.h"  // PETREL_CHECK, PETREL_DCHECK
#include "cpu/kernel_entry_points.h"
#include "cpu/simd-inl.h"               // Dot, LoadAsF32, CopyPadded
#include "hwy/contrib/math/math-inl.h"  // Exp
#include "hwy/foreach_target.h"         // IWYU pragma: keep
#include "quant/f16.h"                  // F16ToF32

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE float ScalarToF32(float value) { return value; }
HWY_INLINE float ScalarToF32(hwy::float16_t value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return F16ToF32(bits);
}

// scores[p] = exp(scores[p] - max_score) for p in [0, n); returns their sum.
template <class D>
HWY_INLINE float ExpAndSum(D d, float* HWY_RESTRICT scores, size_t n, float max_score) {
  const size_t lanes = hn::Lanes(d);
  const auto max_v = hn::Set(d, max_score);
  auto sum = hn::Zero(d);
  size_t p = 0;
  for (; p + lanes <= n; p += lanes) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, scores + p), max_v));
    hn::StoreU(e, d, scores + p);
    sum = hn::Add(sum, e);
  }
  if (p < n) {
    // Padding lanes hold max_score (exp(0), in Exp's valid range) and are masked from the sum.
    HWY_ALIGN float tail[kMaxF32Lanes];
    for (size_t j = 0; j < lanes; ++j) tail[j] = p + j < n ? scores[p + j] : max_score;
    const auto e = hn::Exp(d, hn::Sub(hn::Load(d, tail), max_v));
    hn::Store(e, d, tail);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, n - p), e));
    for (size_t j = 0; p + j < n; ++j) scores[p + j] = tail[j];
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

template <typename TKV>
void AttentionHeads(const AttentionArgs& args, size_t head_begin, size_t head_end) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const PagedKvView& kv = *args.kv;
  const size_t head_dim = args.head_dim;
  const size_t group = args.n_heads / args.n_kv_heads;  // query heads per KV head
  const size_t dim_vec = head_dim - head_dim % lanes;
  const TKV* HWY_RESTRICT k_cache = static_cast<const TKV*>(kv.k);
  const TKV* HWY_RESTRICT v_cache = static_cast<const TKV*>(kv.v);
  float* HWY_RESTRICT scores = args.scores;  // (n_ctx)
  // Element offset of position `kv_pos`'s row for `kv_head` in K or V.
  auto row_offset = [&](size_t kv_pos, size_t kv_head) {
    const size_t block = size_t(args.block_table[kv_pos / kv.block_tokens]);
    const size_t slot = kv_pos % kv.block_tokens;
    return (block * kv.block_tokens + slot) * kv.row_elems + kv_head * head_dim;
  };

  for (size_t h = head_begin; h < head_end; ++h) {
    const size_t kv_head = h / group;
    const float* HWY_RESTRICT q = args.q + h * head_dim;  // (head_dim)
    float* HWY_RESTRICT out = args.out + h * head_dim;    // (head_dim)
    HWY_ALIGN float q_tail[kMaxF32Lanes];
    CopyPadded(q + dim_vec, head_dim - dim_vec, q_tail);

    float max_score = -INFINITY;
    for (size_t p = 0; p < args.n_ctx; ++p) {
      scores[p] = args.scale * Dot(d, q, q_tail, k_cache + row_offset(p, kv_head), head_dim);
      max_score = HWY_MAX(max_score, scores[p]);
    }
    const float sum = ExpAndSum(d, scores, args.n_ctx, max_score);

    // out = sum_p scores[p] * v_p, normalised once at the end.
    std::memset(out, 0, head_dim * sizeof(float));
    for (size_t p = 0; p < args.n_ctx; ++p) {
      const TKV* HWY_RESTRICT v = v_cache + row_offset(p, kv_head);  // (head_dim)
      const auto weight = hn::Set(d, scores[p]);
      size_t i = 0;
      for (; i < dim_vec; i += lanes) {
        hn::StoreU(hn::MulAdd(weight, LoadAsF32(d, v + i), hn::LoadU(d, out + i)), d, out + i);
      }
      for (; i < head_dim; ++i) out[i] += scores[p] * ScalarToF32(v[i]);
    }
    const auto inv_sum = hn::Set(d, 1.0f / sum);
    size_t i = 0;
    for (; i < dim_vec; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, out + i), inv_sum), d, out + i);
    for (; i < head_dim; ++i) out[i] *= 1.0f / sum;
  }
}

void AttentionT(const AttentionArgs& args, size_t head_begin, size_t head_end) {
  switch (args.kv->dtype) {
    case DType::kF32:
      return AttentionHeads<float>(args, head_begin, head_end);
    case DType::kF16:
      return AttentionHeads<hwy::float16_t>(args, head_begin, head_end);
    default:
      break;
  }
  PETREL_CHECK(false && "attention: KV cache must be F32 or F16");
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(AttentionT);

void Attention(const AttentionArgs& args, size_t head_begin, size_t head_end) {
  PETREL_DCHECK(args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0);
  PETREL_DCHECK(args.n_ctx > 0);
  HWY_DYNAMIC_DISPATCH(AttentionT)(args, head_begin, head_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
