// The backend conformance suite's fixture: a backend under test per parameter, random weights
// of every type with their dequantized copies, batches, and the comparison with the double
// reference (tests/backend_conformance_test.cc, tests/moe_conformance_test.cc). Test files
// include it once, inside nothing; it defines its names in an anonymous namespace.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/runtime/backend_registry.h"
#include "core/runtime/executor.h"
#include "core/runtime/kv_cache.h"
#include "quant/quantize.h"
#include "util/random_weights.h"  // CanMakeWeightRows, RandomBlocks

namespace petrel {
namespace {

uint32_t TestSeed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("PETREL_TEST_SEED");
    return env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  }();
  return seed;
}

// Weight types the test can write (by a scalar quantizer, or as random valid blocks for the
// decode-only formats) and read back: every type a backend may be asked to multiply.
std::vector<DType> WeightTypes() {
  std::vector<DType> types;
  for (size_t i = 0; i < size_t(DType::kCount); ++i) {
    const DType type = DType(i);
    if (type == DType::kQ8_1 || type == DType::kQ8_K) continue;  // activation-only formats
    if (test::CanMakeWeightRows(type) && CanDequantize(type)) types.push_back(type);
  }
  return types;
}

bool IsBlockType(DType type) { return Traits(type).block_elems > 1; }

// A weight matrix (n_in x n_rows) of `type` with random values, and its dequantized f32 copy.
struct Weight {
  std::vector<uint8_t> bytes;
  std::vector<float> f32;  // (n_rows, n_in), as the backend will read it
  TensorView view;
};

Weight MakeWeight(DType type, size_t n_in, size_t n_rows, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Weight w;
  w.view.desc = TensorDesc::Make(type, {int64_t(n_in), int64_t(n_rows)});
  w.bytes.resize(w.view.desc.bytes());
  w.f32.resize(n_in * n_rows);
  std::vector<float> row(n_in);
  const size_t row_bytes = w.view.desc.row_bytes();
  for (size_t r = 0; r < n_rows; ++r) {
    if (CanQuantize(type)) {
      for (float& v : row) v = normal(gen);
      EXPECT_TRUE(QuantizeRow(type, row.data(), w.bytes.data() + r * row_bytes, n_in));
    } else {
      EXPECT_TRUE(test::RandomBlocks(type, n_in, gen, w.bytes.data() + r * row_bytes));
    }
    EXPECT_TRUE(DequantizeRow(type, w.bytes.data() + r * row_bytes, w.f32.data() + r * n_in, n_in));
  }
  w.view.data = w.bytes.data();
  return w;
}

// Row-major f32 matrices for the reference.
using Matrix = std::vector<double>;

// How a backend's result is compared with the reference, which multiplies f32 activations.
enum class Compare {
  kValues,  // each value within 1e-4 of its row's scale
  // The backend rounds the activations of these float weights to bfloat16 first (its
  // MatMulActivationType; the CPU's `--bf16-dot`): RMS error under 1 % of the RMS value (the
  // rounding alone leaves ~0.2 %); the kernel's own arithmetic is checked exactly against its
  // scalar restatement (bf16_dot_test).
  kBf16Activations,
  // Block-quantized weights: a backend may quantize activations to 8 bits (as llama.cpp does),
  // so the RMS error must stay under 6 % of the RMS value (over one token's 67 rows; with 19
  // rows, gated_ffn of low-bit formats reached 3-7 % on 11 % of seeds, with 67 rows no seed of
  // 1-200 passed 6 %); a wrong block decoder or a wrong row is off by the size of the values.
  kBlockActivations,
};

void ExpectMatches(const Matrix& want, const std::vector<float>& got, size_t cols, Compare how,
                   const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  if (how != Compare::kValues) {
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << " index " << i;
      diff2 += (got[i] - want[i]) * (got[i] - want[i]);
      ref2 += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(diff2 / ref2), how == Compare::kBf16Activations ? 0.01 : 0.06) << what;
    return;
  }
  for (size_t row = 0; row * cols < want.size(); ++row) {
    double scale = 0;
    for (size_t c = 0; c < cols; ++c) scale = std::max(scale, std::fabs(want[row * cols + c]));
    for (size_t c = 0; c < cols; ++c) {
      const size_t i = row * cols + c;
      ASSERT_NEAR(got[i], want[i], 1e-4 * (scale + 1e-3)) << what << " row " << row << " col " << c;
    }
  }
}

// Backends that run on a device (they list devices) rather than on the host.
bool IsDeviceBackend(const std::string& name) {
  for (const BackendFactory& factory : CompiledBackends()) {
    if (name == factory.name) return factory.list_devices != nullptr;
  }
  return false;
}

// One sequence's part of a batch: `n_history` tokens already in its KV cache (from an earlier
// batch), `n_new` tokens now.
struct SeqPart {
  size_t n_history, n_new;
};

class BackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(GetParam(), 0, BackendOptions{2, false, -1});
    if (!backend.ok() && IsDeviceBackend(GetParam())) {
      // A device backend compiled in but without a device here (no driver, no GPU).
      GTEST_SKIP() << GetParam() << ": " << backend.status().message();
    }
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    backend_ = std::move(backend).value();
    gen_.seed(TestSeed());
    ::testing::Test::RecordProperty("seed", std::to_string(TestSeed()));
  }

  // The batch's tokens in order: `parts` give each sequence's new tokens, one sequence after
  // the other. Positions continue each sequence's history.
  struct BatchData {
    std::vector<int32_t> tokens, positions, token_seq, block_tables, block_table_begin, n_ctx,
        kv_slot, selected, n_ctx_all;
    BatchContext context;
  };

  // Runs `graph` on the backend under test (every layer, the embedding and the head on it) and
  // returns the logits value. `kv` may be null when the graph has no attention.
  std::vector<float> Run(const Graph& graph, BatchData& batch, const KvCache* kv) {
    Placement placement;
    placement.layers.assign(1, 0);
    Executor executor({backend_.get()}, placement);
    const ValueDesc& out = graph.values[size_t(graph.logits)];
    std::vector<float> logits(size_t(out.rows * out.cols), NAN);
    const KvCache* cache = kv ? kv : empty_kv_.get();
    if (!cache) {
      auto made = KvCache::Create({backend_.get()}, 32, KvCacheOptions{});
      EXPECT_TRUE(made.ok());
      empty_kv_ = std::move(made).value();
      cache = empty_kv_.get();
    }
    const Status status = executor.Run(graph, batch.context, *cache, logits.data());
    EXPECT_TRUE(status.ok()) << status.message();
    return logits;
  }

  // A batch of `n_tokens` random token ids in one sequence without KV use, all rows selected.
  BatchData SimpleBatch(size_t n_tokens, size_t vocab) {
    BatchData b;
    std::uniform_int_distribution<int32_t> id(0, int32_t(vocab) - 1);
    for (size_t t = 0; t < n_tokens; ++t) {
      b.tokens.push_back(id(gen_));
      b.positions.push_back(int32_t(t));
      b.token_seq.push_back(0);
      b.n_ctx.push_back(int32_t(t) + 1);
      b.n_ctx_all.push_back(int32_t(n_tokens));
      b.kv_slot.push_back(0);
      b.selected.push_back(int32_t(t));
    }
    b.block_table_begin = {0, 0};
    Bind(b);
    return b;
  }

  // A batch of `n_tokens` random token ids spread over up to three sequences (consecutive runs
  // of tokens, each from position 0), without KV use, all rows selected: moe_ffn routes each token
  // alone, whatever sequence it belongs to, and the result must not depend on the split.
  BatchData SeveralSequences(size_t n_tokens, size_t vocab) {
    BatchData b = SimpleBatch(n_tokens, vocab);
    const size_t n = n_tokens;
    const size_t n_seqs = std::min<size_t>(3, n);
    b.block_table_begin.assign(n_seqs + 1, 0);
    size_t first = 0;
    for (size_t t = 0; t < n; ++t) {
      const size_t seq = t * n_seqs / n;
      if (t > 0 && seq != size_t(b.token_seq[t - 1])) first = t;
      b.token_seq[t] = int32_t(seq);
      b.positions[t] = int32_t(t - first);
      b.n_ctx[t] = int32_t(t - first + 1);
    }
    for (size_t t = 0; t < n; ++t) {
      size_t len = 0;
      for (size_t u = 0; u < n; ++u) len += b.token_seq[u] == b.token_seq[t] ? 1 : 0;
      b.n_ctx_all[t] = int32_t(len);
    }
    Bind(b);
    return b;
  }

  void Bind(BatchData& b) {
    BatchContext& c = b.context;
    c.n_tokens = b.tokens.size();
    c.tokens = b.tokens.data();
    c.positions = b.positions.data();
    c.n_seqs = b.block_table_begin.size() - 1;
    c.token_seq = b.token_seq.data();
    c.block_tables = b.block_tables.data();
    c.block_table_begin = b.block_table_begin.data();
    c.n_ctx = b.n_ctx.data();
    c.kv_slot = b.kv_slot.data();
    c.n_ctx_all = b.n_ctx_all.empty() ? nullptr : b.n_ctx_all.data();
    c.max_ctx = 0;
    for (int32_t n : b.n_ctx) c.max_ctx = std::max(c.max_ctx, size_t(n));
    for (int32_t n : b.n_ctx_all) c.max_ctx = std::max(c.max_ctx, size_t(n));
    c.selected_rows = b.selected.data();
    c.n_selected = b.selected.size();
  }

  // `w` made usable on the backend under test (uploaded, for a device), as the engine does at
  // load. Each call places the weight's current bytes anew; the view lives as long as the test.
  const TensorView* Placed(const Weight& w) {
    auto placed = backend_->PrepareWeight(w.view);
    EXPECT_TRUE(placed.ok()) << placed.status().message();
    placed_.push_back(placed.ok() ? *placed : w.view);
    return &placed_.back();
  }

  // An embedding table of random f32 rows and the graph's first value: its rows for the batch.
  ValueId Embed(Graph* graph, const Weight& table, size_t n_tokens) {
    Node node{OpKind::kEmbed, kEmbeddingLayer};
    node.weight = Placed(table);
    return graph->Add(node, int64_t(n_tokens), table.view.desc.ne[0]);
  }
  // How results for weights of `type` compare (Compare).
  Compare CompareFor(DType type) const {
    if (IsBlockType(type)) return Compare::kBlockActivations;
    return backend_->MatMulActivationType(type) == DType::kBF16 ? Compare::kBf16Activations
                                                                : Compare::kValues;
  }

  static Matrix Lookup(const Weight& table, const BatchData& b) {
    const size_t dim = size_t(table.view.desc.ne[0]);
    Matrix out;
    for (int32_t token : b.tokens) {
      out.insert(out.end(), table.f32.begin() + size_t(token) * dim,
                 table.f32.begin() + size_t(token + 1) * dim);
    }
    return out;
  }

  std::unique_ptr<Backend> backend_;
  std::deque<TensorView> placed_;
  std::unique_ptr<KvCache> empty_kv_;
  std::mt19937 gen_;
};

constexpr size_t kVocab = 37;
const size_t kTokenCounts[] = {1, 7, 70};

}  // namespace
}  // namespace petrel
