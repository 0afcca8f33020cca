// mat_mul for Q4_0 weights against Q8_0 activations, with output rows in vector lanes: one
// Highway foreach_target TU.
//
// Why Q4_0 has a driver of its own: the generic one (quant_dot-inl.h) dots one (row, token)
// pair per 32-element block, which costs about seven vector ops for 32 products (unpack share,
// maddubs, offset, madd, convert, scale, fma). Here a block of kG rows (8 on 256-bit targets) is
// transposed so that each vector holds 4 consecutive elements of every row; a token then costs
// 8 x (broadcast 4 activation bytes, maddubs, 16-bit add) plus 5 ops for kG rows x 32 elements,
// and the nibble unpacking is shared by all tokens of a tile. The 16-bit sums cannot overflow:
// a pair is at most 2 x 15 x 127 and a lane adds 8 pairs (30480 < 32767).
//
// The math per (row, token) is that of every other path of this kernel: the exact integer
// sum(level * x) - 8 * sum(x) of each block, converted to float and accumulated with
// fma(sum, d_w * d_x, acc) in block order, then + bias. Prompts (weights transposed once per
// row group into an L1 scratch and reused for all tokens) and single tokens (transposed in
// registers, rows a stride apart) therefore give bit-identical results, whatever the batch, tile
// or row split.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q4_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/quant_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {  // for the HWY_SCALAR fallback
  using WBlock = quant::BlockQ4_0;
  static constexpr DType kType = DType::kQ4_0;
  static constexpr DType kActType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
};

#if PETREL_QUANT_SIMD
using quant::BlockQ4_0;
using quant::BlockQ8_0;
using QDU32 = hn::Repartition<uint32_t, QDU8>;
using QDU64 = hn::Repartition<uint64_t, QDU8>;

constexpr size_t kG = hn::MaxLanes(QDI32());  // rows per group: 8 (256-bit) or 4 (128-bit)

// Tokens per tile: kTileTokens 16-bit and f32 accumulators plus two weight vectors and
// temporaries must stay in registers (16 vector registers before AVX-512, 32 with it).
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kTileTokens = 6;
#else
constexpr size_t kTileTokens = 4;
#endif

// One block of a row group, transposed: lane l of q[s] holds bytes 4s..4s+3 of row l's nibbles
// (elements 4s..4s+3 in the low nibbles, 16+4s..16+4s+3 in the high ones).
struct GroupBlock {
  HWY_ALIGN uint8_t q[4][4 * kG];
  HWY_ALIGN float d[kG];
};

// Per (token, block) activation terms, computed once per call and chunk.
struct XTerms {
  float d;        // the block's scale
  int32_t sum8;   // 8 * sum of its int8 values (the Q4_0 level offset, applied in int32)
};

// Transposes block `b` of the kG rows `rows` into four vectors (see GroupBlock).
HWY_INLINE void TransposeBlock(const BlockQ4_0* const* HWY_RESTRICT rows, size_t b,
                               hn::Vec<QDU8> (&p)[4]) {
  const QDU8 du8;
  const QDU32 du32;
  const QDU64 du64;
  hn::Vec<QDU32> a[4];
  for (size_t l = 0; l < 4; ++l) {
    if constexpr (kG == 8) {
      const hn::Half<QDU8> dh;
      a[l] = hn::BitCast(du32, hn::Combine(du8, hn::LoadU(dh, rows[l + 4][b].qs),
                                           hn::LoadU(dh, rows[l][b].qs)));
    } else {
      a[l] = hn::BitCast(du32, hn::LoadU(du8, rows[l][b].qs));
    }
  }
  // The 4 x 4 transpose of 32-bit words within each 128-bit half.
  const auto t0 = hn::BitCast(du64, hn::InterleaveLower(du32, a[0], a[1]));
  const auto t1 = hn::BitCast(du64, hn::InterleaveUpper(du32, a[0], a[1]));
  const auto t2 = hn::BitCast(du64, hn::InterleaveLower(du32, a[2], a[3]));
  const auto t3 = hn::BitCast(du64, hn::InterleaveUpper(du32, a[2], a[3]));
  p[0] = hn::BitCast(du8, hn::InterleaveLower(du64, t0, t2));
  p[1] = hn::BitCast(du8, hn::InterleaveUpper(du64, t0, t2));
  p[2] = hn::BitCast(du8, hn::InterleaveLower(du64, t1, t3));
  p[3] = hn::BitCast(du8, hn::InterleaveUpper(du64, t1, t3));
}

HWY_INLINE hn::Vec<QDF> BlockScales(const BlockQ4_0* const* HWY_RESTRICT rows, size_t b) {
  HWY_ALIGN float d[kG];
  for (size_t l = 0; l < kG; ++l) d[l] = HalfToF32(rows[l][b].d);
  return hn::Load(QDF(), d);
}

// The 4 activation bytes of element group g (elements 4g..4g+3) in every 32-bit lane.
HWY_INLINE hn::Vec<QDI8> BroadcastGroup(const BlockQ8_0& x, size_t g) {
  uint32_t word;
  std::memcpy(&word, x.qs + 4 * g, sizeof(word));
  return hn::BitCast(QDI8(), hn::Set(QDU32(), word));
}

