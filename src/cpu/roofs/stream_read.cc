// StreamRead: reads a byte range once at full memory bandwidth (the read roof `petrel bench`
// sets generation speed against). One Highway foreach_target TU.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/roofs/stream_read.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstring>

#include "cpu/kernels.h"  // StreamRead

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

uint64_t StreamReadT(const void* data, size_t n) {
#if HWY_TARGET == HWY_SCALAR
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t sum = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, sizeof(word));
    sum += word;
  }
  return sum;
#else
  const hn::ScalableTag<uint64_t> d;
  const hn::Repartition<uint8_t, decltype(d)> d8;
  const size_t bytes = hn::Lanes(d8);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  // Four independent sums, so that the loads, not the adds, set the pace.
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 4 * bytes <= n; i += 4 * bytes) {
    a0 = hn::Add(a0, hn::BitCast(d, hn::LoadU(d8, p + i)));
    a1 = hn::Add(a1, hn::BitCast(d, hn::LoadU(d8, p + i + bytes)));
    a2 = hn::Add(a2, hn::BitCast(d, hn::LoadU(d8, p + i + 2 * bytes)));
    a3 = hn::Add(a3, hn::BitCast(d, hn::LoadU(d8, p + i + 3 * bytes)));
  }
  uint64_t sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) sum += p[i];
  return sum;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(StreamReadT);

uint64_t StreamRead(const void* data, size_t n) { return HWY_DYNAMIC_DISPATCH(StreamReadT)(data, n); }

}  // namespace petrel::cpu
#endif  // HWY_ONCE
