// Every op but moe_ffn (tests/moe_conformance_test.cc) through the backend seam (Allocate,
// BeginBatch, Run, Submit, copies, Synchronize, the executor and the paged KV cache), on every
// registered backend, against a scalar reference written here in double precision. A new
// backend joins by being registered: the suite is instantiated over AvailableBackends(). Inputs
// are fresh random values (seed printed on failure; PETREL_TEST_SEED=n reproduces a run).
#include "util/backend_conformance.h"

namespace petrel {
namespace {

TEST_P(BackendConformance, EmbedEveryWeightType) {
  for (DType type : WeightTypes()) {
    Weight table = MakeWeight(type, 256, kVocab, gen_);
    if (!backend_->Supports(Node{OpKind::kEmbed, kEmbeddingLayer, {}, kNoValue, &table.view})) continue;
    for (size_t n : kTokenCounts) {
      Graph graph;
      BatchData b = SimpleBatch(n, kVocab);
      graph.logits = Embed(&graph, table, n);
      // Row conversion is exact for every type: the same bits as the dequantizer.
      ExpectMatches(Lookup(table, b), Run(graph, b, nullptr), 256, Compare::kValues,
                    std::string("embed ") + DTypeName(type));
    }
  }
}

TEST_P(BackendConformance, RmsNormAddSiluMulGetRows) {
  for (size_t dim : {size_t(1), size_t(33), size_t(96)}) {
    Weight table_a = MakeWeight(DType::kF32, dim, kVocab, gen_);
    Weight table_b = MakeWeight(DType::kF32, dim, kVocab, gen_);
    Weight norm = MakeWeight(DType::kF32, dim, 1, gen_);
    for (size_t n : kTokenCounts) {
      BatchData b = SimpleBatch(n, kVocab);
      const Matrix a = Lookup(table_a, b);
      // The second operand is table b's row after each token's (see `shifted` below).
      BatchData next = b;
      for (int32_t& token : next.tokens) token = (token + 1) % int32_t(kVocab);
      const Matrix bv = Lookup(table_b, next);
      const std::string where = " dim " + std::to_string(dim) + " tokens " + std::to_string(n);

      // rms_norm
      {
        Graph graph;
        const ValueId x = Embed(&graph, table_a, n);
        Node node{OpKind::kRmsNorm, 0, {x}};
        node.weight = Placed(norm);
        node.norm.eps = 1e-5f;
        graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
        Matrix want(a.size());
        for (size_t t = 0; t < n; ++t) {
          double sum2 = 0;
          for (size_t c = 0; c < dim; ++c) sum2 += a[t * dim + c] * a[t * dim + c];
          const double inv = 1.0 / std::sqrt(sum2 / double(dim) + 1e-5);
          for (size_t c = 0; c < dim; ++c) want[t * dim + c] = a[t * dim + c] * inv * norm.f32[c];
        }
        ExpectMatches(want, Run(graph, b, nullptr), dim, Compare::kValues, "rms_norm" + where);
      }
      // add and silu_mul of two looked-up values, then get_rows of every other row.
      for (OpKind op : {OpKind::kAdd, OpKind::kSiluMul, OpKind::kGeluMul}) {
        Graph graph;
        const ValueId x = Embed(&graph, table_a, n);
        // A second embed node on a table whose row t is table_b's row t + 1.
        Weight shifted = table_b;
        const size_t row_bytes = shifted.view.desc.row_bytes();
        for (size_t r = 0; r < kVocab; ++r) {
          std::copy_n(table_b.bytes.begin() + ((r + 1) % kVocab) * row_bytes, row_bytes,
                      shifted.bytes.begin() + r * row_bytes);
        }
        shifted.view.data = shifted.bytes.data();
        const ValueId y = Embed(&graph, shifted, n);
        if (!backend_->Supports(Node{op, 0, {x, y}})) continue;
        const ValueId z = graph.Add(Node{op, 0, {x, y}}, int64_t(n), int64_t(dim));
        BatchData picked = b;
        picked.selected.clear();
        for (size_t t = 0; t < n; t += 2) picked.selected.push_back(int32_t(t));
        Bind(picked);
        graph.logits =
            graph.Add(Node{OpKind::kGetRows, 1, {z}}, int64_t(picked.selected.size()), int64_t(dim));
        Matrix want;
        for (int32_t t : picked.selected) {
          for (size_t c = 0; c < dim; ++c) {
            const double u = a[size_t(t) * dim + c], v = bv[size_t(t) * dim + c];
            const double gelu_tanh =
                0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
            want.push_back(op == OpKind::kAdd       ? u + v
                           : op == OpKind::kSiluMul ? u / (1.0 + std::exp(-u)) * v
                                                    : gelu_tanh * v);
          }
        }
        ExpectMatches(want, Run(graph, picked, nullptr), dim, Compare::kValues,
                      std::string(OpName(op)) + " + get_rows" + where);
      }
    }
  }
}

// The encoder's ops: layer_norm with and without bias, the exact GELU, and add_rows of a
// position table and of a fixed row (token type 0), from F32 and F16 tables.
TEST_P(BackendConformance, LayerNormGeluAddRows) {
  const size_t dim = 45;  // odd: no whole vectors
  Weight table = MakeWeight(DType::kF32, dim, kVocab, gen_);
  for (float& value : table.f32) value = value * 3.0f + 0.7f;  // a mean far from 0
  std::memcpy(table.bytes.data(), table.f32.data(), table.f32.size() * sizeof(float));
  Weight norm = MakeWeight(DType::kF32, dim, 1, gen_);
  Weight bias = MakeWeight(DType::kF32, dim, 1, gen_);
  for (size_t n : kTokenCounts) {
    BatchData b = SimpleBatch(n, kVocab);
    const Matrix x = Lookup(table, b);
    const std::string where = " tokens " + std::to_string(n);
    for (const bool with_bias : {false, true}) {
      Graph graph;
      const ValueId in = Embed(&graph, table, n);
      Node node{OpKind::kLayerNorm, 0, {in}};
      node.weight = &norm.view;
      node.bias = with_bias ? &bias.view : nullptr;
      node.norm.eps = 1e-5f;
      if (!backend_->Supports(node)) continue;
      node.weight = Placed(norm);
      if (with_bias) node.bias = Placed(bias);
      graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
      Matrix want(x.size());
      for (size_t t = 0; t < n; ++t) {
        double mean = 0, var = 0;
        for (size_t c = 0; c < dim; ++c) mean += x[t * dim + c] / double(dim);
        for (size_t c = 0; c < dim; ++c) var += std::pow(x[t * dim + c] - mean, 2) / double(dim);
        for (size_t c = 0; c < dim; ++c) {
          want[t * dim + c] = (x[t * dim + c] - mean) / std::sqrt(var + 1e-5) * norm.f32[c] +
                              (with_bias ? bias.f32[c] : 0.0);
        }
      }
      ExpectMatches(want, Run(graph, b, nullptr), dim, Compare::kValues,
                    std::string("layer_norm") + (with_bias ? " with bias" : "") + where);
    }
    {
      Graph graph;
      const ValueId in = Embed(&graph, table, n);
      Node node{OpKind::kGelu, 0, {in}};
      if (backend_->Supports(node)) {
        graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
        Matrix want(x.size());
        for (size_t i = 0; i < x.size(); ++i) want[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
        ExpectMatches(want, Run(graph, b, nullptr), dim, Compare::kValues, "gelu" + where);
      }
    }
    for (const DType type : {DType::kF32, DType::kF16}) {
      Weight rows = MakeWeight(type, dim, 80, gen_);  // more rows than positions
      for (const bool by_position : {true, false}) {
        Graph graph;
        const ValueId in = Embed(&graph, table, n);
        Node node{OpKind::kAddRows, kEmbeddingLayer, {in}};
        node.weight = &rows.view;
        node.add_rows.by_position = by_position;
        node.add_rows.row = 3;
        if (!backend_->Supports(node)) continue;
        node.weight = Placed(rows);
        graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
        Matrix want(x.size());
        for (size_t t = 0; t < n; ++t) {
          const size_t row = by_position ? size_t(b.positions[t]) : 3;
          for (size_t c = 0; c < dim; ++c) want[t * dim + c] = x[t * dim + c] + rows.f32[row * dim + c];
        }
        ExpectMatches(want, Run(graph, b, nullptr), dim, Compare::kValues,
                      std::string("add_rows ") + DTypeName(type) +
                          (by_position ? " by position" : " row 3") + where);
      }
    }
  }
  // A row outside the table is refused, never read.
  Weight small = MakeWeight(DType::kF32, dim, 4, gen_);
  Node node{OpKind::kAddRows, kEmbeddingLayer, {0}};
  node.weight = &small.view;
  node.add_rows.by_position = false;
  node.add_rows.row = 4;
  EXPECT_FALSE(backend_->Supports(node));
}

// The per-head RMS norm (q/k norms), the scale and the soft-cap of each element.
TEST_P(BackendConformance, HeadRmsNormScaleSoftcap) {
  for (size_t head_dim : {size_t(32), size_t(12)}) {
    const size_t n_heads = 3, dim = n_heads * head_dim;
    Weight table = MakeWeight(DType::kF32, dim, kVocab, gen_);
    Weight norm = MakeWeight(DType::kF32, head_dim, 1, gen_);
    for (float& value : table.f32) value *= 20.0f;  // reach the soft-cap's bend
    std::memcpy(table.bytes.data(), table.f32.data(), table.f32.size() * sizeof(float));
    for (size_t n : kTokenCounts) {
      BatchData b = SimpleBatch(n, kVocab);
      const Matrix x = Lookup(table, b);
      const std::string where =
          " head_dim " + std::to_string(head_dim) + " tokens " + std::to_string(n);
      {
        Graph graph;
        const ValueId in = Embed(&graph, table, n);
        Node node{OpKind::kHeadRmsNorm, 0, {in}};
        node.weight = &norm.view;
        node.norm.eps = 1e-6f;
        node.norm.head_dim = int32_t(head_dim);
        if (backend_->Supports(node)) {
          node.weight = Placed(norm);
          graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
          Matrix want(x.size());
          for (size_t h = 0; h < n * n_heads; ++h) {
            double sum2 = 0;
            for (size_t c = 0; c < head_dim; ++c) sum2 += x[h * head_dim + c] * x[h * head_dim + c];
            const double inv = 1.0 / std::sqrt(sum2 / double(head_dim) + 1e-6);
            for (size_t c = 0; c < head_dim; ++c)
              want[h * head_dim + c] = x[h * head_dim + c] * inv * norm.f32[c];
          }
          ExpectMatches(want, Run(graph, b, nullptr), head_dim, Compare::kValues, "head_rms_norm" + where);
        }
      }
      for (auto [op, scalar] : {std::pair{OpKind::kScale, 8.0f}, std::pair{OpKind::kScale, -0.3f},
                                std::pair{OpKind::kSoftcap, 30.0f},
                                std::pair{OpKind::kSoftcap, 5.0f}}) {
        Graph graph;
        const ValueId in = Embed(&graph, table, n);
        Node node{op, 0, {in}};
        node.scalar = scalar;
        if (!backend_->Supports(node)) continue;
        graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
        Matrix want(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          want[i] = op == OpKind::kScale ? x[i] * scalar : scalar * std::tanh(x[i] / scalar);
        }
        ExpectMatches(want, Run(graph, b, nullptr), dim, Compare::kValues,
                      std::string(OpName(op)) + " " + std::to_string(scalar) + where);
      }
    }
  }
}

// scale_rows: each row times its own scale from the batch (per-sequence LoRA scales), the second
// of two row-scale vectors, zeros and negative scales among them.
TEST_P(BackendConformance, ScaleRows) {
  const size_t dim = 12;  // a LoRA rank-wide value: narrow, not a whole vector width
  Weight table = MakeWeight(DType::kF32, dim, kVocab, gen_);
  for (size_t n : kTokenCounts) {
    BatchData b = SimpleBatch(n, kVocab);
    std::vector<float> row_scales(2 * n, NAN);  // vector 0 is never read
    for (size_t t = 0; t < n; ++t) row_scales[n + t] = t % 3 == 0 ? 0.0f : 0.5f - float(t);
    b.context.row_scales = row_scales.data();
    b.context.n_row_scales = 2;
    Graph graph;
    const ValueId in = Embed(&graph, table, n);
    Node node{OpKind::kScaleRows, 0, {in}};
    node.row_scales = 1;
    if (!backend_->Supports(node)) return;
    graph.logits = graph.Add(node, int64_t(n), int64_t(dim));
    const Matrix x = Lookup(table, b);
    Matrix want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * row_scales[n + i / dim];
    ExpectMatches(want, Run(graph, b, nullptr), dim, Compare::kValues, "scale_rows tokens " + std::to_string(n));
  }
}

TEST_P(BackendConformance, MatMulAndGatedFfnEveryWeightType) {
  for (DType type : WeightTypes()) {
    const size_t n_in = 256, n_rows = 67;  // whole blocks of every format; rows past groups of 8
    Weight table = MakeWeight(DType::kF32, n_in, kVocab, gen_);
    Weight w = MakeWeight(type, n_in, n_rows, gen_);
    Weight up = MakeWeight(type, n_in, n_rows, gen_);
    Weight bias = MakeWeight(DType::kF32, n_rows, 1, gen_);
    Node probe{OpKind::kMatMul, 0};
    probe.weight = &w.view;
    if (!backend_->Supports(probe)) continue;
    for (size_t n : kTokenCounts) {
      BatchData b = SimpleBatch(n, kVocab);
      const Matrix x = Lookup(table, b);
      auto dot = [&](const Weight& m, size_t t, size_t r) {
        double sum = 0;
        for (size_t c = 0; c < n_in; ++c) sum += x[t * n_in + c] * m.f32[r * n_in + c];
        return sum;
      };
      const std::string where =
          std::string(" ") + DTypeName(type) + " tokens " + std::to_string(n);
      for (bool with_bias : {false, true}) {
        Graph graph;
        const ValueId in = Embed(&graph, table, n);
        Node node{OpKind::kMatMul, 0, {in}};
        node.weight = Placed(w);
        node.bias = with_bias ? Placed(bias) : nullptr;
        graph.logits = graph.Add(node, int64_t(n), int64_t(n_rows));
        Matrix want;
        for (size_t t = 0; t < n; ++t) {
          for (size_t r = 0; r < n_rows; ++r) want.push_back(dot(w, t, r) + (with_bias ? bias.f32[r] : 0.0));
        }
        ExpectMatches(want, Run(graph, b, nullptr), n_rows, CompareFor(type),
                      std::string("mat_mul") + (with_bias ? "+bias" : "") + where);
      }
      Graph graph;
      const ValueId in = Embed(&graph, table, n);
      Node node{OpKind::kGatedFfn, 0, {in}};
      node.weight = &w.view;
      node.weight_up = &up.view;
      if (!backend_->Supports(node)) continue;
      node.weight = Placed(w);
      node.weight_up = Placed(up);
      graph.logits = graph.Add(node, int64_t(n), int64_t(n_rows));
      Matrix want;
      for (size_t t = 0; t < n; ++t) {
        for (size_t r = 0; r < n_rows; ++r) {
          const double g = dot(w, t, r);
          want.push_back(g / (1.0 + std::exp(-g)) * dot(up, t, r));
        }
      }
      ExpectMatches(want, Run(graph, b, nullptr), n_rows, CompareFor(type), "gated_ffn" + where);
    }
  }
}

TEST_P(BackendConformance, RopeBothStyles) {
  const int32_t n_heads = 4, n_kv_heads = 2, head_dim = 32;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
    // YaRN's attention factor scales cos and sin, so the rotated dimensions only (rot_dims 16
    // leaves the rest of each head as it is); given with the half-split pairs, as gpt-oss has it.
    const float attn_factor = style == RopeStyle::kHalfSplit ? 1.35f : 1.0f;
    for (int32_t rot_dims : {head_dim, 16}) {
      std::vector<double> inv_freq(size_t(rot_dims / 2));
      for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = std::pow(10000.0, -2.0 * double(i) / rot_dims);
      Weight q_table = MakeWeight(DType::kF32, size_t(n_heads * head_dim), kVocab, gen_);
      Weight k_table = MakeWeight(DType::kF32, size_t(n_kv_heads * head_dim), kVocab, gen_);
      for (size_t n : kTokenCounts) {
        BatchData b = SimpleBatch(n, kVocab);
        for (size_t t = 0; t < n; ++t) b.positions[t] = int32_t(3 * t + 1000);  // large angles too
        Bind(b);
        for (bool check_k : {false, true}) {
          Graph graph;
          const ValueId q = Embed(&graph, q_table, n);
          const ValueId k = Embed(&graph, k_table, n);
          Node node{OpKind::kRope, 0, {q, k}};
          node.rope = RopeParams{n_heads, n_kv_heads, head_dim, rot_dims, style, inv_freq.data()};
          node.rope.attn_factor = attn_factor;
          if (!backend_->Supports(node)) {
            EXPECT_NE(attn_factor, 1.0f) << GetParam() << " must run plain RoPE";
            continue;
          }
          graph.nodes.push_back(node);
          graph.logits = check_k ? k : q;
          const Weight& table = check_k ? k_table : q_table;
          const int32_t heads = check_k ? n_kv_heads : n_heads;
          Matrix want = Lookup(table, b);
          for (size_t t = 0; t < n; ++t) {
            for (int32_t h = 0; h < heads; ++h) {
              double* x = want.data() + (t * size_t(heads) + size_t(h)) * size_t(head_dim);
              for (int32_t i = 0; i < rot_dims / 2; ++i) {
                const double angle = double(b.positions[t]) * inv_freq[size_t(i)];
                // The reference rounds cos/sin to float, as every backend's tables are f32.
                const double cos = float(std::cos(angle) * attn_factor);
                const double sin = float(std::sin(angle) * attn_factor);
                const size_t i0 = style == RopeStyle::kInterleaved ? size_t(2 * i) : size_t(i);
                const size_t i1 = style == RopeStyle::kInterleaved ? size_t(2 * i + 1)
                                                                   : size_t(i + rot_dims / 2);
                const double x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * cos - x1 * sin;
                x[i1] = x0 * sin + x1 * cos;
              }
            }
          }
          ExpectMatches(want, Run(graph, b, nullptr), size_t(head_dim), Compare::kValues,
                        std::string("rope ") + (check_k ? "k" : "q") + " rot_dims " +
                            std::to_string(rot_dims) + " tokens " + std::to_string(n));
        }
      }
    }
  }
}

// Attention over the paged KV cache for a batch of several sequences of different lengths:
// some new, some with history written by an earlier batch, prompt chunks and single tokens
// mixed, block sizes that split sequences across blocks.
TEST_P(BackendConformance, AttentionOverSeveralSequences) {
  const int32_t n_heads = 4, n_kv_heads = 2, head_dim = 32;
  const size_t q_dim = size_t(n_heads * head_dim), kv_dim = size_t(n_kv_heads * head_dim);
  const std::vector<std::vector<SeqPart>> batches = {
      {{0, 1}},                                      // one token alone
      {{0, 5}, {0, 23}, {0, 1}},                     // three prompts of different lengths
      {{17, 1}, {40, 1}, {3, 9}, {0, 2}, {31, 16}},  // decodes and chunks after history
      {{300, 1}, {120, 20}},                         // contexts of hundreds of positions
  };
  for (DType kv_type : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    if (!backend_->SupportsKv(kv_type)) continue;
    for (size_t b_index = 0; b_index < batches.size(); ++b_index) {
      const std::vector<SeqPart>& parts = batches[b_index];
      KvCacheOptions options;
      options.block_tokens = 16;
      options.context = 512;
      options.n_blocks = 64;
      options.dtype = kv_type;
      auto cache = KvCache::Create({backend_.get()}, kv_dim, options);
      ASSERT_TRUE(cache.ok()) << cache.status().message();
      KvCache& kv = **cache;
      // Each sequence: its K/V rows (as stored, so after rounding to the cache type) by position.
      struct SeqRows {
        SeqId id;
        Matrix k, v;
      };
      std::vector<SeqRows> seqs;
      std::normal_distribution<float> normal(0.0f, 1.0f);
      auto stored = [&](std::vector<float> row) {  // round-trip through the cache's element type
        std::vector<uint8_t> bytes(*RowBytes(kv_type, kv_dim));
        EXPECT_TRUE(QuantizeRow(kv_type, row.data(), bytes.data(), kv_dim));
        EXPECT_TRUE(DequantizeRow(kv_type, bytes.data(), row.data(), kv_dim));
        return row;
      };
      const size_t row_bytes = kv.row_bytes();
      for (const SeqPart& part : parts) {
        SeqRows s{kv.NewSequence(), {}, {}};
        if (part.n_history > 0) {  // history written through the cache's host copies
          ASSERT_TRUE(kv.Append(s.id, part.n_history).ok());
          std::vector<uint8_t> k_bytes(part.n_history * row_bytes), v_bytes(k_bytes.size());
          for (size_t p = 0; p < part.n_history; ++p) {
            for (auto [rows, bytes] : {std::pair{&s.k, &k_bytes}, std::pair{&s.v, &v_bytes}}) {
              std::vector<float> row(kv_dim);
              for (float& x : row) x = normal(gen_);
              ASSERT_TRUE(QuantizeRow(kv_type, row.data(), bytes->data() + p * row_bytes, kv_dim));
              row = stored(row);
              rows->insert(rows->end(), row.begin(), row.end());
            }
          }
          ASSERT_TRUE(kv.WriteRows(s.id, 0, k_bytes.data(), v_bytes.data()).ok());
        }
        seqs.push_back(std::move(s));
      }
      // The batch.
      BatchData b;
      size_t n = 0;
      for (size_t s = 0; s < parts.size(); ++s) {
        auto slots = kv.Append(seqs[s].id, parts[s].n_new);
        ASSERT_TRUE(slots.ok());
        for (size_t i = 0; i < parts[s].n_new; ++i, ++n) {
          b.tokens.push_back(int32_t(n % kVocab));
          b.positions.push_back(int32_t(parts[s].n_history + i));
          b.token_seq.push_back(int32_t(s));
          b.n_ctx.push_back(int32_t(parts[s].n_history + i + 1));
          b.n_ctx_all.push_back(int32_t(parts[s].n_history + parts[s].n_new));
          b.kv_slot.push_back((*slots)[i]);
          b.selected.push_back(int32_t(n));
        }
      }
      for (size_t s = 0; s < parts.size(); ++s) {
        b.block_table_begin.push_back(int32_t(b.block_tables.size()));
        const std::vector<int32_t>& table = kv.BlockTable(seqs[s].id);
        b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
      }
      b.block_table_begin.push_back(int32_t(b.block_tables.size()));
      Bind(b);
      // q, k and v are looked up in random tables (token t's id is t mod kVocab, so each row of
      // the batch reads its own row of tables of n rows).
      Weight q_table = MakeWeight(DType::kF32, q_dim, n, gen_);
      Weight k_table = MakeWeight(DType::kF32, kv_dim, n, gen_);
      Weight v_table = MakeWeight(DType::kF32, kv_dim, n, gen_);
      for (size_t t = 0; t < n; ++t) b.tokens[t] = int32_t(t);
      // The batch's rows as the cache will store them, after each sequence's history.
      for (size_t s = 0, t = 0; s < parts.size(); ++s) {
        for (size_t i = 0; i < parts[s].n_new; ++i, ++t) {
          for (auto [rows, table] : {std::pair{&seqs[s].k, &k_table}, std::pair{&seqs[s].v, &v_table}}) {
            const std::vector<float> row = stored(std::vector<float>(
                table->f32.begin() + t * kv_dim, table->f32.begin() + (t + 1) * kv_dim));
            rows->insert(rows->end(), row.begin(), row.end());
          }
        }
      }
      // Plain causal attention, then with a soft-cap on the scores, a sliding window shorter
      // than several of the sequences, and both, each where the backend runs it. Running the
      // batch again writes the same rows into the same slots.
      // Bidirectional (encoder) attention: every token sees its sequence's every row.
      struct Variant {
        float softcap;
        int32_t window;
        bool causal = true;
      };
      for (const Variant variant : {Variant{0.0f, 0}, Variant{1.5f, 0}, Variant{0.0f, 7},
                                    Variant{1.5f, 7}, Variant{0.0f, 0, false},
                                    Variant{1.5f, 0, false}}) {
        Graph graph;
        const ValueId q = Embed(&graph, q_table, n);
        const ValueId k = Embed(&graph, k_table, n);
        const ValueId v = Embed(&graph, v_table, n);
        Node node{OpKind::kAttention, 0, {q, k, v}};
        node.attention.n_heads = n_heads;
        node.attention.n_kv_heads = n_kv_heads;
        node.attention.head_dim = head_dim;
        node.attention.scale = 1.0f / std::sqrt(float(head_dim));
        node.attention.logit_softcap = variant.softcap;
        node.attention.window = variant.window;
        node.attention.causal = variant.causal;
        if (!backend_->Supports(node)) continue;
        graph.logits = graph.Add(node, int64_t(n), int64_t(q_dim));
        const std::vector<float> got = Run(graph, b, &kv);
        // Reference: each token attends its sequence's rows up to its own position (the last
        // `window` of them when there is a window).
        Matrix want;
        size_t t = 0;
        for (size_t s = 0; s < parts.size(); ++s) {
          for (size_t i = 0; i < parts[s].n_new; ++i, ++t) {
            const size_t n_ctx =
                variant.causal ? parts[s].n_history + i + 1 : parts[s].n_history + parts[s].n_new;
            const size_t window = size_t(variant.window);
            const size_t first = window > 0 && n_ctx > window ? n_ctx - window : 0;
            for (int32_t h = 0; h < n_heads; ++h) {
              const size_t kv_head = size_t(h / (n_heads / n_kv_heads));
              const float* qh = q_table.f32.data() + t * q_dim + size_t(h * head_dim);
              std::vector<double> scores(n_ctx - first);
              double max_score = -INFINITY;
              for (size_t p = first; p < n_ctx; ++p) {
                double dot = 0;
                for (int32_t d = 0; d < head_dim; ++d)
                  dot += double(qh[d]) * seqs[s].k[p * kv_dim + kv_head * size_t(head_dim) + size_t(d)];
                double score = dot / std::sqrt(double(head_dim));
                if (variant.softcap > 0) score = variant.softcap * std::tanh(score / variant.softcap);
                scores[p - first] = score;
                max_score = std::max(max_score, score);
              }
              double total = 0;
              for (double& score : scores) total += (score = std::exp(score - max_score));
              for (int32_t d = 0; d < head_dim; ++d) {
                double sum = 0;
                for (size_t p = first; p < n_ctx; ++p)
                  sum += scores[p - first] / total *
                         seqs[s].v[p * kv_dim + kv_head * size_t(head_dim) + size_t(d)];
                want.push_back(sum);
              }
            }
          }
        }
        ExpectMatches(want, got, size_t(head_dim), Compare::kValues,
                      std::string("attention, KV ") + DTypeName(kv_type) + ", batch " +
                          std::to_string(b_index) + ", softcap " +
                          std::to_string(variant.softcap) + ", window " +
                          std::to_string(variant.window) +
                          (variant.causal ? "" : ", bidirectional"));
      }
    }
  }
}

// Multi-head latent attention over a latent-only cache (one row of kv_lora + rope per position,
// no V rows): a prompt chunk and single tokens of two sequences, against the expanded form in
// double (each head's keys [W_UK c | RoPE(k_rope)] and values W_UV c materialised). A backend
// that does not claim the op (the GPU ones) is skipped: its layer runs on the CPU.
TEST_P(BackendConformance, MlaAttentionMatchesTheExpandedForm) {
  const size_t n_heads = 3, kv_lora = 32, nope = 8, rope = 8, v_dim = 12;
  const size_t q_head = nope + rope, row = kv_lora + rope;
  std::vector<double> inv_freq(rope / 2);
  for (size_t i = 0; i < rope / 2; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * double(i) / double(rope));
  Weight k_b = MakeWeight(DType::kF32, nope, kv_lora * n_heads, gen_);
  k_b.view.desc = TensorDesc::Make(DType::kF32, {int64_t(nope), int64_t(kv_lora), int64_t(n_heads)});
  Weight v_b = MakeWeight(DType::kF32, kv_lora, v_dim * n_heads, gen_);
  v_b.view.desc = TensorDesc::Make(DType::kF32, {int64_t(kv_lora), int64_t(v_dim), int64_t(n_heads)});
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
    for (DType kv_type : {DType::kF32, DType::kF16}) {
      if (!backend_->SupportsKv(kv_type)) continue;
      KvCacheOptions options;
      options.block_tokens = 4;
      options.context = 64;
      options.n_blocks = 32;
      options.dtype = kv_type;
      options.values = false;
      auto cache = KvCache::Create({backend_.get()}, row, options);
      ASSERT_TRUE(cache.ok()) << cache.status().message();
      KvCache& kv = **cache;
      const SeqId seqs[2] = {kv.NewSequence(), kv.NewSequence()};
      // Per sequence: the rows it holds (latent c and roped key, as the cache stores them).
      std::vector<std::vector<double>> held(2);
      auto rotate = [&](double* x, size_t pos) {  // one rope part of `rope` dims
        for (size_t i = 0; i < rope / 2; ++i) {
          const double angle = double(pos) * inv_freq[i];
          const size_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
          const size_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + rope / 2;
          const double x0 = x[a], x1 = x[b];
          x[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
          x[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
      };
      // Three batches: a 9-token prompt and a 3-token one, then one token of each, then one.
      const std::vector<std::vector<SeqPart>> batches = {{{0, 9}, {0, 3}}, {{9, 1}, {3, 1}}, {{10, 1}}};
      for (size_t b_index = 0; b_index < batches.size(); ++b_index) {
        const std::vector<SeqPart>& parts = batches[b_index];
        BatchData b;
        size_t n = 0;
        for (size_t s = 0; s < parts.size(); ++s) {
          auto slots = kv.Append(seqs[s], parts[s].n_new);
          ASSERT_TRUE(slots.ok());
          for (size_t i = 0; i < parts[s].n_new; ++i, ++n) {
            b.tokens.push_back(int32_t(n));
            b.positions.push_back(int32_t(parts[s].n_history + i));
            b.token_seq.push_back(int32_t(s));
            b.n_ctx.push_back(int32_t(parts[s].n_history + i + 1));
            b.kv_slot.push_back((*slots)[i]);
            b.selected.push_back(int32_t(n));
          }
        }
        for (size_t s = 0; s < parts.size(); ++s) {
          b.block_table_begin.push_back(int32_t(b.block_tables.size()));
          const std::vector<int32_t>& table = kv.BlockTable(seqs[s]);
          b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
        }
        b.block_table_begin.push_back(int32_t(b.block_tables.size()));
        Bind(b);
        Weight q_table = MakeWeight(DType::kF32, n_heads * q_head, n, gen_);
        Weight c_table = MakeWeight(DType::kF32, kv_lora, n, gen_);
        Weight r_table = MakeWeight(DType::kF32, rope, n, gen_);
        Graph graph;
        const ValueId q = Embed(&graph, q_table, n);
        const ValueId c = Embed(&graph, c_table, n);
        const ValueId r = Embed(&graph, r_table, n);
        Node node{OpKind::kMlaAttention, 0, {q, c, r}};
        node.weight = Placed(k_b);
        node.weight_down = Placed(v_b);
        node.mla = MlaParams{int32_t(n_heads), int32_t(kv_lora), int32_t(nope), int32_t(rope),
                             int32_t(v_dim), 1.0f / std::sqrt(float(q_head))};
        node.rope.n_heads = int32_t(n_heads);
        node.rope.n_kv_heads = 1;
        node.rope.head_dim = int32_t(q_head);
        node.rope.rot_dims = int32_t(rope);
        node.rope.style = style;
        node.rope.inv_freq = inv_freq.data();
        if (!backend_->Supports(node)) GTEST_SKIP() << GetParam() << " does not run mla_attention";
        graph.logits = graph.Add(node, int64_t(n), int64_t(n_heads * v_dim));
        const std::vector<float> got = Run(graph, b, &kv);
        // The rows the cache now holds, rounded to its type.
        for (size_t t = 0; t < n; ++t) {
          std::vector<float> latent(row);
          std::copy_n(c_table.f32.data() + t * kv_lora, kv_lora, latent.data());
          std::vector<double> key(r_table.f32.begin() + t * rope, r_table.f32.begin() + (t + 1) * rope);
          rotate(key.data(), size_t(b.positions[t]));
          for (size_t i = 0; i < rope; ++i) latent[kv_lora + i] = float(key[i]);
          std::vector<uint8_t> bytes(*RowBytes(kv_type, row));
          ASSERT_TRUE(QuantizeRow(kv_type, latent.data(), bytes.data(), row));
          ASSERT_TRUE(DequantizeRow(kv_type, bytes.data(), latent.data(), row));
          held[size_t(b.token_seq[t])].insert(held[size_t(b.token_seq[t])].end(), latent.begin(), latent.end());
        }
        Matrix want;
        for (size_t t = 0; t < n; ++t) {
          const std::vector<double>& rows = held[size_t(b.token_seq[t])];
          const size_t n_ctx = size_t(b.n_ctx[t]);
          for (size_t h = 0; h < n_heads; ++h) {
            std::vector<double> qh(q_table.f32.begin() + t * n_heads * q_head + h * q_head,
                                   q_table.f32.begin() + t * n_heads * q_head + (h + 1) * q_head);
            rotate(qh.data() + nope, size_t(b.positions[t]));
            std::vector<double> scores(n_ctx);
            double max_score = -INFINITY;
            for (size_t p = 0; p < n_ctx; ++p) {
              const double* lat = rows.data() + p * row;
              double dot = 0;
              for (size_t i = 0; i < nope; ++i) {  // k_nope[i] = sum_j W_UK[h][i][j] c[j]
                double k = 0;
                for (size_t j = 0; j < kv_lora; ++j) k += k_b.f32[(h * kv_lora + j) * nope + i] * lat[j];
                dot += qh[i] * k;
              }
              for (size_t i = 0; i < rope; ++i) dot += qh[nope + i] * lat[kv_lora + i];
              scores[p] = dot / std::sqrt(double(q_head));
              max_score = std::max(max_score, scores[p]);
            }
            double total = 0;
            for (double& score : scores) total += (score = std::exp(score - max_score));
            for (size_t d = 0; d < v_dim; ++d) {
              double sum = 0;
              for (size_t p = 0; p < n_ctx; ++p) {
                double v = 0;
                for (size_t j = 0; j < kv_lora; ++j) v += v_b.f32[(h * v_dim + d) * kv_lora + j] * rows[p * row + j];
                sum += scores[p] / total * v;
              }
              want.push_back(sum);
            }
          }
        }
        ExpectMatches(want, got, v_dim, Compare::kValues,
                      std::string("mla_attention, KV ") + DTypeName(kv_type) + ", batch " +
                          std::to_string(b_index));
      }
    }
  }
}

// A 48-token prompt with a 16-token window: the first 16 rows are those of full attention (the
// window holds everything they see), the later ones differ, so the window is really applied.
TEST_P(BackendConformance, WindowedAttentionDiffersFromFull) {
  const int32_t n_heads = 4, n_kv_heads = 2, head_dim = 32, window = 16;
  const size_t n = 48, q_dim = size_t(n_heads * head_dim), kv_dim = size_t(n_kv_heads * head_dim);
  KvCacheOptions options;
  options.block_tokens = 16;
  options.context = 64;
  options.n_blocks = 4;
  auto cache = KvCache::Create({backend_.get()}, kv_dim, options);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  const SeqId seq = (*cache)->NewSequence();
  auto slots = (*cache)->Append(seq, n);
  ASSERT_TRUE(slots.ok());
  BatchData b;
  for (size_t t = 0; t < n; ++t) {
    b.tokens.push_back(int32_t(t));
    b.positions.push_back(int32_t(t));
    b.token_seq.push_back(0);
    b.n_ctx.push_back(int32_t(t + 1));
    b.kv_slot.push_back((*slots)[t]);
    b.selected.push_back(int32_t(t));
  }
  b.block_tables = (*cache)->BlockTable(seq);
  b.block_table_begin = {0, int32_t(b.block_tables.size())};
  Bind(b);
  Weight q_table = MakeWeight(DType::kF32, q_dim, n, gen_);
  Weight k_table = MakeWeight(DType::kF32, kv_dim, n, gen_);
  Weight v_table = MakeWeight(DType::kF32, kv_dim, n, gen_);
  auto attend = [&](int32_t attention_window) {
    Graph graph;
    const ValueId q = Embed(&graph, q_table, n);
    const ValueId k = Embed(&graph, k_table, n);
    const ValueId v = Embed(&graph, v_table, n);
    Node node{OpKind::kAttention, 0, {q, k, v}};
    node.attention = AttentionParams{n_heads, n_kv_heads, head_dim, 0.2f, 0.0f, attention_window};
    graph.logits = graph.Add(node, int64_t(n), int64_t(q_dim));
    return backend_->Supports(node) ? Run(graph, b, cache->get()) : std::vector<float>();
  };
  const std::vector<float> full = attend(0), windowed = attend(window);
  if (full.empty() || windowed.empty()) GTEST_SKIP() << GetParam() << " has no windowed attention";
  for (size_t t = 0; t < n; ++t) {
    double max_diff = 0;
    for (size_t i = t * q_dim; i < (t + 1) * q_dim; ++i) {
      max_diff = std::max(max_diff, double(std::fabs(full[i] - windowed[i])));
    }
    if (t < size_t(window)) {
      EXPECT_LE(max_diff, 1e-6) << "row " << t << " sees its whole context through the window";
    } else {
      EXPECT_GT(max_diff, 1e-3) << "row " << t << " must not see keys before its window";
    }
  }
}

// Attention sinks (gpt-oss): one logit per query head joins each row's softmax denominator,
// with and without a window, against a double reference. Head 3's sink is far above every
// score (its rows are scaled down to almost nothing, which must not overflow); head 0's far
// below (no effect). A backend without sinks must refuse the node (placement then keeps the
// layer on the CPU).
TEST_P(BackendConformance, AttentionWithSinks) {
  const int32_t n_heads = 4, n_kv_heads = 2, head_dim = 32;
  const size_t n = 40, q_dim = size_t(n_heads * head_dim), kv_dim = size_t(n_kv_heads * head_dim);
  const float scale = 0.2f;
  KvCacheOptions options;
  options.block_tokens = 16;
  options.context = 64;
  options.n_blocks = 4;
  auto cache = KvCache::Create({backend_.get()}, kv_dim, options);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  const SeqId seq = (*cache)->NewSequence();
  auto slots = (*cache)->Append(seq, n);
  ASSERT_TRUE(slots.ok());
  BatchData b;
  for (size_t t = 0; t < n; ++t) {
    b.tokens.push_back(int32_t(t));
    b.positions.push_back(int32_t(t));
    b.token_seq.push_back(0);
    b.n_ctx.push_back(int32_t(t + 1));
    b.kv_slot.push_back((*slots)[t]);
    b.selected.push_back(int32_t(t));
  }
  b.block_tables = (*cache)->BlockTable(seq);
  b.block_table_begin = {0, int32_t(b.block_tables.size())};
  Bind(b);
  Weight q_table = MakeWeight(DType::kF32, q_dim, n, gen_);
  Weight k_table = MakeWeight(DType::kF32, kv_dim, n, gen_);
  Weight v_table = MakeWeight(DType::kF32, kv_dim, n, gen_);
  Weight sinks = MakeWeight(DType::kF32, size_t(n_heads), 1, gen_);
  sinks.f32 = {-200.0f, 0.5f, 2.0f, 60.0f};
  std::memcpy(sinks.bytes.data(), sinks.f32.data(), sinks.bytes.size());
  for (int32_t window : {0, 16}) {
    Graph graph;
    const ValueId q = Embed(&graph, q_table, n);
    const ValueId k = Embed(&graph, k_table, n);
    const ValueId v = Embed(&graph, v_table, n);
    Node node{OpKind::kAttention, 0, {q, k, v}};
    node.attention = AttentionParams{n_heads, n_kv_heads, head_dim, scale, 0.0f, window};
    node.attention.sinks = Placed(sinks);
    if (!backend_->Supports(node)) GTEST_SKIP() << GetParam() << " has no attention sinks";
    graph.logits = graph.Add(node, int64_t(n), int64_t(q_dim));
    Matrix want(n * q_dim, 0.0);
    for (size_t t = 0; t < n; ++t) {
      const size_t first = window > 0 && t + 1 > size_t(window) ? t + 1 - size_t(window) : 0;
      for (int32_t h = 0; h < n_heads; ++h) {
        const size_t kv_head = size_t(h / (n_heads / n_kv_heads));
        const float* qr = q_table.f32.data() + t * q_dim + size_t(h) * head_dim;
        std::vector<double> score(t + 1);
        double max = sinks.f32[size_t(h)];
        for (size_t j = first; j <= t; ++j) {
          const float* kr = k_table.f32.data() + j * kv_dim + kv_head * head_dim;
          double dot = 0;
          for (int32_t d = 0; d < head_dim; ++d) dot += double(qr[d]) * kr[d];
          score[j] = scale * dot;
          max = std::max(max, score[j]);
        }
        double sum = std::exp(double(sinks.f32[size_t(h)]) - max);
        for (size_t j = first; j <= t; ++j) sum += score[j] = std::exp(score[j] - max);
        double* out = want.data() + t * q_dim + size_t(h) * head_dim;
        for (size_t j = first; j <= t; ++j) {
          const float* vr = v_table.f32.data() + j * kv_dim + kv_head * head_dim;
          for (int32_t d = 0; d < head_dim; ++d) out[d] += score[j] / sum * vr[d];
        }
      }
    }
    ExpectMatches(want, Run(graph, b, cache->get()), q_dim, Compare::kValues,
                  "attention with sinks, window " + std::to_string(window));
  }
}

// gpt-oss's experts: clamped SwiGLU (alpha 1.702, limit 7, up + 1) with gate, up and down
// biases, against a double reference. The pre-activations are ~N(0, 16²), so most of them are
// clamped.
// The seam itself: copies into, within and out of backend memory keep the bytes.
TEST_P(BackendConformance, CopiesKeepTheBytes) {
  auto buffer = backend_->Allocate(4096);
  ASSERT_TRUE(buffer.ok());
  std::vector<uint8_t> in(1000), out(1000);
  for (uint8_t& byte : in) byte = uint8_t(gen_());
  ASSERT_TRUE(backend_->CopyFromHost(in.data(), **buffer, 17, in.size()).ok());
  ASSERT_TRUE(backend_->CopyWithin(**buffer, 17, **buffer, 2048, in.size()).ok());
  ASSERT_TRUE(backend_->CopyToHost(**buffer, 2048, out.data(), out.size()).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(in, out);
  EXPECT_FALSE(backend_->CopyToHost(**buffer, 4000, out.data(), out.size()).ok());
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendConformance, ::testing::ValuesIn(AvailableBackends()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace petrel
