// The kernel tables are complete: every HostKernels entry of `cpu` and `ref` is set where it must
// be, every weight type the CPU backend accepts for mat_mul has exactly one row in the mat_mul
// table (matmul_table.h) with an activation type and a kernel, and each row's kernel runs on
// every Highway target and agrees with the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"       // CpuKernels, SupportsWeightType, MatMulPathName
#include "cpu/matmul/matmul_table.h"  // kMatMulKernels, FindMatMulKernel
#include "cpu/simd/neon_without_aes.h"  // WithNeonWithoutAes
#include "cpu/matmul/quant_matmul.h"  // QuantizeActivationRow
#include "hwy/targets.h"       // SupportedAndGeneratedTargets, SetSupportedTargetsForTest
#include "quant/quantize.h"    // QuantizeRow, DequantizeRow, CanDequantize
#include "ref/reference_kernels.h"
#include "util/random_weights.h"  // RandomWeightRow

namespace petrel {
namespace {

const HostKernels& Cpu() { return cpu::CpuKernels(); }
const HostKernels& Ref() { return ref::ReferenceKernels(); }

std::vector<DType> AllTypes() {
  std::vector<DType> types;
  for (size_t i = 0; i < size_t(DType::kCount); ++i) types.push_back(DType(i));
  return types;
}

template <class Body>
void ForEachTarget(const Body& body) {
  // Caps dispatch at each target as PETREL_CPU_TARGET does: every kernel runs its best target
  // at or below it (AVX3_DL is compiled only for the integer mat_muls; the rest run AVX3 then).
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(supported & ~(target - 1));
    SCOPED_TRACE(::testing::Message() << "target " << hwy::TargetName(target));
    body();
    if (::testing::Test::HasFailure()) break;
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The quantized path is all or nothing: HostBackend asks activation_type first and then calls
// the other two.
void ExpectQuantizedPathAllOrNothing(const HostKernels& kernels) {
  const bool has_activation_type = kernels.activation_type != nullptr;
  EXPECT_EQ(kernels.quantize_activation != nullptr, has_activation_type) << kernels.name;
  EXPECT_EQ(kernels.mat_mul_quantized != nullptr, has_activation_type) << kernels.name;
}

// The structured bindings below name every HostKernels field: a new field does not compile here
// until these tests say whether each table must set it.
// An AArch64 core with Advanced SIMD but without AES (Raspberry Pi 3 and 4) gets NEON; a set
// that has NEON, or a core without Advanced SIMD, is left as it is.
TEST(KernelTableTest, NeonIsOfferedWithoutAes) {
  const int64_t without_aes = HWY_SCALAR | HWY_EMU128;
  EXPECT_EQ(cpu::WithNeonWithoutAes(without_aes, true), without_aes | HWY_NEON);
  EXPECT_EQ(cpu::WithNeonWithoutAes(without_aes, false), without_aes);
  EXPECT_EQ(cpu::WithNeonWithoutAes(without_aes | HWY_NEON, true), without_aes | HWY_NEON);
}

TEST(KernelTableTest, CpuSetsEveryEntry) {
  const auto& [name, mat_mul, activation_type, quantize_activation, mat_mul_quantized, row_to_f32,
               row_from_f32, rms_norm, layer_norm, rope, attention, silu_mul, add, gelu_mul,
               gelu, scale, softcap] = Cpu();
  EXPECT_STREQ(name, "cpu");
  EXPECT_NE(mat_mul, nullptr);
  EXPECT_NE(activation_type, nullptr);
  EXPECT_NE(quantize_activation, nullptr);
  EXPECT_NE(mat_mul_quantized, nullptr);
  EXPECT_NE(row_to_f32, nullptr);
  EXPECT_NE(row_from_f32, nullptr);
  EXPECT_NE(rms_norm, nullptr);
  EXPECT_NE(layer_norm, nullptr);
  EXPECT_NE(rope, nullptr);
  EXPECT_NE(attention, nullptr);
  EXPECT_NE(silu_mul, nullptr);
  EXPECT_NE(add, nullptr);
  EXPECT_NE(gelu_mul, nullptr);
  EXPECT_NE(gelu, nullptr);
  EXPECT_NE(scale, nullptr);
  EXPECT_NE(softcap, nullptr);
  ExpectQuantizedPathAllOrNothing(Cpu());
}

TEST(KernelTableTest, RefSetsEveryEntryButTheQuantizedPath) {
  const auto& [name, mat_mul, activation_type, quantize_activation, mat_mul_quantized, row_to_f32,
               row_from_f32, rms_norm, layer_norm, rope, attention, silu_mul, add, gelu_mul,
               gelu, scale, softcap] = Ref();
  EXPECT_STREQ(name, "ref");
  EXPECT_NE(mat_mul, nullptr);
  // Documented as null: ref's mat_mul takes f32 activations for every weight type.
  EXPECT_EQ(activation_type, nullptr);
  EXPECT_EQ(quantize_activation, nullptr);
  EXPECT_EQ(mat_mul_quantized, nullptr);
  EXPECT_NE(row_to_f32, nullptr);
  EXPECT_NE(row_from_f32, nullptr);
  EXPECT_NE(rms_norm, nullptr);
  EXPECT_NE(layer_norm, nullptr);
  EXPECT_NE(rope, nullptr);
  EXPECT_NE(attention, nullptr);
  EXPECT_NE(silu_mul, nullptr);
  EXPECT_NE(add, nullptr);
  EXPECT_NE(gelu_mul, nullptr);
  EXPECT_NE(gelu, nullptr);
  EXPECT_NE(scale, nullptr);
  EXPECT_NE(softcap, nullptr);
  ExpectQuantizedPathAllOrNothing(Ref());
}

TEST(KernelTableTest, RefAcceptsEveryTypeItCanDequantize) {
  for (DType type : AllTypes()) {
    EXPECT_EQ(ref::SupportsWeightType(type), CanDequantize(type)) << DTypeName(type);
  }
}

TEST(KernelTableTest, EveryCpuWeightTypeHasOneRowAnActivationTypeAndAKernel) {
  size_t n_supported = 0;
  for (DType type : AllTypes()) {
    SCOPED_TRACE(DTypeName(type));
    const size_t n_rows =
        size_t(std::count_if(std::begin(cpu::kMatMulKernels), std::end(cpu::kMatMulKernels),
                             [&](const auto& row) { return row.weight == type; }));
    const cpu::MatMulKernel* row = cpu::FindMatMulKernel(type);
    if (!cpu::SupportsWeightType(type)) {
      EXPECT_EQ(n_rows, 0u);
      EXPECT_EQ(row, nullptr);
      EXPECT_EQ(Cpu().activation_type(type), DType::kF32);
      EXPECT_EQ(cpu::MatMulPathName(type), "unsupported");
      continue;
    }
    ++n_supported;
    // The reference can check every type the CPU backend accepts.
    EXPECT_TRUE(ref::SupportsWeightType(type));
    if (n_rows == 0) {
      // A block type without a kernel row: decoded row by row and multiplied in f32.
      EXPECT_EQ(row, nullptr);
      EXPECT_GT(Traits(type).block_elems, 1u);
      EXPECT_EQ(Cpu().activation_type(type), DType::kF32);
      EXPECT_NE(cpu::MatMulPathName(type).find("decoded"), std::string::npos);
      continue;
    }
    ASSERT_EQ(n_rows, 1u);
    ASSERT_NE(row, nullptr);
    EXPECT_NE(cpu::MatMulPathName(type), "unsupported");
    const DType act = Cpu().activation_type(type);
    EXPECT_EQ(act, row->activation);
    if (act == DType::kF32) {
      EXPECT_NE(row->f32, nullptr);
      EXPECT_EQ(row->quant, nullptr);
      continue;
    }
    EXPECT_EQ(row->f32, nullptr);
    EXPECT_NE(row->quant, nullptr);
    // A whole weight block is a whole number of activation blocks, which the CPU's activation
    // quantizer produces.
    const size_t n_in = Traits(type).block_elems;
    ASSERT_TRUE(RowBytes(act, n_in).has_value()) << DTypeName(act);
    std::vector<float> x(n_in, 0.25f);
    std::vector<uint8_t> xq(*RowBytes(act, n_in));
    EXPECT_TRUE(cpu::QuantizeActivationRow(act, x.data(), n_in, xq.data())) << DTypeName(act);
  }
  EXPECT_GE(n_supported, std::size(cpu::kMatMulKernels));
}

// Each row's kernel through HostKernels::mat_mul against ref's exact-f32 mat_mul: f32 activations
// to float rounding, 8-bit ones within many standard deviations of their rounding error (each
// element's error is at most amax / 254, so the dot's has a standard deviation of at most
// |w| amax / (127 sqrt(12))) plus the f16 rounding of the block scales and sums; a wrong decoder
// is off by the size of the dot. quant_kernels_test checks the block math exactly for the formats
// it lists; this runs whatever the table lists.
TEST(KernelTableTest, EveryRowsKernelMatchesTheReference) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n_in = 512;  // whole blocks of every format
  const size_t n_rows = 9;  // a group of 8 rows and a tail
  const size_t n_tokens = 5;
  for (const cpu::MatMulKernel& row : cpu::kMatMulKernels) {
    const DType type = row.weight;
    SCOPED_TRACE(DTypeName(type));
    const size_t row_bytes = *RowBytes(type, n_in);
    std::vector<uint8_t> w(n_rows * row_bytes);            // (n_rows, row_bytes)
    std::vector<float> w_abs_sum(n_rows), w_norm(n_rows);  // (n_rows) each
    std::vector<float> x(n_tokens * n_in);                 // (n_tokens, n_in)
    std::vector<float> bias(n_rows);                       // (n_rows)
    std::vector<float> dequantized(n_in);
    for (size_t r = 0; r < n_rows; ++r) {
      ASSERT_TRUE(test::RandomWeightRow(type, n_in, rng, w.data() + r * row_bytes));
      ASSERT_TRUE(DequantizeRow(type, w.data() + r * row_bytes, dequantized.data(), n_in));
      for (float v : dequantized) {
        w_abs_sum[r] += std::fabs(v);
        w_norm[r] += v * v;
      }
      w_norm[r] = std::sqrt(w_norm[r]);
      bias[r] = normal(rng);
    }
    for (float& v : x) v = normal(rng);
    std::vector<float> want(n_tokens * n_rows);
    Ref().mat_mul(type, w.data(), row_bytes, n_in, x.data(), n_in, n_tokens, bias.data(),
                  want.data(), n_rows, 0, n_rows);
    ForEachTarget([&] {
      std::vector<float> got(n_tokens * n_rows, NAN);
      Cpu().mat_mul(type, w.data(), row_bytes, n_in, x.data(), n_in, n_tokens, bias.data(),
                    got.data(), n_rows, 0, n_rows);
      for (size_t t = 0; t < n_tokens; ++t) {
        float x_amax = 0;
        for (size_t i = 0; i < n_in; ++i) x_amax = std::max(x_amax, std::fabs(x[t * n_in + i]));
        for (size_t r = 0; r < n_rows; ++r) {
          const float magnitude = w_abs_sum[r] * x_amax;  // >= sum |w x|
          const float tol = row.activation == DType::kF32
                                ? 1e-5f * magnitude + 1e-5f
                                : 8.0f * w_norm[r] * x_amax / 127 + 1e-3f * magnitude;
          ASSERT_NEAR(got[t * n_rows + r], want[t * n_rows + r], tol)
              << "token " << t << " row " << r;
        }
      }
    });
  }
}

}  // namespace
}  // namespace petrel
