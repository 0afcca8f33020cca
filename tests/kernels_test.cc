// Every CpuKernels() entry against ReferenceKernels() on random inputs, for every Highway target
// this machine supports; plus batch invariance of mat_mul.
#include "cpu/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "cpu/attention/attention_split.h"  // CpuAttentionSplitKernels, kAttentionSplitKeys
#include "hwy/targets.h"  // SupportedAndGeneratedTargets, SetSupportedTargetsForTest, TargetName
#include "quant/f16.h"    // F32ToF16, F32ToBF16
#include "ref/reference_kernels.h"

namespace petrel {
namespace {

const HostKernels& Cpu() { return cpu::CpuKernels(); }
const HostKernels& Ref() { return ref::ReferenceKernels(); }

// Random by default (printed on failure); PETREL_TEST_SEED=n reproduces a run.
uint32_t TestSeed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("PETREL_TEST_SEED");
    return env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  }();
  return seed;
}

// Sizes that break kernels for 1 (scalar), 4 (SSE4), 8 (AVX2) and 16 (AVX3) f32 lanes:
// lanes - 1, lanes, lanes + 1 and 3 * lanes + 5 for each.
const size_t kSizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 29, 31, 32, 33, 53, 100, 259};
// Rows long enough for prompt mat_muls to split them into k segments.
const size_t kSizesAndLong[] = {1, 2, 3, 5, 8, 9, 17, 31, 33, 259, 2053};

// Runs `body` once per Highway target this CPU supports, with dispatch forced to that target.
template <class Body>
void ForEachTarget(const Body& body) {
  // Caps dispatch at each target as PETREL_CPU_TARGET does: every kernel runs its best target
  // at or below it (AVX3_DL is compiled only for the integer mat_muls; the rest run AVX3 then).
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(supported & ~(target - 1));
    SCOPED_TRACE(::testing::Message() << "target " << hwy::TargetName(target) << ", seed "
                                      << TestSeed() << " (PETREL_TEST_SEED)");
    body();
    if (::testing::Test::HasFailure()) break;  // one target's failures are enough to read
  }
  hwy::SetSupportedTargetsForTest(0);
}

class Random {
 public:
  Random() : gen_(TestSeed()) {}
  float Uniform(float lo = -1.0f, float hi = 1.0f) {
    return std::uniform_real_distribution<float>(lo, hi)(gen_);
  }
  size_t Index(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(gen_); }
  // `n` floats in [lo, hi), never all zero, starting one float past an aligned allocation.
  std::vector<float> Floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n + 1);
    for (float& x : v) x = Uniform(lo, hi);
    v[1 + Index(n)] = hi * 0.75f;
    return v;  // use v.data() + 1: misaligned by one float
  }
  std::mt19937& gen() { return gen_; }

 private:
  std::mt19937 gen_;
};

// |got - want| <= rel * scale + abs for each element, with the index in the message.
void ExpectClose(const float* want, const float* got, size_t n, const float* scale, float rel,
                 float abs, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    const float tol = rel * (scale ? scale[i] : std::fabs(want[i])) + abs;
    ASSERT_NEAR(want[i], got[i], tol) << what << " element " << i << " of " << n;
  }
}

// Weights of `type`, stored as raw bytes with rows `row_bytes` apart.
struct Weights {
  std::vector<uint8_t> bytes;
  size_t row_bytes = 0;
  const void* data() const { return bytes.data() + 4; }  // misaligned by one f32 / two f16
};

Weights MakeWeights(DType type, size_t rows, size_t n_in, Random& rng, bool absolute = false) {
  const size_t elem_bytes = type == DType::kF32 ? 4 : 2;
  Weights w;
  w.row_bytes = (n_in + 1) * elem_bytes;  // padded rows: row starts misaligned too
  w.bytes.resize(rows * w.row_bytes + 8);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> row = rng.Floats(n_in);
    if (absolute) {
      for (float& x : row) x = std::fabs(x);
    }
    Ref().row_from_f32(type, row.data() + 1, n_in, w.bytes.data() + 4 + r * w.row_bytes);
  }
  return w;
}

