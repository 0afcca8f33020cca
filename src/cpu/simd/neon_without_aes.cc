#include "cpu/simd/neon_without_aes.h"

#include "hwy/targets.h"  // SupportedTargets, SetSupportedTargetsForTest, GetChosenTarget

#if HWY_ARCH_ARM_A64 && defined(__linux__)
#include <asm/hwcap.h>  // HWCAP_ASIMD
#include <sys/auxv.h>   // getauxval
#endif

namespace petrel::cpu {

int64_t WithNeonWithoutAes(int64_t supported, bool has_advanced_simd) {
  if (!has_advanced_simd || (supported & HWY_NEON) != 0) return supported;
  return supported | HWY_NEON;
}

void EnableNeonWithoutAes() {
#if HWY_ARCH_ARM_A64 && defined(__linux__) && (HWY_TARGETS & HWY_NEON)
  const int64_t supported = hwy::SupportedTargets();
  const bool has_advanced_simd = (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
  const int64_t wanted = WithNeonWithoutAes(supported, has_advanced_simd);
  if (wanted == supported) return;
  // Highway's way to replace its detected set; dispatch is re-pointed at it.
  hwy::SetSupportedTargetsForTest(wanted);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
#endif
}

}  // namespace petrel::cpu
