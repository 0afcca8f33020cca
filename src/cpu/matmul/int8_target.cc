// Int8KernelTarget: a Highway foreach_target TU in the integer kernels' library, so that it is
// compiled for exactly their targets and its dispatch picks the one theirs picks.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/int8_target.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/matmul/int8_target.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

int64_t Int8KernelTargetT() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(Int8KernelTargetT);

int64_t Int8KernelTarget() { return HWY_DYNAMIC_DISPATCH(Int8KernelTargetT)(); }

}  // namespace petrel::cpu
#endif  // HWY_ONCE