// Ref mat_mul of |W| |x|: the scale of each output's rounding error.
void MatMulMagnitude(DType type, const Weights& w, size_t n_in, const float* x, size_t x_stride,
                     size_t n_tokens, size_t rows, float* out, size_t out_stride) {
  Weights abs_w = w;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < n_in; ++i) {
      uint8_t* elem = abs_w.bytes.data() + 4 + r * w.row_bytes;
      if (type == DType::kF32) {
        float* f = reinterpret_cast<float*>(elem) + i;
        *f = std::fabs(*f);
      } else {
        reinterpret_cast<uint16_t*>(elem)[i] &= 0x7FFF;
      }
    }
  }
  std::vector<float> abs_x(x_stride * n_tokens);
  for (size_t i = 0; i < abs_x.size(); ++i) abs_x[i] = std::fabs(x[i]);
  Ref().mat_mul(type, abs_w.data(), w.row_bytes, n_in, abs_x.data(), x_stride, n_tokens, nullptr,
                out, out_stride, 0, rows);
}

TEST(KernelsTest, SupportedWeightTypes) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_TRUE(cpu::SupportsWeightType(type));
    EXPECT_TRUE(ref::SupportsWeightType(type));
  }
  EXPECT_TRUE(cpu::SupportsWeightType(DType::kQ4_K));   // quantized kernels: quant_kernels_test
  // A block type without a kernel row (here the activation format Q8_K) runs decoded row by
  // row, as ref runs it and Vulkan converts it at upload.
  EXPECT_TRUE(cpu::SupportsWeightType(DType::kQ8_K));
  EXPECT_NE(cpu::MatMulPathName(DType::kQ8_K).find("decoded"), std::string::npos);
  EXPECT_FALSE(cpu::SupportsWeightType(DType::kI32));
  EXPECT_FALSE(ref::SupportsWeightType(DType::kI32));
}

TEST(KernelsTest, MatMulMatchesReference) {
  Random rng;
  const float kSentinel = 12345.0f;
  ForEachTarget([&] {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (size_t n_in : kSizesAndLong) {
        for (size_t rows : {1, 3, 7, 13, 53}) {  // 53: two prompt panels
          for (size_t n_tokens : {1, 7, 16, 19}) {
            SCOPED_TRACE(::testing::Message() << DTypeName(type) << " n_in " << n_in << " rows "
                                              << rows << " tokens " << n_tokens);
            const Weights w = MakeWeights(type, rows, n_in, rng);
            const size_t x_stride = n_in + 3, out_stride = rows + 2;
            const std::vector<float> x = rng.Floats(x_stride * n_tokens);
            const std::vector<float> bias = rng.Floats(rows);
            const bool use_bias = rng.Index(2) == 1;
            const size_t row_begin = rows > 2 ? 1 : 0, row_end = rows;
            std::vector<float> want(out_stride * n_tokens + 1, kSentinel), got = want;
            std::vector<float> scale(out_stride * n_tokens);
            Ref().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + 1, x_stride, n_tokens,
                          use_bias ? bias.data() + 1 : nullptr, want.data() + 1, out_stride,
                          row_begin, row_end);
            Cpu().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + 1, x_stride, n_tokens,
                          use_bias ? bias.data() + 1 : nullptr, got.data() + 1, out_stride,
                          row_begin, row_end);
            MatMulMagnitude(type, w, n_in, x.data() + 1, x_stride, n_tokens, rows, scale.data(),
                            out_stride);
            for (size_t i = 0; i < scale.size(); ++i) scale[i] += 1.0f;  // the bias
            ExpectClose(want.data() + 1, got.data() + 1, out_stride * n_tokens, scale.data(), 1e-5f,
                        0.0f, "mat_mul");
            if (::testing::Test::HasFailure()) return;
            for (size_t t = 0; t < n_tokens; ++t) {  // rows outside the range are untouched
              for (size_t r = 0; r < out_stride; ++r) {
                if (r >= row_begin && r < row_end) continue;
                ASSERT_EQ(got[1 + t * out_stride + r], kSentinel) << "row " << r;
              }
            }
          }
        }
      }
    }
  });
}

