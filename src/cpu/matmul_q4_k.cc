// mat_mul for Q4_K weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q4_k.cc"
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
  using WBlock = quant::BlockQ4_K;
  static constexpr DType kType = DType::kQ4_K;
  static constexpr DType kActType = DType::kQ8_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMins = true;
  static constexpr size_t kDecodeRows = 2;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = 1;
  static constexpr size_t kTileTokens = 4;

  static constexpr bool kDirect = true;

  // Each 32 bytes of qs hold chunk 2j (low nibbles) and chunk 2j + 1 (high nibbles); a 6-bit
  // scale and min per 32 elements. isum = sum(scale * level * x), min_sum lanes sum to sum(min *
  // bsum).
  template <size_t T>
  static HWY_INLINE void DotDirect(const WBlock& block, const quant::BlockQ8_K* const (&x)[T],
                                   QVI32 (&isum)[T], QVI32 (&min_sum)[T], float& d, float& dmin) {
    const QDU8 du8;
    const QDI8 d8;
    const QDI16 d16;
    const hn::Repartition<uint16_t, QDU8> du16;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    // The twelve scale bytes to eight scales (bytes 0..7) and eight mins (8..15), as ggml does.
    uint32_t utmp[4];
    std::memcpy(utmp, block.scales, 12);
    constexpr uint32_t kMask1 = 0x3f3f3f3f, kMask2 = 0x0f0f0f0f, kMask3 = 0x03030303;
    utmp[3] = ((utmp[2] >> 4) & kMask2) | (((utmp[1] >> 6) & kMask3) << 4);
    const uint32_t mins_low = utmp[1] & kMask1;
    utmp[1] = (utmp[2] & kMask2) | (((utmp[0] >> 6) & kMask3) << 4);
    utmp[2] = mins_low;
    utmp[0] &= kMask1;
    HWY_ALIGN uint8_t scale_min[16];
    std::memcpy(scale_min, utmp, 16);
    for (size_t t = 0; t < T; ++t) isum[t] = hn::Zero(QDI32());
    const auto mask = hn::Set(du8, 0x0F);
    // The eight scales as int16 in every 128-bit block (hn::Broadcast works per block).
    const hn::CappedTag<uint8_t, 16> d16b;
    const auto sm = hn::Load(d16b, scale_min);
    const auto sc_bytes = hn::ConcatLowerLower(d16b, sm, sm);
    QVI16 sc[kQVecs];
    PromoteBytes16(du16, sc_bytes, sc);
    Unroll<4>([&](auto j_constant) HWY_ATTR {
      constexpr size_t j = decltype(j_constant)::value;
      for (size_t v = 0; v < kQVecs; ++v) {
        const auto s_lo = hn::Broadcast<2 * j>(sc[v]);
        const auto s_hi = hn::Broadcast<2 * j + 1>(sc[v]);
        const auto q = hn::LoadU(du8, block.qs + 32 * j + v * kLanes);
        const auto lo = hn::And(q, mask);
        const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, q))), mask);
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xq = x[t]->qs + 64 * j + v * kLanes;
          const auto p_lo = MulPairsI16(MulPairsU8I8(lo, hn::LoadU(d8, xq)), s_lo);
          const auto p_hi = MulPairsI16(MulPairsU8I8(hi, hn::LoadU(d8, xq + 32)), s_hi);
          isum[t] = hn::Add(isum[t], hn::Add(p_lo, p_hi));
        }
      }
    });
    // Each min covers 32 elements, i.e. two bsums: the mins interleaved with themselves.
    const auto mins_pairs = hn::InterleaveUpper(d16b, sm, sm);
    QVI16 mins16[kQVecs];
    PromoteBytes16(du16, mins_pairs, mins16);
    const QDI32 d32;
    constexpr size_t kLanes16 = hn::MaxLanes(QDI16());
    for (size_t t = 0; t < T; ++t) {
      QVI32 m = hn::Zero(d32);
      for (size_t v = 0; v < kQVecs; ++v) {
        m = hn::Add(m, MulPairsI16(mins16[v], hn::LoadU(d16, x[t]->bsums + v * kLanes16)));
      }
      min_sum[t] = m;
    }
    d = HalfToF32(block.d);
    dmin = HalfToF32(block.dmin);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulQ4_KT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ4_KT);

void MatMulQ4_K(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ4_KT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
