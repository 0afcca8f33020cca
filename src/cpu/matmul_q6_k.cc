// mat_mul for Q6_K weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q6_k.cc"
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

struct Format {
  using WBlock = quant::BlockQ6_K;
  static constexpr DType kType = DType::kQ6_K;
  static constexpr DType kActType = DType::kQ8_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 32;
  static constexpr bool kHasMins = false;
  static constexpr size_t kDecodeRows = 2;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = 1;
  static constexpr size_t kTileTokens = 4;

  static constexpr bool kDirect = true;

  // Per 128 elements: 64 bytes of low nibbles (ql) and 32 bytes of 2-bit high parts (qh); chunk
  // 4 half + k takes nibble k / 2 of ql[l + 32 (k % 2)] and bits 2k of qh[l]. Levels 0..63 with
  // offset 32 and a signed 8-bit scale per 16 elements: isum = sum(scale * level * x), and the
  // offset goes through the activation block sums: min_sum lanes sum to sum(32 * scale * bsum),
  // dmin = d.
  template <size_t T>
  static HWY_INLINE void DotDirect(const WBlock& block, const quant::BlockQ8_K* const (&x)[T],
                                   QVI32 (&isum)[T], QVI32 (&min_sum)[T], float& d, float& dmin) {
    const QDU8 du8;
    const QDI8 d8;
    const QDI16 d16;
    const hn::Repartition<uint16_t, QDU8> du16;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const auto mask = hn::Set(du8, 0x0F), high = hn::Set(du8, 0x30);
    for (size_t t = 0; t < T; ++t) isum[t] = hn::Zero(QDI32());
    // Scales of even sub-blocks (first halves of chunks) in the low 8 bytes, odd in the high 8,
    // widened: lane C of block 0 / block 1 (AVX2) or of vector 0 / 1 (SSE4) scales chunk C.
    const hn::CappedTag<int8_t, 16> d16b;
    HWY_ALIGN static constexpr int8_t kEvenOdd[16] = {0, 2, 4, 6, 8, 10, 12, 14,
                                                      1, 3, 5, 7, 9, 11, 13, 15};
    const auto eo = hn::TableLookupBytes(hn::LoadU(d16b, block.scales), hn::Load(d16b, kEvenOdd));
    QVI16 sc_eo[kQVecs];
    PromoteBytes16(hn::Repartition<int16_t, QDU8>(), eo, sc_eo);
    Unroll<2>([&](auto half_constant) HWY_ATTR {
      constexpr size_t half = decltype(half_constant)::value;
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      QVI16 sc[4][kQVecs];
      for (size_t v = 0; v < kQVecs; ++v) {
        sc[0][v] = hn::Broadcast<4 * half + 0>(sc_eo[v]);
        sc[1][v] = hn::Broadcast<4 * half + 1>(sc_eo[v]);
        sc[2][v] = hn::Broadcast<4 * half + 2>(sc_eo[v]);
        sc[3][v] = hn::Broadcast<4 * half + 3>(sc_eo[v]);
      }
      for (size_t v = 0; v < kQVecs; ++v) {
        const size_t i = v * kLanes;
        const auto a = hn::LoadU(du8, ql + i);
        const auto b = hn::LoadU(du8, ql + 32 + i);
        const auto h = hn::BitCast(du16, hn::LoadU(du8, qh + i));
        const auto a16 = hn::BitCast(du16, a), b16 = hn::BitCast(du16, b);
        QVU8 q[4];
        q[0] = hn::Or(hn::And(a, mask), hn::And(hn::BitCast(du8, hn::ShiftLeft<4>(h)), high));
        q[1] = hn::Or(hn::And(b, mask), hn::And(hn::BitCast(du8, hn::ShiftLeft<2>(h)), high));
        q[2] = hn::Or(hn::And(hn::BitCast(du8, hn::ShiftRight<4>(a16)), mask),
                      hn::And(hn::BitCast(du8, h), high));
        q[3] = hn::Or(hn::And(hn::BitCast(du8, hn::ShiftRight<4>(b16)), mask),
                      hn::And(hn::BitCast(du8, hn::ShiftRight<2>(h)), high));
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xq = x[t]->qs + 128 * half + i;
          QVI32 s = hn::Zero(QDI32());
          for (size_t k = 0; k < 4; ++k) {
            s = hn::Add(s, MulPairsI16(MulPairsU8I8(q[k], hn::LoadU(d8, xq + 32 * k)), sc[k][v]));
          }
          isum[t] = hn::Add(isum[t], s);
        }
      }
    });
    const QDI32 d32;
    constexpr size_t kLanes16 = hn::MaxLanes(QDI16());
    QVI16 scales16[kQVecs];
    for (size_t v = 0; v < kQVecs; ++v) {
      const hn::Rebind<int8_t, QDI16> d8h;
      scales16[v] = hn::PromoteTo(d16, hn::LoadU(d8h, block.scales + v * kLanes16));
    }
    for (size_t t = 0; t < T; ++t) {
      QVI32 m = hn::Zero(d32);
      for (size_t v = 0; v < kQVecs; ++v) {
        m = hn::Add(m, MulPairsI16(scales16[v], hn::LoadU(d16, x[t]->bsums + v * kLanes16)));
      }
      min_sum[t] = hn::ShiftLeft<5>(m);  // x 32
    }
    d = HalfToF32(block.d);
    dmin = d;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulQ6_KT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                 size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                 size_t out_stride, size_t row_begin, size_t row_end) {
  MatMulQuantImpl<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
                          row_begin, row_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(MatMulQ6_KT);

void MatMulQ6_K(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ6_KT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
