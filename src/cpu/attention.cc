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
#include <type_traits>
#include <vector>

#include "core/status.h"  // PETREL_CHECK, PETREL_DCHECK
#include "cpu/kernel_entry_points.h"
#include "cpu/simd-inl.h"               // Dot, LoadAsF32, CopyPadded
#include "quant/blocks.h"               // BlockQ8_0
#include "quant/f16.h"                  // F16ToF32
#include "quant/quantize.h"             // DequantizeRow

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

// Running state of one query head over the key tiles.
struct HeadState {
  float running_max;
  float running_sum;
};

// One tile of `n_keys` keys for the query heads [0, n_q): K/V rows (head slices) are `stride`
// elements apart. Scores of the tile stay in `scores`; outputs accumulate unnormalised.
template <typename TKV>
HWY_INLINE void AttendTile(const float* HWY_RESTRICT q, const float (*q_tails)[kMaxF32Lanes],
                           size_t n_q, size_t head_dim, float scale, const TKV* HWY_RESTRICT k_rows,
                           const TKV* HWY_RESTRICT v_rows, size_t stride, size_t n_keys,
                           HeadState* state, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t dim_vec = head_dim - head_dim % lanes;
  float scores[64][kKeyTile];
  for (size_t key = 0; key < n_keys; ++key) {
    const TKV* HWY_RESTRICT k_row = k_rows + key * stride;
    for (size_t i = 0; i < n_q; ++i) scores[i][key] = scale * Dot(d, q + i * head_dim, q_tails[i], k_row, head_dim);
  }
  for (size_t i = 0; i < n_q; ++i) {
    float tile_max = state[i].running_max;
    for (size_t key = 0; key < n_keys; ++key) tile_max = HWY_MAX(tile_max, scores[i][key]);
    const float correction = std::exp(state[i].running_max - tile_max);  // 0 on the first tile
    float* HWY_RESTRICT o = out + i * head_dim;
    if (correction != 1.0f) {
      const auto c = hn::Set(d, correction);
      size_t j = 0;
      for (; j < dim_vec; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, o + j), c), d, o + j);
      for (; j < head_dim; ++j) o[j] *= correction;
    }
    float tile_sum = 0.0f;
    for (size_t key = 0; key < n_keys; ++key) {
      const float weight = std::exp(scores[i][key] - tile_max);
      tile_sum += weight;
      const TKV* HWY_RESTRICT v = v_rows + key * stride;  // (head_dim)
      const auto w = hn::Set(d, weight);
      size_t j = 0;
      for (; j < dim_vec; j += lanes) hn::StoreU(hn::MulAdd(w, LoadAsF32(d, v + j), hn::LoadU(d, o + j)), d, o + j);
      for (; j < head_dim; ++j) o[j] += weight * ScalarToF32(v[j]);
    }
    state[i].running_sum = state[i].running_sum * correction + tile_sum;
    state[i].running_max = tile_max;
  }
}

// Flash-attention-style decode/prefill for one token: for each KV head, walk the sequence's
// blocks in tiles of keys; each K row is loaded once for all query heads that share it (GQA),
// each head keeps a running max, a running sum and an unnormalised output, rescaled when the
// max grows. A head's result depends only on its own q and the cache, never on which other
// heads or tokens are computed alongside. TKV is the cache element (float, float16_t), or
// BlockQ8_0 for a Q8_0 cache, whose tiles are dequantized to f32 first.
template <typename TKV>
void AttentionHeads(const AttentionArgs& args, size_t head_begin, size_t head_end) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const PagedKvView& kv = *args.kv;
  const size_t head_dim = args.head_dim;
  const size_t group = args.n_heads / args.n_kv_heads;  // query heads per KV head
  const size_t dim_vec = head_dim - head_dim % lanes;
  constexpr bool kQ8 = std::is_same_v<TKV, quant::BlockQ8_0>;
  const size_t row_bytes = *RowBytes(kv.dtype, kv.row_elems);
  const size_t head_bytes = *RowBytes(kv.dtype, head_dim);
  const char* k_cache = static_cast<const char*>(kv.k);
  const char* v_cache = static_cast<const char*>(kv.v);
  thread_local std::vector<float> k_tile, v_tile;  // dequantized Q8_0 tiles, (kKeyTile, head_dim)
  if (kQ8 && k_tile.size() < kKeyTile * head_dim) {
    k_tile.resize(kKeyTile * head_dim);
    v_tile.resize(kKeyTile * head_dim);
  }

  for (size_t kv_head = head_begin / group; kv_head * group < head_end; ++kv_head) {
    const size_t h0 = HWY_MAX(head_begin, kv_head * group);
    const size_t h1 = HWY_MIN(head_end, (kv_head + 1) * group);
    HWY_ALIGN float q_tails[64][kMaxF32Lanes];
    HeadState state[64];
    for (size_t base = h0; base < h1; base += 64) {
      const size_t n_q = HWY_MIN(size_t(64), h1 - base);
      const float* q = args.q + base * head_dim;  // (n_q, head_dim)
      float* out = args.out + base * head_dim;    // (n_q, head_dim)
      for (size_t i = 0; i < n_q; ++i) {
        CopyPadded(q + i * head_dim + dim_vec, head_dim - dim_vec, q_tails[i]);
        state[i] = {-INFINITY, 0.0f};
        std::memset(out + i * head_dim, 0, head_dim * sizeof(float));
      }
      for (size_t p0 = 0; p0 < args.n_ctx;) {
        // A tile never crosses a block, so its rows are evenly spaced.
        const size_t block = size_t(args.block_table[p0 / kv.block_tokens]);
        const size_t slot = p0 % kv.block_tokens;
        const size_t n_keys = HWY_MIN(HWY_MIN(kKeyTile, kv.block_tokens - slot), args.n_ctx - p0);
        const size_t offset = (block * kv.block_tokens + slot) * row_bytes + kv_head * head_bytes;
        if constexpr (kQ8) {
          for (size_t key = 0; key < n_keys; ++key) {
            DequantizeRow(DType::kQ8_0, k_cache + offset + key * row_bytes, k_tile.data() + key * head_dim, head_dim);
            DequantizeRow(DType::kQ8_0, v_cache + offset + key * row_bytes, v_tile.data() + key * head_dim, head_dim);
          }
          AttendTile<float>(q, q_tails, n_q, head_dim, args.scale, k_tile.data(), v_tile.data(), head_dim,
                            n_keys, state, out);
        } else {
          AttendTile<TKV>(q, q_tails, n_q, head_dim, args.scale,
                          reinterpret_cast<const TKV*>(k_cache + offset), reinterpret_cast<const TKV*>(v_cache + offset),
                          kv.row_elems, n_keys, state, out);
        }
        p0 += n_keys;
      }
      for (size_t i = 0; i < n_q; ++i) {
        float* HWY_RESTRICT o = out + i * head_dim;
        const float inv_sum = 1.0f / state[i].running_sum;
        const auto inv = hn::Set(d, inv_sum);
        size_t j = 0;
        for (; j < dim_vec; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, o + j), inv), d, o + j);
        for (; j < head_dim; ++j) o[j] *= inv_sum;
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
    case DType::kQ8_0:
      return AttentionHeads<quant::BlockQ8_0>(args, head_begin, head_end);
    default:
      break;
  }
  PETREL_CHECK(false && "attention: KV cache must be F32, F16 or Q8_0");
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
