// Assembles the CPU backend's HostKernels table from the per-op Highway TUs.
#include "cpu/kernels.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/base/log.h"
#include "core/base/status.h"         // PETREL_CHECK
#include "cpu/matmul/bf16_dot.h"            // Bf16DotSupported, MatMulBf16Dot
#include "cpu/matmul/int8_target.h"          // Int8KernelTarget
#include "cpu/simd/neon_without_aes.h"     // EnableNeonWithoutAes
#include "cpu/kernel_entry_points.h"  // RmsNorm, Rope, ...
#include "cpu/matmul/matmul_table.h"         // FindMatMulKernel
#include "cpu/matmul/quant_matmul.h"         // QuantActivationType, MatMulQuantized, ...
#include "hwy/targets.h"              // SupportedTargets, DisableTargets, TargetName
#include "quant/quantize.h"           // CanDequantize, DequantizeRow

namespace petrel::cpu {
namespace {

// Block types with a decoder (the quant codec table) but no row of their own in the mat_mul
// table: each weight row is decoded to f32 once per call and multiplied by the f32 kernel, one row
// at a time. Every (row, token) pair takes the same operations whatever the batch, so results stay
// batch-invariant; the cost is a decode per row per call, which a kernel row removes.
bool RunsDecodedRows(DType type) {
  return FindMatMulKernel(type) == nullptr && Traits(type).block_elems > 1 && CanDequantize(type);
}

void MatMulDecodedRows(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                       const float* x, size_t x_stride, size_t n_tokens, const float* bias,
                       float* out, size_t out_stride, size_t row_begin, size_t row_end) {
  thread_local std::vector<float> row;  // (n_in), reused across calls
  if (row.size() < n_in) row.resize(n_in);
  for (size_t r = row_begin; r < row_end; ++r) {
    PETREL_CHECK(DequantizeRow(w_type, static_cast<const uint8_t*>(w) + r * w_row_bytes,
                               row.data(), n_in));
    MatMulF32(row.data(), n_in * sizeof(float), n_in, x, x_stride, n_tokens,
              bias ? bias + r : nullptr, out + r, out_stride, 0, 1);
  }
}

void MatMul(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const float* x,
            size_t x_stride, size_t n_tokens, const float* bias, float* out, size_t out_stride,
            size_t row_begin, size_t row_end) {
  if (RunsDecodedRows(w_type)) {
    return MatMulDecodedRows(w_type, w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out,
                             out_stride, row_begin, row_end);
  }
  const MatMulKernel* kernel = FindMatMulKernel(w_type);
  PETREL_CHECK(kernel != nullptr &&
               "cpu mat_mul: unsupported weight type (see SupportsWeightType)");
  if (kernel->f32 != nullptr) {
    return kernel->f32(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                       row_begin, row_end);
  }
  MatMulQuantizedF32(w_type, w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                     row_begin, row_end);
}

// Whether a bf16-dot table runs weights of `type` on `vdpbf16ps`: BF16, and with kF16Too F16.
template <bool kF16Too>
bool TakesBf16Dot(DType type) {
  return (type == DType::kBF16 || (kF16Too && type == DType::kF16)) && Bf16DotSupported();
}

// A bf16-dot table's mat_mul: the weights TakesBf16Dot names on `vdpbf16ps`, for every batch
// size (bf16_dot.h), the rest as MatMul.
template <bool kF16Too>
void MatMulPreferBf16Dot(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                         const float* x, size_t x_stride, size_t n_tokens, const float* bias,
                         float* out, size_t out_stride, size_t row_begin, size_t row_end) {
  if (TakesBf16Dot<kF16Too>(w_type)) {
    return MatMulBf16Dot(w_type, w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out,
                         out_stride, row_begin, row_end);
  }
  MatMul(w_type, w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride, row_begin,
         row_end);
}

// The same table's activations for those weights: bfloat16 rows, rounded once per op by
// HostBackend (as it quantizes activations for the block formats) rather than in every row
// chunk.
template <bool kF16Too>
DType Bf16DotActivationType(DType w_type) {
  return TakesBf16Dot<kF16Too>(w_type) ? DType::kBF16 : QuantActivationType(w_type);
}

void Bf16DotQuantizeActivation(DType act_type, const float* x, size_t n, void* out) {
  if (act_type == DType::kBF16) return RoundRowToBf16(x, n, static_cast<uint16_t*>(out));
  QuantizeActivation(act_type, x, n, out);
}

template <bool kF16Too>
void Bf16DotMatMulQuantized(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                            const void* xq, size_t xq_row_bytes, size_t n_tokens,
                            const float* bias, float* out, size_t out_stride, size_t row_begin,
                            size_t row_end) {
  if (TakesBf16Dot<kF16Too>(w_type)) {
    return MatMulBf16DotRounded(w_type, w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias,
                                out, out_stride, row_begin, row_end);
  }
  MatMulQuantized(w_type, w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out,
                  out_stride, row_begin, row_end);
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
  const int64_t supported = hwy::SupportedTargets();
  hwy::GetChosenTarget().Update(supported);  // see ApplyTargetCap
  // The best target both the CPU supports and this TU's build compiled: dispatch picks that one
  // for every kernel but the integer mat_muls, which are also compiled for AVX3_DL
  // (int8_target.h) and name theirs when it differs ("avx3, int8 avx3_dl" on an AVX-512 VNNI
  // core).
  const int64_t targets = supported & HWY_TARGETS;
  std::string name = Lowercase(hwy::TargetName(targets & -targets));
  const int64_t int8_target = Int8KernelTarget();
  if (int8_target != (targets & -targets))
    name += ", int8 " + Lowercase(hwy::TargetName(int8_target));
  return name;
}

bool SupportsWeightType(DType type) {
  return FindMatMulKernel(type) != nullptr || RunsDecodedRows(type);
}

std::string MatMulPathName(DType type) {
  if (RunsDecodedRows(type)) return "decoded to f32 row by row (no kernel of its own)";
  const MatMulKernel* kernel = FindMatMulKernel(type);
  if (kernel == nullptr) return "unsupported";
  const std::string activations =
      std::string(", ") + DTypeName(kernel->activation) + " activations";
  switch (kernel->driver) {
    case MatMulDriver::kF32Tiles:
      return "f32 FMA tiles";
    case MatMulDriver::kWidenedF32Tiles:
      return "f32 FMA tiles (prompts: weights widened to f32 once per panel; single tokens: "
             "converted in registers)";
    case MatMulDriver::kRowsInLanes:
      return "int8, rows in lanes" + activations;
    case MatMulDriver::kPairPerBlock:
      return "int8, one (row, token) pair per block" + activations;
  }
  return "unsupported";
}

const HostKernels& CpuKernels() {
  // NEON for AArch64 cores without AES first, so that PETREL_CPU_TARGET caps the full set.
  static const bool kCapped = (EnableNeonWithoutAes(), ApplyTargetCap(), true);
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
      .layer_norm = LayerNorm,
      .rope = Rope,
      .attention = Attention,
      .silu_mul = SiluMul,
      .add = Add,
      .gelu_mul = GeluMul,
      .gelu = Gelu,
      .scale = Scale,
      .softcap = Softcap,
  };
  return kKernels;
}

template <bool kF16Too>
HostKernels MakeBf16DotKernels() {
  HostKernels kernels = CpuKernels();
  kernels.name = kF16Too ? "cpu, bf16 dot (F16, BF16)" : "cpu, bf16 dot (BF16)";
  kernels.mat_mul = MatMulPreferBf16Dot<kF16Too>;
  kernels.activation_type = Bf16DotActivationType<kF16Too>;
  kernels.quantize_activation = Bf16DotQuantizeActivation;
  kernels.mat_mul_quantized = Bf16DotMatMulQuantized<kF16Too>;
  return kernels;
}

const HostKernels& CpuKernelsWithBf16Dot(bool f16_too) {
  static const HostKernels kBf16Only = MakeBf16DotKernels<false>();
  static const HostKernels kBoth = MakeBf16DotKernels<true>();
  return f16_too ? kBoth : kBf16Only;
}

}  // namespace petrel::cpu
