// The per-element arithmetic of the CUDA kernels (src/cuda/elementwise_math.cuh), compiled by the
// host compiler and checked against the scalar reference kernels on random inputs. Built with the
// tests whether or not the build has CUDA, so the formulas are verified on every machine.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda/elementwise_math.cuh"
#include "ref/reference_kernels.h"

namespace petrel {
namespace {

using namespace petrel::cuda;

std::vector<float> Random(size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// Within a few float rounding steps of the (double precision) reference.
void ExpectClose(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double tolerance = 4e-6 * std::max(1.0, std::fabs(double(want[i])));
    ASSERT_NEAR(got[i], want[i], tolerance) << what << " at " << i;
  }
}

constexpr size_t kN = 4099;

TEST(CudaMath, BinaryOpsMatchTheReference) {
  std::mt19937 gen(1);
  const HostKernels& ref = ref::ReferenceKernels();
  for (float scale : {0.1f, 1.0f, 6.0f}) {
    const auto a = Random(kN, scale, gen), b = Random(kN, scale, gen);
    std::vector<float> want(kN), got(kN);
    ref.silu_mul(a.data(), b.data(), kN, want.data());
    for (size_t i = 0; i < kN; ++i) got[i] = SiluMulOf(a[i], b[i]);
    ExpectClose(want, got, "silu_mul");
    ref.gelu_mul(a.data(), b.data(), kN, want.data());
    for (size_t i = 0; i < kN; ++i) got[i] = GeluMulOf(a[i], b[i]);
    ExpectClose(want, got, "gelu_mul");
    ref.add(a.data(), b.data(), kN, want.data());
    for (size_t i = 0; i < kN; ++i) got[i] = AddOf(a[i], b[i]);
    ExpectClose(want, got, "add");
  }
}

TEST(CudaMath, ScaleAndSoftcapMatchTheReference) {
  std::mt19937 gen(2);
  const HostKernels& ref = ref::ReferenceKernels();
  const auto x = Random(kN, 40.0f, gen);
  std::vector<float> want(kN), got(kN);
  for (float scalar : {0.5f, 30.0f, 50.0f}) {
    ref.scale(x.data(), scalar, kN, want.data());
    for (size_t i = 0; i < kN; ++i) got[i] = ScaleOf(x[i], scalar);
    ExpectClose(want, got, "scale");
    ref.softcap(x.data(), scalar, kN, want.data());
    for (size_t i = 0; i < kN; ++i) got[i] = SoftcapOf(x[i], scalar);
    ExpectClose(want, got, "softcap");
  }
}

TEST(CudaMath, RmsNormMatchesTheReference) {
  std::mt19937 gen(3);
  const HostKernels& ref = ref::ReferenceKernels();
  for (size_t n : {size_t(1), size_t(64), size_t(128), size_t(2048), size_t(5120)}) {
    const auto x = Random(n, 3.0f, gen), w = Random(n, 1.0f, gen);
    std::vector<float> want(n), got(n);
    ref.rms_norm(x.data(), w.data(), n, 1e-5f, want.data());
    // The kernel's order: each of 256 threads sums a strided slice, then the slices are added.
    std::vector<float> partial(256, 0.0f);
    for (size_t i = 0; i < n; ++i) partial[i % 256] += x[i] * x[i];
    float sum = 0.0f;
    for (float p : partial) sum += p;
    const float inverse = RmsInverse(sum, int(n), 1e-5f);
    for (size_t i = 0; i < n; ++i) got[i] = RmsNormOf(x[i], inverse, w[i]);
    ExpectClose(want, got, "rms_norm");
  }
}

TEST(CudaMath, RopeMatchesTheReferenceInBothLayoutsAndPartialRotation) {
  std::mt19937 gen(4);
  const HostKernels& ref = ref::ReferenceKernels();
  const size_t n_heads = 3, head_dim = 64;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
    for (size_t rot_dims : {size_t(64), size_t(32), size_t(16)}) {
      const size_t pairs = rot_dims / 2;
      std::vector<double> inv_freq(pairs);
      for (size_t i = 0; i < pairs; ++i)
        inv_freq[i] = std::pow(10000.0, -2.0 * double(i) / double(rot_dims));
      for (int position : {0, 1, 17, 4095, 100000}) {
        const auto x = Random(n_heads * head_dim, 1.0f, gen);
        // The reference takes float tables made from double angles, as the CPU backend does.
        std::vector<float> cos_table(pairs), sin_table(pairs);
        for (size_t i = 0; i < pairs; ++i) {
          cos_table[i] = float(std::cos(double(position) * inv_freq[i]));
          sin_table[i] = float(std::sin(double(position) * inv_freq[i]));
        }
        std::vector<float> want = x, got = x;
        ref.rope(want.data(), n_heads, head_dim, rot_dims, cos_table.data(), sin_table.data(),
                 style);
        for (size_t h = 0; h < n_heads; ++h) {
          float* head = got.data() + h * head_dim;
          for (size_t i = 0; i < pairs; ++i) {
            const double angle = RopeAngle(position, inv_freq[i]);
            const RopePair at = RopePairOf(int(i), int(pairs), style == RopeStyle::kHalfSplit);
            const Rotated r = RotatePair(head[at.first], head[at.second], float(std::cos(angle)),
                                         float(std::sin(angle)));
            head[at.first] = r.first;
            head[at.second] = r.second;
          }
        }
        SCOPED_TRACE("rot_dims " + std::to_string(rot_dims) + ", position " +
                     std::to_string(position));
        ExpectClose(want, got, "rope");
      }
    }
  }
}

}  // namespace
}  // namespace petrel