// A token's outputs are bit-identical alone and inside a batch with another row split.
TEST(KernelsTest, MatMulIsBatchInvariant) {
  Random rng;
  ForEachTarget([&] {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      // 12000: rows long enough that a panel holds fewer blocks than the rows allow.
      for (size_t n_in : {size_t{67}, size_t{2048}, size_t{259}, size_t{12000}}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(type) << " n_in " << n_in);
        // 2-16 tokens (short batches: speculative verification, a server step's decoding
        // sequences) take the register tiles on rows spread like a single token's, whole tiles
        // and leftover tokens; 17 and 21 the f32 panels (K segments, whole tiles, then leftover
        // tokens); 70 two token chunks in each panel. Every token must match its single-token
        // result.
        // 101 rows: several panels in one call (the next one made ready during the current),
        // and rows no panel covers.
        const size_t rows = 101;
        const Weights w = MakeWeights(type, rows, n_in, rng);
        const std::vector<float> bias = rng.Floats(rows);
        for (size_t n_tokens :
             std::initializer_list<size_t>{2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 21, 70}) {
          const std::vector<float> x = rng.Floats(n_in * n_tokens + 1);
          std::vector<float> batch(rows * n_tokens), whole(rows * n_tokens);
          for (auto [begin, end] : {std::pair<size_t, size_t>{0, 5}, {5, 6}, {6, 101}}) {
            Cpu().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + 1, n_in, n_tokens,
                          bias.data() + 1, batch.data(), rows, begin, end);
          }
          Cpu().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + 1, n_in, n_tokens,
                        bias.data() + 1, whole.data(), rows, 0, rows);
          for (size_t token : {size_t{0}, n_tokens / 2, n_tokens - 1}) {
            std::vector<float> alone(rows);
            Cpu().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + 1 + token * n_in, n_in,
                          1, bias.data() + 1, alone.data(), rows, 0, rows);
            ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + token * rows, rows * 4))
                << n_tokens << " tokens, token " << token;
            ASSERT_EQ(0, std::memcmp(alone.data(), whole.data() + token * rows, rows * 4))
                << n_tokens << " tokens, token " << token;
          }
        }
      }
    }
  });
}

TEST(KernelsTest, RowConversionsAreExact) {
  Random rng;
  ForEachTarget([&] {
    for (size_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << "n " << n);
      // f32 -> f16/bf16 over the whole f16 range: subnormals, overflow, exact ties.
      std::vector<float> values(n + 1);
      for (float& v : values) {
        v = std::ldexp(rng.Uniform(), int(rng.Index(40)) - 26);
        if (rng.Index(8) == 0) v = 70000.0f * rng.Uniform();
      }
      for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
        std::vector<uint16_t> want(2 * n + 2), got(2 * n + 2);
        Ref().row_from_f32(type, values.data() + 1, n, want.data() + 1);
        Cpu().row_from_f32(type, values.data() + 1, n, got.data() + 1);
        ASSERT_EQ(want, got) << "row_from_f32 " << DTypeName(type);
        // Random non-NaN bit patterns back to f32.
        std::vector<uint16_t> bits(2 * n + 1);
        for (uint16_t& b : bits) {
          do b = uint16_t(rng.Index(65536));
          while (type == DType::kF16 ? (b & 0x7C00) == 0x7C00 && (b & 0x3FF)
                                     : (b & 0x7F80) == 0x7F80 && (b & 0x7F));
        }
        std::vector<float> want_f(n + 1), got_f(n + 1);
        Ref().row_to_f32(type, bits.data() + 1, n, want_f.data() + 1);
        Cpu().row_to_f32(type, bits.data() + 1, n, got_f.data() + 1);
        ASSERT_EQ(0, std::memcmp(want_f.data(), got_f.data(), want_f.size() * 4))
            << "row_to_f32 " << DTypeName(type);
      }
    }
  });
}

TEST(KernelsTest, RmsNormMatchesReference) {
  Random rng;
  ForEachTarget([&] {
    for (size_t n : kSizes) {
      for (float eps : {1e-5f, 1e-6f}) {
        const std::vector<float> x = rng.Floats(n, -3.0f, 3.0f), weight = rng.Floats(n);
        std::vector<float> want(n + 1), got(n + 1);
        Ref().rms_norm(x.data() + 1, weight.data() + 1, n, eps, want.data() + 1);
        Cpu().rms_norm(x.data() + 1, weight.data() + 1, n, eps, got.data() + 1);
        ExpectClose(want.data() + 1, got.data() + 1, n, nullptr, 1e-5f, 1e-6f, "rms_norm");
        if (::testing::Test::HasFailure()) return;
        std::vector<float> in_place = x;  // out may alias x
        Cpu().rms_norm(in_place.data() + 1, weight.data() + 1, n, eps, in_place.data() + 1);
        ASSERT_EQ(0, std::memcmp(got.data() + 1, in_place.data() + 1, n * 4));
      }
    }
  });
}

