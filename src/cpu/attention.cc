// attention: one token's softmax(q k^T * scale) v over a paged F32 or F16 KV cache, computed
// flash-attention style (tiles of keys, online softmax) with K/V rows shared across GQA heads.
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

// Keys per tile of the online softmax: scores of one tile for every query head of a KV group
// stay in registers/L1 and are never materialised for the whole context.
constexpr size_t kKeyTile = 16;

// Flash-attention-style decode/prefill for one token: for each KV head, walk the sequence's
// blocks in tiles of keys; each K row is loaded once for all query heads that share it (GQA),
// each head keeps a running max `m`, a running sum `l` and an unnormalised output, rescaled when
// the max grows. A head's result depends only on its own q and the cache, never on which other
// heads or tokens are computed alongside.
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

  for (size_t kv_head = head_begin / group; kv_head * group < head_end; ++kv_head) {
    const size_t h0 = HWY_MAX(head_begin, kv_head * group);
    const size_t h1 = HWY_MIN(head_end, (kv_head + 1) * group);
    const size_t n_q = h1 - h0;  // query heads of this group handled here
    // Per head: padded q tail, running max and sum; output accumulates in place.
    HWY_ALIGN float q_tails[64][kMaxF32Lanes];
    float running_max[64], running_sum[64];
    for (size_t base = h0; base < h1; base += 64) {
      const size_t n_chunk = HWY_MIN(size_t(64), h1 - base);
      for (size_t i = 0; i < n_chunk; ++i) {
        const float* q = args.q + (base + i) * head_dim;
        CopyPadded(q + dim_vec, head_dim - dim_vec, q_tails[i]);
        running_max[i] = -INFINITY;
        running_sum[i] = 0.0f;
        std::memset(args.out + (base + i) * head_dim, 0, head_dim * sizeof(float));
      }
      float scores[64][kKeyTile];
      for (size_t p0 = 0; p0 < args.n_ctx;) {
        // A tile never crosses a block, so its K/V rows are contiguous.
        const size_t block = size_t(args.block_table[p0 / kv.block_tokens]);
        const size_t slot = p0 % kv.block_tokens;
        const size_t n_keys = HWY_MIN(HWY_MIN(kKeyTile, kv.block_tokens - slot), args.n_ctx - p0);
        const size_t row0 = (block * kv.block_tokens + slot) * kv.row_elems + kv_head * head_dim;
        for (size_t key = 0; key < n_keys; ++key) {
          const TKV* HWY_RESTRICT k_row = k_cache + row0 + key * kv.row_elems;
          for (size_t i = 0; i < n_chunk; ++i) {
            scores[i][key] = args.scale * Dot(d, args.q + (base + i) * head_dim, q_tails[i], k_row, head_dim);
          }
        }
        for (size_t i = 0; i < n_chunk; ++i) {
          float tile_max = running_max[i];
          for (size_t key = 0; key < n_keys; ++key) tile_max = HWY_MAX(tile_max, scores[i][key]);
          const float correction = std::exp(running_max[i] - tile_max);  // 0 on the first tile
          float* HWY_RESTRICT out = args.out + (base + i) * head_dim;
          if (correction != 1.0f) {
            const auto c = hn::Set(d, correction);
            size_t j = 0;
            for (; j < dim_vec; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, out + j), c), d, out + j);
            for (; j < head_dim; ++j) out[j] *= correction;
          }
          float tile_sum = 0.0f;
          for (size_t key = 0; key < n_keys; ++key) {
            const float weight = std::exp(scores[i][key] - tile_max);
            tile_sum += weight;
            const TKV* HWY_RESTRICT v = v_cache + row0 + key * kv.row_elems;  // (head_dim)
            const auto w = hn::Set(d, weight);
            size_t j = 0;
            for (; j < dim_vec; j += lanes) {
              hn::StoreU(hn::MulAdd(w, LoadAsF32(d, v + j), hn::LoadU(d, out + j)), d, out + j);
            }
            for (; j < head_dim; ++j) out[j] += weight * ScalarToF32(v[j]);
          }
          running_sum[i] = running_sum[i] * correction + tile_sum;
          running_max[i] = tile_max;
        }
        p0 += n_keys;
      }
      for (size_t i = 0; i < n_chunk; ++i) {
        float* HWY_RESTRICT out = args.out + (base + i) * head_dim;
        const float inv_sum = 1.0f / running_sum[i];
        const auto inv = hn::Set(d, inv_sum);
        size_t j = 0;
        for (; j < dim_vec; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, out + j), inv), d, out + j);
        for (; j < head_dim; ++j) out[j] *= inv_sum;
      }
    }
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
