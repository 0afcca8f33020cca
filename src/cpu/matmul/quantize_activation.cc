// Activation rows to Q8_0, Q8_1 and Q8_K for the quantized mat_mul: Highway versions of the
// scalar reference quantizers (src/quant), bit-identical to them (same float operations, same
// rounding: roundf for Q8_0/Q8_1, ggml's nearest_int for Q8_K).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/quantize_activation.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstring>

#include "cpu/matmul/quant_matmul.h"  // QuantizeActivationRow
#include "quant/blocks.h"
#include "quant/f16.h"  // F32ToF16

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

using DF = hn::ScalableTag<float>;
using DI32 = hn::RebindToSigned<DF>;
using DI8 = hn::Rebind<int8_t, DF>;

// Largest |x[i]|, i < n (n a multiple of the lane count).
HWY_INLINE float MaxAbs(const float* HWY_RESTRICT x, size_t n) {
  const DF df;
  auto m = hn::Zero(df);
  for (size_t i = 0; i < n; i += hn::Lanes(df)) m = hn::Max(m, hn::Abs(hn::LoadU(df, x + i)));
  return hn::GetLane(hn::MaxOfLanes(df, m));
}

// roundf(v): to nearest, halves away from zero. v - trunc(v) is exact, so the test is too.
HWY_INLINE hn::Vec<DF> RoundHalfAway(hn::Vec<DF> v) {
  const DF df;
  const auto t = hn::Trunc(v);
  const auto frac = hn::Abs(hn::Sub(v, t));
  const auto step = hn::CopySign(hn::Set(df, 1.0f), v);
  return hn::Add(t, hn::IfThenElseZero(hn::Ge(frac, hn::Set(df, 0.5f)), step));
}

// 32 values times `id`, rounded half away from zero, stored as int8; returns their sum.
HWY_INLINE int32_t RoundBlock32(const float* HWY_RESTRICT x, float id, int8_t* HWY_RESTRICT qs) {
  const DF df;
  const DI32 di32;
  const DI8 di8;
  const auto vid = hn::Set(df, id);
  auto sum = hn::Zero(di32);
  for (size_t i = 0; i < quant::kQK; i += hn::Lanes(df)) {
    const auto q = hn::ConvertTo(di32, RoundHalfAway(hn::Mul(hn::LoadU(df, x + i), vid)));
    sum = hn::Add(sum, q);
    hn::StoreU(hn::DemoteTo(di8, q), di8, qs + i);
  }
  return hn::GetLane(hn::SumOfLanes(di32, sum));
}

}  // namespace

void QuantizeQ8_0T(const float* HWY_RESTRICT x, size_t n, void* HWY_RESTRICT out) {
  auto* blocks = static_cast<quant::BlockQ8_0*>(out);
  for (size_t b = 0; b < n / quant::kQK; ++b, x += quant::kQK) {
    const float d = MaxAbs(x, quant::kQK) / 127;
    const float id = d ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    RoundBlock32(x, id, blocks[b].qs);
  }
}

void QuantizeQ8_1T(const float* HWY_RESTRICT x, size_t n, void* HWY_RESTRICT out) {
  auto* blocks = static_cast<quant::BlockQ8_1*>(out);
  for (size_t b = 0; b < n / quant::kQK; ++b, x += quant::kQK) {
    const float d = MaxAbs(x, quant::kQK) / 127;
    const float id = d ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    const int32_t sum = RoundBlock32(x, id, blocks[b].qs);
    blocks[b].s = F32ToF16(float(sum) * d);
  }
}

void QuantizeQ8_KT(const float* HWY_RESTRICT x, size_t n, void* HWY_RESTRICT out) {
  const DF df;
  const DI32 di32;
  const DI8 di8;
  const size_t lanes = hn::Lanes(df);
  auto* blocks = static_cast<quant::BlockQ8_K*>(out);
  for (size_t b = 0; b < n / quant::kQK_K; ++b, x += quant::kQK_K) {
    quant::BlockQ8_K& y = blocks[b];
    // The reference keeps the first element of largest magnitude (with its sign).
    const float amax = MaxAbs(x, quant::kQK_K);
    if (!amax) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    float max = 0.0f;
    const auto vamax = hn::Set(df, amax);
    for (size_t i = 0; i < quant::kQK_K; i += lanes) {
      const intptr_t first = hn::FindFirstTrue(df, hn::Eq(hn::Abs(hn::LoadU(df, x + i)), vamax));
      if (first >= 0) {
        max = x[i + size_t(first)];
        break;
      }
    }
    const float iscale = -127.f / max;
    // nearest_int rounds half to even, as hn::Round does (|iscale * x| <= 127.x here).
    const auto vscale = hn::Set(df, iscale);
    const auto q_max = hn::Set(di32, 127);
    for (size_t i = 0; i < quant::kQK_K; i += 16) {
      auto sum = hn::Zero(di32);
      for (size_t j = i; j < i + 16; j += lanes) {
        const auto q =
            hn::Min(q_max, hn::ConvertTo(di32, hn::Round(hn::Mul(vscale, hn::LoadU(df, x + j)))));
        sum = hn::Add(sum, q);
        hn::StoreU(hn::DemoteTo(di8, q), di8, y.qs + j);
      }
      y.bsums[i / 16] = int16_t(hn::GetLane(hn::SumOfLanes(di32, sum)));
    }
    y.d = 1 / iscale;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(QuantizeQ8_0T);
HWY_EXPORT(QuantizeQ8_1T);
HWY_EXPORT(QuantizeQ8_KT);

bool QuantizeActivationRow(DType act_type, const float* x, size_t n, void* out) {
  if (act_type == DType::kQ8_0) {
    HWY_DYNAMIC_DISPATCH(QuantizeQ8_0T)(x, n, out);
  } else if (act_type == DType::kQ8_1) {
    HWY_DYNAMIC_DISPATCH(QuantizeQ8_1T)(x, n, out);
  } else if (act_type == DType::kQ8_K) {
    HWY_DYNAMIC_DISPATCH(QuantizeQ8_KT)(x, n, out);
  } else {
    return false;
  }
  return true;
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