TEST(KernelsTest, RopeMatchesReference) {
  Random rng;
  ForEachTarget([&] {
    for (size_t head_dim : {2, 6, 16, 48, 64, 128}) {
      for (size_t rot_dims : {head_dim, head_dim / 2 * 2 - 2 * (head_dim > 4), size_t{2}}) {
        for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
          for (size_t n_heads : {1, 3}) {
            SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " rot_dims " << rot_dims
                                              << " style " << int(style));
            std::vector<float> angles = rng.Floats(rot_dims / 2, -10.0f, 10.0f);
            std::vector<float> cos(rot_dims / 2 + 1), sin(rot_dims / 2 + 1);
            for (size_t i = 0; i < rot_dims / 2; ++i) {
              cos[1 + i] = std::cos(angles[1 + i]);
              sin[1 + i] = std::sin(angles[1 + i]);
            }
            const std::vector<float> x = rng.Floats(n_heads * head_dim);
            std::vector<float> want = x, got = x;
            Ref().rope(want.data() + 1, n_heads, head_dim, rot_dims, cos.data() + 1, sin.data() + 1,
                       style);
            Cpu().rope(got.data() + 1, n_heads, head_dim, rot_dims, cos.data() + 1, sin.data() + 1,
                       style);
            ExpectClose(want.data() + 1, got.data() + 1, n_heads * head_dim, nullptr, 1e-6f, 1e-6f,
                        "rope");
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

TEST(KernelsTest, ElementwiseMatchesReference) {
  Random rng;
  ForEachTarget([&] {
    for (size_t n : kSizes) {
      const std::vector<float> a = rng.Floats(n, -12.0f, 12.0f), b = rng.Floats(n, -4.0f, 4.0f);
      std::vector<float> want(n + 1), got(n + 1);
      Ref().silu_mul(a.data() + 1, b.data() + 1, n, want.data() + 1);
      Cpu().silu_mul(a.data() + 1, b.data() + 1, n, got.data() + 1);
      ExpectClose(want.data() + 1, got.data() + 1, n, nullptr, 1e-5f, 1e-7f, "silu_mul");
      if (::testing::Test::HasFailure()) return;
      Ref().add(a.data() + 1, b.data() + 1, n, want.data() + 1);
      Cpu().add(a.data() + 1, b.data() + 1, n, got.data() + 1);
      ASSERT_EQ(0, std::memcmp(want.data() + 1, got.data() + 1, n * 4)) << "add";
      Ref().gelu_mul(a.data() + 1, b.data() + 1, n, want.data() + 1);
      Cpu().gelu_mul(a.data() + 1, b.data() + 1, n, got.data() + 1);
      ExpectClose(want.data() + 1, got.data() + 1, n, nullptr, 1e-5f, 1e-7f, "gelu_mul");
      Ref().scale(a.data() + 1, 8.0f, n, want.data() + 1);
      Cpu().scale(a.data() + 1, 8.0f, n, got.data() + 1);
      ASSERT_EQ(0, std::memcmp(want.data() + 1, got.data() + 1, n * 4)) << "scale";
      for (float cap : {30.0f, 4.0f}) {
        Ref().softcap(a.data() + 1, cap, n, want.data() + 1);
        Cpu().softcap(a.data() + 1, cap, n, got.data() + 1);
        ExpectClose(want.data() + 1, got.data() + 1, n, nullptr, 1e-5f, 1e-7f, "softcap");
      }
      if (::testing::Test::HasFailure()) return;
    }
  });
}

// A paged K/V layer with a shuffled block table, filled with random rows.
struct PagedKv {
  std::vector<uint8_t> k, v;
  std::vector<int32_t> block_table;
  PagedKvView view;
};

PagedKv MakePagedKv(DType dtype, size_t block_tokens, size_t n_ctx, size_t row_elems, Random& rng) {
  const size_t n_blocks = (n_ctx + block_tokens - 1) / block_tokens + 3;
  const size_t row_bytes = *RowBytes(dtype, row_elems);
  const size_t misalign =
      dtype == DType::kF32 ? 4 : 2;  // one element (or a Q8_0 scale) past aligned
  PagedKv kv;
  kv.block_table.resize(n_blocks);
  for (size_t i = 0; i < n_blocks; ++i) kv.block_table[i] = int32_t(i);
  std::shuffle(kv.block_table.begin(), kv.block_table.end(), rng.gen());
  for (std::vector<uint8_t>* cache : {&kv.k, &kv.v}) {
    cache->resize(n_blocks * block_tokens * row_bytes + misalign);
    const size_t n_rows = n_blocks * block_tokens;
    for (size_t row = 0; row < n_rows; ++row) {
      const std::vector<float> values = rng.Floats(row_elems);
      Ref().row_from_f32(dtype, values.data() + 1, row_elems,
                         cache->data() + misalign + row * row_bytes);
    }
  }
  kv.view = {.k = kv.k.data() + misalign,
             .v = kv.v.data() + misalign,
             .dtype = dtype,
             .block_tokens = block_tokens,
             .row_elems = row_elems};
  return kv;
}

// Q8_0 caches need whole 32-element blocks per head.
bool KvSupportsHeadDim(DType dtype, size_t head_dim) {
  return dtype != DType::kQ8_0 || head_dim % 32 == 0;
}

TEST(KernelsTest, AttentionMatchesReference) {
  Random rng;
  ForEachTarget([&] {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0}) {
      for (size_t head_dim : {16, 48, 64, 128, 20}) {
        if (!KvSupportsHeadDim(dtype, head_dim)) continue;
        for (size_t group : {1, 2, 4}) {
          const size_t n_kv_heads = 2, n_heads = n_kv_heads * group;
          const size_t block_tokens = group == 2 ? 5 : 16;  // 5: many blocks, odd sizes
          const PagedKv kv = MakePagedKv(dtype, block_tokens, 70, n_kv_heads * head_dim, rng);
          // Plain, soft-capped, windowed (cutting tiles and blocks mid-way), both.
          for (auto [softcap, window] : {std::pair{0.0f, size_t(0)}, std::pair{2.0f, size_t(0)},
                                         std::pair{0.0f, size_t(6)}, std::pair{3.0f, size_t(17)}})
          for (int32_t n_ctx : {1, 2, 15, 16, 17, 33, 70}) {
            // 1 to 3 queries, the last attending n_ctx keys and earlier ones fewer, as in a prompt.
            const size_t n_queries = 1 + size_t(n_ctx) % 3;
            std::vector<int32_t> query_ctx(n_queries);
            for (size_t i = 0; i < n_queries; ++i) {
              query_ctx[i] = std::max<int32_t>(1, n_ctx - 7 * int32_t(n_queries - 1 - i));
            }
            SCOPED_TRACE(::testing::Message()
                         << DTypeName(dtype) << " head_dim " << head_dim << " group " << group
                         << " n_ctx " << n_ctx << " n_queries " << n_queries << " softcap "
                         << softcap << " window " << window);
            const size_t out_elems = n_queries * n_heads * head_dim;
            const std::vector<float> q = rng.Floats(out_elems, -2.0f, 2.0f);
            std::vector<float> want(out_elems + 1, 7.0f), got = want;
            AttentionArgs args = {.q = q.data() + 1,
                                  .kv = &kv.view,
                                  .block_table = kv.block_table.data(),
                                  .n_ctx = query_ctx.data(),
                                  .n_queries = n_queries,
                                  .n_heads = n_heads,
                                  .n_kv_heads = n_kv_heads,
                                  .head_dim = head_dim,
                                  .scale = 1.0f / std::sqrt(float(head_dim)),
                                  .softcap = softcap,
                                  .window = window,
                                  .out = want.data() + 1};
            const size_t head_begin = n_heads > 2 ? 1 : 0, head_end = n_heads;
            Ref().attention(args, head_begin, head_end);
            args.out = got.data() + 1;
            Cpu().attention(args, head_begin, head_end);
            ExpectClose(want.data(), got.data(), want.size(), nullptr, 1e-5f, 2e-6f, "attention");
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

// A prompt's queries computed in one call must give the same bits as each token alone (decode),
// each head alone, or the prompt cut into pieces: every query's float operations depend only on
// its own q and keys. This covers the staged-tile path (many rows per tile) against the direct
// one (one row).
TEST(KernelsTest, AttentionIsBatchInvariant) {
  Random rng;
  ForEachTarget([&] {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0}) {
      for (size_t head_dim : {20, 32, 64}) {
        if (!KvSupportsHeadDim(dtype, head_dim)) continue;
        for (size_t group : {1, 3}) {
          for (size_t block_tokens : {5, 16})
          for (size_t window : {0, 7, 16}) {
            SCOPED_TRACE(::testing::Message()
                         << DTypeName(dtype) << " head_dim " << head_dim << " group " << group
                         << " block_tokens " << block_tokens << " window " << window);
            const size_t n_kv_heads = 2, n_heads = n_kv_heads * group;
            const size_t start = 11, n_prompt = 37;  // positions [11, 48)
            const size_t row_elems = n_heads * head_dim;
            const PagedKv kv =
                MakePagedKv(dtype, block_tokens, start + n_prompt, n_kv_heads * head_dim, rng);
            const std::vector<float> q = rng.Floats(n_prompt * row_elems, -2.0f, 2.0f);
            std::vector<int32_t> n_ctx(n_prompt);
            for (size_t i = 0; i < n_prompt; ++i) n_ctx[i] = int32_t(start + i + 1);
            AttentionArgs args = {.q = q.data() + 1,
                                  .kv = &kv.view,
                                  .block_table = kv.block_table.data(),
                                  .n_ctx = n_ctx.data(),
                                  .n_queries = n_prompt,
                                  .n_heads = n_heads,
                                  .n_kv_heads = n_kv_heads,
                                  .head_dim = head_dim,
                                  .scale = 1.0f / std::sqrt(float(head_dim)),
                                  .softcap = window > 0 ? 5.0f : 0.0f,
                                  .window = window};
            std::vector<float> whole(n_prompt * row_elems);
            args.out = whole.data();
            Cpu().attention(args, 0, n_heads);

            // Queries [first, first + count), heads [head_begin, head_end) into `got`.
            std::vector<float> got(whole.size(), 7.0f);
            auto run = [&](size_t first, size_t count, size_t head_begin, size_t head_end) {
              AttentionArgs part = args;
              part.q = args.q + first * row_elems;
              part.n_ctx = n_ctx.data() + first;
              part.n_queries = count;
              part.out = got.data() + first * row_elems;
              Cpu().attention(part, head_begin, head_end);
            };
            for (size_t i = 0; i < n_prompt; ++i) run(i, 1, 0, n_heads);
            EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)))
                << "one token at a time";
            std::fill(got.begin(), got.end(), 7.0f);
            for (size_t i = 0; i < n_prompt; ++i) {
              for (size_t h = 0; h < n_heads; ++h) run(i, 1, h, h + 1);
            }
            EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)))
                << "one token and head at a time";
            std::fill(got.begin(), got.end(), 7.0f);
            run(0, 16, 0, n_heads);
            run(16, 5, 0, 1);
            run(16, 5, 1, n_heads);
            run(21, n_prompt - 21, 0, n_heads);
            EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)))
                << "prompt in pieces";
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

// Split-K: a row's keys in splits of split_keys positions, each split's state folded in split
// order. Against the unsplit computation within tolerance; and bit for bit the same whether one
// call computes every split, or calls write the splits' partial states in any pieces (as threads
// would share them) and attention_merge folds them, whichever queries share a call (a prompt's,
// one token alone, or picked out of a larger batch by query_rows).
TEST(KernelsTest, AttentionSplitKIsExactAndInvariant) {
  Random rng;
  ForEachTarget([&] {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0}) {
      for (size_t head_dim : {20, 64}) {
        if (!KvSupportsHeadDim(dtype, head_dim)) continue;
        for (size_t block_tokens : {5, 16})
          for (size_t split_keys : {size_t(16), size_t(40), kAttentionSplitKeys})
            for (size_t window : {0, 23}) {
              SCOPED_TRACE(::testing::Message()
                           << DTypeName(dtype) << " head_dim " << head_dim << " block_tokens "
                           << block_tokens << " split_keys " << split_keys << " window " << window);
              const size_t n_kv_heads = 2, group = 3, n_heads = n_kv_heads * group;
              const size_t start = 90, n_prompt = 9;  // positions [90, 99)
              const size_t row_elems = n_heads * head_dim;
              const PagedKv kv =
                  MakePagedKv(dtype, block_tokens, start + n_prompt, n_kv_heads * head_dim, rng);
              const std::vector<float> q = rng.Floats(n_prompt * row_elems, -2.0f, 2.0f);
              const std::vector<float> sinks = rng.Floats(n_heads, -1.0f, 1.0f);
              std::vector<int32_t> n_ctx(n_prompt);
              for (size_t i = 0; i < n_prompt; ++i) n_ctx[i] = int32_t(start + i + 1);
              AttentionArgs args = {.q = q.data(),
                                    .kv = &kv.view,
                                    .block_table = kv.block_table.data(),
                                    .n_ctx = n_ctx.data(),
                                    .n_queries = n_prompt,
                                    .n_heads = n_heads,
                                    .n_kv_heads = n_kv_heads,
                                    .head_dim = head_dim,
                                    .scale = 1.0f / std::sqrt(float(head_dim)),
                                    .window = window,
                                    .sinks = sinks.data()};
              std::vector<float> unsplit(n_prompt * row_elems), whole(unsplit.size());
              const AttentionSplitKernels& splits = cpu::CpuAttentionSplitKernels();
              AttentionSplitArgs unsplit_args, split_args;
              unsplit_args.split_keys = 1 << 20;
              split_args.split_keys = split_keys;
              args.out = unsplit.data();
              splits.attention(args, unsplit_args, 0, n_heads);
              args.out = whole.data();
              splits.attention(args, split_args, 0, n_heads);
              if (split_keys == kAttentionSplitKeys) {
                std::vector<float> plain(whole.size());
                args.out = plain.data();
                Cpu().attention(args, 0, n_heads);  // the table's entry splits the same way
                EXPECT_EQ(0, std::memcmp(whole.data(), plain.data(), whole.size() * sizeof(float)));
                args.out = whole.data();
              }
              ExpectClose(unsplit.data(), whole.data(), whole.size(), nullptr, 1e-5f, 2e-6f,
                          "split against unsplit");
              if (split_keys == 16 && window == 0) {  // six splits: some rounding must differ
                EXPECT_NE(0,
                          std::memcmp(unsplit.data(), whole.data(), whole.size() * sizeof(float)))
                    << "the splits were not taken";
              }
              std::vector<float> want(whole.size());
              args.out = want.data();
              Ref().attention(args, 0, n_heads);  // the oracle ignores splits
              args.out = whole.data();
              ExpectClose(want.data(), whole.data(), whole.size(), nullptr, 1e-5f, 2e-6f,
                          "split against the reference");

              // Partials of every split, written in pieces: `pieces` split ranges per call, each
              // call either the whole prompt or one token (picked by query_rows).
              const size_t n_splits = (start + n_prompt - 1) / split_keys + 2;  // one spare
              const size_t stride = n_prompt * n_heads * AttentionPartialFloats(head_dim);
              std::vector<float> partials(n_splits * stride, 123.0f);
              std::vector<int32_t> rows(n_prompt);
              for (size_t i = 0; i < n_prompt; ++i) rows[i] = int32_t(i);
              for (size_t piece : {size_t(1), size_t(2), n_splits})
                for (bool per_token : {false, true}) {
                  SCOPED_TRACE(::testing::Message()
                               << "splits per call " << piece << " per token " << per_token);
                  std::vector<float> got(whole.size(), 7.0f);
                  AttentionArgs part = args;
                  AttentionSplitArgs part_split = split_args;
                  part_split.partials = partials.data();
                  part_split.partial_split_stride = stride;
                  for (size_t first = 0; first < n_splits; first += piece) {
                    part_split.split_begin = first;
                    part_split.split_end = first + piece;
                    if (!per_token) {
                      splits.attention(part, part_split, 0, n_heads);
                      continue;
                    }
                    for (size_t i = n_prompt; i-- > 0;) {  // backwards: order must not matter
                      part.n_ctx = n_ctx.data() + i;
                      part_split.query_rows = rows.data() + i;
                      part.n_queries = 1;
                      for (size_t h = 0; h < n_heads; h += 2)
                        splits.attention(part, part_split, h, h + 2);
                    }
                  }
                  AttentionArgs merge = args;
                  AttentionSplitArgs merge_split = split_args;
                  merge_split.partials = partials.data();
                  merge_split.partial_split_stride = stride;
                  merge.out = got.data();
                  splits.merge(merge, merge_split, 0, 1);
                  splits.merge(merge, merge_split, 1, n_heads);
                  EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)));
                }
              if (::testing::Test::HasFailure()) return;
            }
      }
    }
  });
}

}  // namespace
}  // namespace petrel
