// Assembles the CPU backend's HostKernels table from the per-op Highway TUs.
#include "cpu/kernels.h"

#include <cctype>
#include <cstdlib>

#include "core/base/log.h"
#include "core/base/status.h"              // PETREL_CHECK
#include "cpu/kernel_entry_points.h"  // MatMulF32, RmsNorm, ...
#include "cpu/quant_matmul.h"         // QuantActivationType, MatMulQuantized, ...
#include "hwy/targets.h"              // SupportedTargets, DisableTargets, TargetName

namespace petrel::cpu {
namespace {

void MatMul(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const float* x,
            size_t x_stride, size_t n_tokens, const float* bias, float* out, size_t out_stride,
            size_t row_begin, size_t row_end) {
  switch (w_type) {
    case DType::kF32:
      return MatMulF32(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                       row_begin, row_end);
    case DType::kF16:
      return MatMulF16(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                       row_begin, row_end);
    case DType::kBF16:
      return MatMulBF16(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                        row_begin, row_end);
    default:
      break;
  }
  PETREL_CHECK(QuantActivationType(w_type) != DType::kF32 &&
               "cpu mat_mul: unsupported weight type (see SupportsWeightType)");
  MatMulQuantizedF32(w_type, w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                     row_begin, row_end);
}

std::string Lowercase(const char* name) {
  std::string out(name);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// PETREL_CPU_TARGET: disables every target better (a lower bit) than the named one.
void ApplyTargetCap() {
  const char* wanted = std::getenv("PETREL_CPU_TARGET");
  if (wanted == nullptr || *wanted == '\0') return;
  for (int64_t bit = 1; bit != 0 && bit <= HWY_SCALAR; bit <<= 1) {
    if (Lowercase(hwy::TargetName(bit)) == Lowercase(wanted)) {
      hwy::DisableTargets(bit - 1);
      // SupportedTargets() applies the mask but re-points dispatch at the unmasked set first;
      // point it at the masked set again.
      const int64_t allowed = hwy::SupportedTargets();
      hwy::GetChosenTarget().Update(allowed);
      return;
    }
  }
  PETREL_LOG_WARN("PETREL_CPU_TARGET=%s names no Highway target; using the best one", wanted);
}

}  // namespace

std::string SimdTargetName() {
  CpuKernels();  // applies PETREL_CPU_TARGET
  const int64_t targets = hwy::SupportedTargets();
  hwy::GetChosenTarget().Update(targets);  // see ApplyTargetCap
  return Lowercase(hwy::TargetName(targets & -targets));
}

bool SupportsWeightType(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16 ||
         QuantActivationType(type) != DType::kF32;
}

std::string MatMulPathName(DType type) {
  switch (type) {
    case DType::kF32:
      return "f32 FMA tiles";
    case DType::kF16:
    case DType::kBF16:
      return "f32 FMA tiles (prompts: weights widened to f32 once per panel; single tokens: "
             "converted in registers)";
    default:
      break;
  }
  const DType act = QuantActivationType(type);
  if (act == DType::kF32) return "unsupported";
  // The formats on quant_lanes-inl.h's driver; the others dot one (row, token) pair per block.
  const bool lanes = type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ5_0 ||
                     type == DType::kQ5_1 || type == DType::kQ8_0 || type == DType::kIQ4_NL ||
                     type == DType::kIQ4_XS || type == DType::kQ4_K || type == DType::kQ6_K;
  return std::string("int8, ") + (lanes ? "rows in lanes" : "one (row, token) pair per block") +
         ", " + DTypeName(act) + " activations";
}

const HostKernels& CpuKernels() {
  static const bool kCapped = (ApplyTargetCap(), true);
  (void)kCapped;
  static const HostKernels kKernels = {
      .name = "cpu",
      .mat_mul = MatMul,
      .activation_type = QuantActivationType,
      .quantize_activation = QuantizeActivation,
      .mat_mul_quantized = MatMulQuantized,
      .row_to_f32 = RowToF32,
      .row_from_f32 = RowFromF32,
      .rms_norm = RmsNorm,
      .rope = Rope,
      .attention = Attention,
      .silu_mul = SiluMul,
      .add = Add,
  };
  return kKernels;
}

}  // namespace petrel::cpu
