// Row conversions between f32 and the stored element types (embedding lookups, KV cache writes).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/elementwise/convert.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstring>

#include "core/base/status.h"  // PETREL_CHECK
#include "quant/quantize.h"  // DequantizeRow, QuantizeRow
#include "cpu/kernel_entry_points.h"
#include "quant/f16.h"  // F16ToF32Row, F32ToF16Row, BF16ToF32Row, F32ToBF16Row

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// F16C converts exactly (round to nearest even, like quant/f16.h). Highway's emulation on older
// targets truncates when demoting and mishandles inf/NaN, so those targets use the scalar code.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kHardwareF16 = true;
#else
constexpr bool kHardwareF16 = false;
#endif

void F16ToF32T(const uint16_t* HWY_RESTRICT in, float* HWY_RESTRICT out, size_t n) {
  if constexpr (!kHardwareF16) return F16ToF32Row(in, out, n);
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> d16;
  const size_t lanes = hn::Lanes(d);
  const auto* in16 = reinterpret_cast<const hwy::float16_t*>(in);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::PromoteTo(d, hn::LoadU(d16, in16 + i)), d, out + i);
  F16ToF32Row(in + i, out + i, n - i);
}

void F32ToF16T(const float* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out, size_t n) {
  if constexpr (!kHardwareF16) return F32ToF16Row(in, out, n);
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> d16;
  const size_t lanes = hn::Lanes(d);
  auto* out16 = reinterpret_cast<hwy::float16_t*>(out);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::DemoteTo(d16, hn::LoadU(d, in + i)), d16, out16 + i);
  F32ToF16Row(in + i, out + i, n - i);
}

// bfloat16 -> f32 is a 16-bit shift, exact on every target.
void BF16ToF32T(const uint16_t* HWY_RESTRICT in, float* HWY_RESTRICT out, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::bfloat16_t, decltype(d)> d16;
  const size_t lanes = hn::Lanes(d);
  const auto* in16 = reinterpret_cast<const hwy::bfloat16_t*>(in);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::PromoteTo(d, hn::LoadU(d16, in16 + i)), d, out + i);
  BF16ToF32Row(in + i, out + i, n - i);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(F16ToF32T);
HWY_EXPORT(F32ToF16T);
HWY_EXPORT(BF16ToF32T);

// The float types by Highway; every block type by its scalar decoder or encoder (codec table),
// which is enough for one row per token in embedding lookups and the Q8_0 KV cache, and keeps
// every backend's stored bytes the same.
void RowToF32(DType type, const void* row, size_t n, float* out) {
  if (type == DType::kF32) {
    std::memcpy(out, row, n * sizeof(float));
  } else if (type == DType::kF16) {
    HWY_DYNAMIC_DISPATCH(F16ToF32T)(static_cast<const uint16_t*>(row), out, n);
  } else if (type == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(BF16ToF32T)(static_cast<const uint16_t*>(row), out, n);
  } else {
    PETREL_CHECK(DequantizeRow(type, row, out, n) && "row_to_f32: unsupported element type");
  }
}

void RowFromF32(DType type, const float* row, size_t n, void* out) {
  if (type == DType::kF32) {
    std::memcpy(out, row, n * sizeof(float));
  } else if (type == DType::kF16) {
    HWY_DYNAMIC_DISPATCH(F32ToF16T)(row, static_cast<uint16_t*>(out), n);
  } else {
    PETREL_CHECK(QuantizeRow(type, row, out, n) && "row_from_f32: unsupported element type");
  }
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