// acc[t] (lanes = rows) += the T tokens' products with one transposed block.
template <size_t T>
HWY_INLINE void DotBlock(const hn::Vec<QDU8> (&p)[4], hn::Vec<QDF> d_w,
                         const BlockQ8_0* const* HWY_RESTRICT x, const XTerms* const* terms,
                         size_t b, hn::Vec<QDF> (&acc)[T]) {
  const QDU8 du8;
  const hn::Repartition<uint16_t, QDU8> du16;
  const QDI32 d32;
  const QDF df;
  const auto mask = hn::Set(du8, 0x0F);
  hn::Vec<QDI16> sum16[T];
  for (size_t s = 0; s < 4; ++s) {
    const auto lo = hn::And(p[s], mask);
    const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, p[s]))), mask);
    for (size_t t = 0; t < T; ++t) {
      const auto prod = hn::Add(MulPairsU8I8(lo, BroadcastGroup(x[t][b], s)),
                                MulPairsU8I8(hi, BroadcastGroup(x[t][b], s + 4)));
      sum16[t] = s == 0 ? prod : hn::Add(sum16[t], prod);
    }
  }
  const auto ones = hn::Set(QDI16(), 1);
  for (size_t t = 0; t < T; ++t) {
    const XTerms& xt = terms[t][b];
    const auto isum = hn::Sub(MulPairsI16(sum16[t], ones), hn::Set(d32, xt.sum8));
    acc[t] = hn::MulAdd(hn::ConvertTo(df, isum), hn::Mul(d_w, hn::Set(df, xt.d)), acc[t]);
  }
}

// The rows' results for one token: out[row_of(l)] = acc lane l + bias, for the first n lanes.
template <class RowOf>
HWY_INLINE void StoreLanes(hn::Vec<QDF> acc, size_t n, const RowOf& row_of,
                           const float* HWY_RESTRICT bias, float* HWY_RESTRICT out) {
  HWY_ALIGN float lanes[kG];
  hn::Store(acc, QDF(), lanes);
  for (size_t l = 0; l < n; ++l) {
    const size_t row = row_of(l);
    out[row] = lanes[l] + (bias ? bias[row] : 0.0f);
  }
}

// Fills terms[b] for one activation row.
HWY_INLINE void ComputeXTerms(const BlockQ8_0* HWY_RESTRICT x, size_t n_blocks,
                              XTerms* HWY_RESTRICT terms) {
  const QDI8 d8;
  const QDI32 d32;
  const auto ones8 = hn::Set(QDU8(), 1);
  const auto ones16 = hn::Set(QDI16(), 1);
  constexpr size_t kLanes = hn::MaxLanes(d8);
  for (size_t b = 0; b < n_blocks; ++b) {
    auto sum = hn::Zero(d32);
    for (size_t v = 0; v < kQVecs; ++v) {
      const auto xv = hn::LoadU(d8, x[b].qs + v * kLanes);
      sum = hn::Add(sum, MulPairsI16(MulPairsU8I8(ones8, xv), ones16));
    }
    terms[b].d = HalfToF32(x[b].d);
    terms[b].sum8 = 8 * hn::GetLane(hn::SumOfLanes(d32, sum));
  }
}

// Per-thread scratch that grows to the largest problem seen and then stays.
template <class T>
T* Scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Single token: groups of kG rows `step` apart, so each lane reads a long sequential stream
// (the hardware prefetcher follows those at full bandwidth), transposed in registers.
void MatVec(const uint8_t* w, size_t w_row_bytes, size_t n_blocks, const BlockQ8_0* x,
            const XTerms* terms, const float* bias, float* out, size_t row_begin,
            size_t row_end) {
  const QDF df;
  const size_t step = (row_end - row_begin) / kG;
  const size_t n_groups = step + ((row_end - row_begin) % kG != 0 ? 1 : 0);
  for (size_t i = 0; i < n_groups; ++i) {
    // Group i < step takes rows row_begin + i + l * step; the last, partial one the rows left
    // over (its missing lanes repeat its last row and are not stored).
    const bool tail = i == step;
    const size_t tail_begin = row_begin + kG * step;
    const size_t n_lanes = tail ? row_end - tail_begin : kG;
    auto row_of = [&](size_t l) {
      return tail ? tail_begin + std::min(l, n_lanes - 1) : row_begin + i + l * step;
    };
    const BlockQ4_0* rows[kG];
    for (size_t l = 0; l < kG; ++l) {
      rows[l] = reinterpret_cast<const BlockQ4_0*>(w + row_of(l) * w_row_bytes);
    }
    hn::Vec<QDF> acc[1] = {hn::Zero(df)};
    for (size_t b = 0; b < n_blocks; ++b) {
      hn::Vec<QDU8> p[4];
      TransposeBlock(rows, b, p);
      DotBlock<1>(p, BlockScales(rows, b), &x, &terms, b, acc);
    }
    StoreLanes(acc[0], n_lanes, row_of, bias, out);
  }
}

// Tokens [t_begin, t_end) against one group already transposed into `packed`, in tiles of T.
template <size_t T>
HWY_INLINE size_t GroupTiles(const GroupBlock* HWY_RESTRICT packed, size_t n_blocks,
                             const uint8_t* xq, size_t xq_row_bytes, const XTerms* terms,
                             size_t t_begin, size_t t_end, size_t t_first, size_t row,
                             size_t n_lanes, const float* bias, float* out, size_t out_stride) {
  const QDU8 du8;
  const QDF df;
  size_t t = t_begin;
  for (; t + T <= t_end; t += T) {
    const BlockQ8_0* x[T];
    const XTerms* tt[T];
    hn::Vec<QDF> acc[T];
    for (size_t k = 0; k < T; ++k) {
      x[k] = reinterpret_cast<const BlockQ8_0*>(xq + (t + k) * xq_row_bytes);
      tt[k] = terms + (t + k - t_first) * n_blocks;
      acc[k] = hn::Zero(df);
    }
    for (size_t b = 0; b < n_blocks; ++b) {
      const hn::Vec<QDU8> p[4] = {hn::Load(du8, packed[b].q[0]), hn::Load(du8, packed[b].q[1]),
                                  hn::Load(du8, packed[b].q[2]), hn::Load(du8, packed[b].q[3])};
      DotBlock<T>(p, hn::Load(df, packed[b].d), x, tt, b, acc);
    }
    for (size_t k = 0; k < T; ++k) {
      StoreLanes(acc[k], n_lanes, [&](size_t l) { return row + l; }, bias,
                 out + (t + k) * out_stride);
    }
  }
  return t;
}

// Several tokens: each group of kG consecutive rows is transposed once per chunk of tokens into
// an L1 scratch and then used by every tile of the chunk.
void MatMat(const uint8_t* w, size_t w_row_bytes, size_t n_blocks, const uint8_t* xq,
            size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
            size_t out_stride, size_t row_begin, size_t row_end) {
  constexpr size_t kTokenChunk = 64;  // whose activations stay in L2 while the groups pass
  thread_local std::vector<GroupBlock> packed_storage;
  thread_local std::vector<XTerms> terms_storage;
  GroupBlock* packed = Scratch(packed_storage, n_blocks);
  XTerms* terms = Scratch(terms_storage, kTokenChunk * n_blocks);
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t t1 = std::min(n_tokens, t0 + kTokenChunk);
    for (size_t t = t0; t < t1; ++t) {
      ComputeXTerms(reinterpret_cast<const BlockQ8_0*>(xq + t * xq_row_bytes), n_blocks,
                    terms + (t - t0) * n_blocks);
    }
    for (size_t row = row_begin; row < row_end; row += kG) {
      const size_t n_lanes = std::min(kG, row_end - row);
      const BlockQ4_0* rows[kG];
      for (size_t l = 0; l < kG; ++l) {
        rows[l] = reinterpret_cast<const BlockQ4_0*>(w + (row + std::min(l, n_lanes - 1)) *
                                                             w_row_bytes);
      }
      for (size_t b = 0; b < n_blocks; ++b) {
        hn::Vec<QDU8> p[4];
        TransposeBlock(rows, b, p);
        for (size_t s = 0; s < 4; ++s) hn::Store(p[s], QDU8(), packed[b].q[s]);
        hn::Store(BlockScales(rows, b), QDF(), packed[b].d);
      }
      size_t t = GroupTiles<kTileTokens>(packed, n_blocks, xq, xq_row_bytes, terms, t0, t1, t0,
                                         row, n_lanes, bias, out, out_stride);
      GroupTiles<1>(packed, n_blocks, xq, xq_row_bytes, terms, t, t1, t0, row, n_lanes, bias,
                    out, out_stride);
    }
  }
}
#endif  // PETREL_QUANT_SIMD

}  // namespace

void MatMulQ4_0T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                 size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                 size_t out_stride, size_t row_begin, size_t row_end) {
#if !PETREL_QUANT_SIMD
  MatMulQuantScalar<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out,
                            out_stride, row_begin, row_end);
#else
  if (row_begin >= row_end || n_tokens == 0) return;
  const uint8_t* w_bytes = static_cast<const uint8_t*>(w);
  const size_t n_blocks = n_in / quant::kQK;
  if (n_tokens == 1) {
    thread_local std::vector<XTerms> terms_storage;
    XTerms* terms = Scratch(terms_storage, n_blocks);
    const auto* x = static_cast<const BlockQ8_0*>(xq);
    ComputeXTerms(x, n_blocks, terms);
    MatVec(w_bytes, w_row_bytes, n_blocks, x, terms, bias, out, row_begin, row_end);
    return;
  }
  MatMat(w_bytes, w_row_bytes, n_blocks, static_cast<const uint8_t*>(xq), xq_row_bytes, n_tokens,
         bias, out, out_stride, row_begin, row_end);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(MatMulQ4_0T);

void MatMulQ4_0(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ4_0T)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
