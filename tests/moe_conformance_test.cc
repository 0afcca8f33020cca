// moe_ffn through the backend seam on every registered backend (the fixture of
// tests/util/backend_conformance.h), against a double-precision reference written here:
// every weight type, top-k 1/2/4 renormalised or not over batches of several sequences,
// DeepSeek's grouped routing, and gpt-oss's clamped SwiGLU with expert biases. Inputs are fresh
// random values (seed printed on failure; PETREL_TEST_SEED=n reproduces a run).
#include <algorithm>

#include "util/backend_conformance.h"

namespace petrel {
namespace {

// Expert `e`'s SwiGLU output for one token `x` (n_in values), in double: the reference both
// routing tests sum. Weights are stacked per expert, row-major [expert][row][column].
std::vector<double> ExpertOutput(const double* x, const auto& gate, const auto& up,
                                 const auto& down, size_t e, size_t n_in, size_t n_ff,
                                 size_t n_out) {
  std::vector<double> act(n_ff), y(n_out);
  for (size_t f = 0; f < n_ff; ++f) {
    double g = 0, u = 0;
    for (size_t c = 0; c < n_in; ++c) {
      g += x[c] * gate[(e * n_ff + f) * n_in + c];
      u += x[c] * up[(e * n_ff + f) * n_in + c];
    }
    act[f] = g / (1.0 + std::exp(-g)) * u;
  }
  for (size_t o = 0; o < n_out; ++o) {
    for (size_t f = 0; f < n_ff; ++f) y[o] += act[f] * down[(e * n_out + o) * n_ff + f];
  }
  return y;
}

// A mixture of experts over every weight type: the router logits come from their own embedding
// table, so the test picks them: random for most tokens, with exact ties between two experts or
// among all of them for others (the lower expert index must win, on every backend). Top-k of
// 1, 2 and 4 of 5 experts, renormalised or not, over batches of 1, 7 and 70 tokens in several
// sequences; with 70 tokens every expert gets some.
TEST_P(BackendConformance, MoeFfnEveryWeightType) {
  const size_t n_in = 256, n_ff = 256, n_out = 67, n_experts = 5;
  Weight table = MakeWeight(DType::kF32, n_in, kVocab, gen_);
  Weight router = MakeWeight(DType::kF32, n_experts, kVocab, gen_);
  for (size_t v = 0; v < kVocab; ++v) {
    float* logits = router.f32.data() + v * n_experts;
    for (size_t e = 0; e < n_experts; ++e) logits[e] *= 2.0f;
    if (v % 3 == 1) logits[3] = logits[1];                        // a tie between two experts
    if (v % 5 == 2) std::fill(logits, logits + n_experts, 0.5f);  // every expert ties
    std::memcpy(router.bytes.data() + v * n_experts * sizeof(float), logits,
                n_experts * sizeof(float));
  }
  auto experts = [&](DType type, size_t in, size_t rows) {
    Weight w = MakeWeight(type, in, rows * n_experts, gen_);
    w.view.desc = TensorDesc::Make(type, {int64_t(in), int64_t(rows), int64_t(n_experts)});
    return w;
  };
  // A node every backend must refuse: more experts per token than there are, or none.
  {
    Weight gate = experts(DType::kF32, n_in, n_ff), down = experts(DType::kF32, n_ff, n_out);
    Node bad{OpKind::kMoeFfn, 0, {0, 1}};
    bad.weight = &gate.view;
    bad.weight_up = &gate.view;
    bad.weight_down = &down.view;
    bad.moe = MoeParams{int32_t(n_experts), int32_t(n_experts) + 1, true};
    EXPECT_FALSE(backend_->Supports(bad));
    bad.moe = MoeParams{0, 0, true};
    EXPECT_FALSE(backend_->Supports(bad));
  }
  for (DType type : WeightTypes()) {
    Weight gate = experts(type, n_in, n_ff), up = experts(type, n_in, n_ff);
    Weight down = experts(type, n_ff, n_out);
    Node probe{OpKind::kMoeFfn, 0, {0, 1}};
    probe.weight = &gate.view;
    probe.weight_up = &up.view;
    probe.weight_down = &down.view;
    probe.moe = MoeParams{int32_t(n_experts), 1, true};
    if (!backend_->Supports(probe)) continue;
    const TensorView* placed_gate = Placed(gate);
    const TensorView* placed_up = Placed(up);
    const TensorView* placed_down = Placed(down);
    for (size_t n : kTokenCounts) {
      BatchData b = SeveralSequences(n, kVocab);
      const Matrix x = Lookup(table, b);
      // Every expert's output for every token, in double (the routing picks among them).
      std::vector<Matrix> expert_out(n, Matrix(n_experts * n_out));
      for (size_t t = 0; t < n; ++t) {
        for (size_t e = 0; e < n_experts; ++e) {
          const std::vector<double> y = ExpertOutput(&x[t * n_in], gate.f32, up.f32, down.f32, e,
                                                     n_in, n_ff, n_out);
          std::copy(y.begin(), y.end(), expert_out[t].begin() + e * n_out);
        }
      }
      for (int top_k : {1, 2, 4}) {
        for (bool norm : {true, false}) {
          Matrix want(n * n_out, 0.0);
          for (size_t t = 0; t < n; ++t) {
            // Routing in double: softmax, top-k by strictly greater (ties: lower index first).
            const float* l = router.f32.data() + size_t(b.tokens[t]) * n_experts;
            std::vector<double> p(n_experts);
            double max = l[0], sum = 0;
            for (size_t e = 0; e < n_experts; ++e) max = std::max(max, double(l[e]));
            for (size_t e = 0; e < n_experts; ++e) sum += p[e] = std::exp(l[e] - max);
            for (double& v : p) v /= sum;
            std::vector<size_t> chosen;
            std::vector<double> weight;
            for (int r = 0; r < top_k; ++r) {
              size_t best = n_experts;
              for (size_t e = 0; e < n_experts; ++e) {
                if (p[e] >= 0 && (best == n_experts || p[e] > p[best])) best = e;
              }
              chosen.push_back(best);
              weight.push_back(p[best]);
              p[best] = -1;
            }
            double chosen_sum = 0;
            for (double w : weight) chosen_sum += w;
            for (size_t r = 0; r < chosen.size(); ++r) {
              const double w = norm ? weight[r] / chosen_sum : weight[r];
              for (size_t o = 0; o < n_out; ++o) {
                want[t * n_out + o] += w * expert_out[t][chosen[r] * n_out + o];
              }
            }
          }
          Graph graph;
          Node run = probe;
          run.moe = MoeParams{int32_t(n_experts), top_k, norm};
          run.inputs[0] = Embed(&graph, table, n);
          run.inputs[1] = Embed(&graph, router, n);
          run.weight = placed_gate;
          run.weight_up = placed_up;
          run.weight_down = placed_down;
          graph.logits = graph.Add(run, int64_t(n), int64_t(n_out));
          ExpectMatches(want, Run(graph, b, nullptr), n_out, CompareFor(type),
                        std::string("moe_ffn ") + DTypeName(type) + " top " +
                            std::to_string(top_k) + (norm ? " renormalised" : "") + " tokens " +
                            std::to_string(n));
        }
      }
    }
  }
}

// DeepSeek's routing on moe_ffn: sigmoid or softmax scores, a selection bias that only chooses,
// groups scored by their best or two best of which some stay eligible, renormalisation and a
// scale on the weights, against a double reference (F32 experts).
TEST_P(BackendConformance, MoeFfnGroupedRouting) {
  const size_t n_in = 64, n_ff = 32, n_out = 24, n_experts = 8;
  Weight table = MakeWeight(DType::kF32, n_in, kVocab, gen_);
  Weight router = MakeWeight(DType::kF32, n_experts, kVocab, gen_);
  std::vector<float> bias_values(n_experts);
  std::uniform_real_distribution<float> uniform(0.0f, 0.4f);
  for (float& b : bias_values) b = uniform(gen_);
  Weight bias;  // the view is all Placed() reads
  bias.view =
      TensorView{TensorDesc::Make(DType::kF32, {int64_t(n_experts)}), bias_values.data(), 0};
  auto experts = [&](size_t in, size_t rows) {
    Weight w = MakeWeight(DType::kF32, in, rows * n_experts, gen_);
    w.view.desc = TensorDesc::Make(DType::kF32, {int64_t(in), int64_t(rows), int64_t(n_experts)});
    return w;
  };
  Weight gate = experts(n_in, n_ff), up = experts(n_in, n_ff), down = experts(n_ff, n_out);
  struct Routing {
    MoeGating gating;
    int32_t groups, used;
    MoeGroupScore score;
    bool norm, with_bias;
    float scale;
  };
  for (const Routing r :
       {Routing{MoeGating::kSigmoid, 2, 1, MoeGroupScore::kTopTwoSum, true, true, 2.5f},
        Routing{MoeGating::kSigmoid, 4, 2, MoeGroupScore::kTopTwoSum, false, true, 1.0f},
        Routing{MoeGating::kSoftmax, 4, 3, MoeGroupScore::kMax, false, false, 16.0f},
        Routing{MoeGating::kSoftmax, 1, 1, MoeGroupScore::kMax, true, false, 1.0f}}) {
    const int top_k = 2;
    Node node{OpKind::kMoeFfn, 0, {0, 1}};
    node.weight = Placed(gate);
    node.weight_up = Placed(up);
    node.weight_down = Placed(down);
    node.select_bias = r.with_bias ? Placed(bias) : nullptr;
    node.moe = MoeParams{.n_experts = int32_t(n_experts),
                         .top_k = top_k,
                         .norm_top_k = r.norm,
                         .gating = r.gating,
                         .n_groups = r.groups,
                         .groups_used = r.used,
                         .group_score = r.score,
                         .scale = r.scale};
    if (!backend_->Supports(node)) continue;
    const size_t n = 21;
    BatchData b = SimpleBatch(n, kVocab);
    const Matrix x = Lookup(table, b);
    Matrix want(n * n_out, 0.0);
    for (size_t t = 0; t < n; ++t) {
      const float* l = router.f32.data() + size_t(b.tokens[t]) * n_experts;
      std::vector<double> p(n_experts), sel(n_experts);
      double max = l[0], sum = 0;
      for (size_t e = 0; e < n_experts; ++e) max = std::max(max, double(l[e]));
      for (size_t e = 0; e < n_experts; ++e) {
        p[e] = r.gating == MoeGating::kSigmoid ? 1.0 / (1.0 + std::exp(-double(l[e])))
                                               : std::exp(l[e] - max);
        sum += p[e];
      }
      if (r.gating == MoeGating::kSoftmax)
        for (double& v : p) v /= sum;
      for (size_t e = 0; e < n_experts; ++e) sel[e] = p[e] + (r.with_bias ? bias_values[e] : 0.0);
      const size_t group_size = n_experts / size_t(r.groups);
      std::vector<std::pair<double, size_t>> groups;
      for (size_t g = 0; g < size_t(r.groups); ++g) {
        std::vector<double> s(sel.begin() + g * group_size, sel.begin() + (g + 1) * group_size);
        std::sort(s.rbegin(), s.rend());
        groups.push_back({r.score == MoeGroupScore::kMax || s.size() < 2 ? s[0] : s[0] + s[1], g});
      }
      std::stable_sort(groups.begin(), groups.end(),
                       [](auto a, auto b) { return a.first > b.first; });
      for (size_t i = size_t(r.used); i < groups.size(); ++i) {
        for (size_t e = 0; e < group_size; ++e) sel[groups[i].second * group_size + e] = -INFINITY;
      }
      std::vector<size_t> chosen;
      double chosen_sum = 0;
      for (int k = 0; k < top_k; ++k) {
        size_t best = n_experts;
        for (size_t e = 0; e < n_experts; ++e) {
          if (sel[e] != -INFINITY && (best == n_experts || sel[e] > sel[best])) best = e;
        }
        chosen.push_back(best);
        chosen_sum += p[best];
        sel[best] = -INFINITY;
      }
      for (size_t e : chosen) {
        const double w = (r.norm ? p[e] / chosen_sum : p[e]) * r.scale;
        const std::vector<double> y = ExpertOutput(&x[t * n_in], gate.f32, up.f32, down.f32, e,
                                                   n_in, n_ff, n_out);
        for (size_t o = 0; o < n_out; ++o) want[t * n_out + o] += w * y[o];
      }
    }
    Graph graph;
    Node run = node;
    run.inputs[0] = Embed(&graph, table, n);
    run.inputs[1] = Embed(&graph, router, n);
    graph.logits = graph.Add(run, int64_t(n), int64_t(n_out));
    ExpectMatches(want, Run(graph, b, nullptr), n_out, Compare::kValues,
                  std::string("moe_ffn grouped routing, groups ") + std::to_string(r.groups));
  }
  // Refused: groups that do not divide the experts, more groups used than there are, more
  // experts per token than the groups used hold.
  Node bad{OpKind::kMoeFfn, 0, {0, 1}};
  bad.weight = &gate.view;
  bad.weight_up = &up.view;
  bad.weight_down = &down.view;
  bad.moe = MoeParams{.n_experts = int32_t(n_experts),
                      .top_k = 2,
                      .gating = MoeGating::kSigmoid,
                      .n_groups = 3,
                      .groups_used = 1};
  EXPECT_FALSE(backend_->Supports(bad));
  bad.moe = MoeParams{.n_experts = int32_t(n_experts),
                      .top_k = 2,
                      .gating = MoeGating::kSigmoid,
                      .n_groups = 2,
                      .groups_used = 3};
  EXPECT_FALSE(backend_->Supports(bad));
  bad.moe = MoeParams{.n_experts = int32_t(n_experts),
                      .top_k = 5,
                      .gating = MoeGating::kSigmoid,
                      .n_groups = 2,
                      .groups_used = 1};
  EXPECT_FALSE(backend_->Supports(bad));
}

TEST_P(BackendConformance, MoeFfnClampedSwigluWithBiases) {
  const size_t n_in = 256, n_ff = 64, n_out = 67, n_experts = 4;
  const int top_k = 2;
  Weight table = MakeWeight(DType::kF32, n_in, kVocab, gen_);
  Weight router = MakeWeight(DType::kF32, n_experts, kVocab, gen_);
  auto experts = [&](DType type, size_t in, size_t rows) {
    Weight w = MakeWeight(type, in, rows * n_experts, gen_);
    w.view.desc = TensorDesc::Make(type, {int64_t(in), int64_t(rows), int64_t(n_experts)});
    return w;
  };
  Weight gate_bias = MakeWeight(DType::kF32, n_ff, n_experts, gen_);
  Weight up_bias = MakeWeight(DType::kF32, n_ff, n_experts, gen_);
  Weight down_bias = MakeWeight(DType::kF32, n_out, n_experts, gen_);
  const float alpha = 1.702f, limit = 7.0f;
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    Weight gate = experts(type, n_in, n_ff), up = experts(type, n_in, n_ff);
    Weight down = experts(type, n_ff, n_out);
    Node node{OpKind::kMoeFfn, 0, {0, 1}};
    node.weight = &gate.view;
    node.weight_up = &up.view;
    node.weight_down = &down.view;
    node.bias = &gate_bias.view;
    node.bias_up = &up_bias.view;
    node.bias_down = &down_bias.view;
    node.moe = MoeParams{int32_t(n_experts), top_k, true, alpha, limit, 1.0f};
    if (!backend_->Supports(node)) continue;
    {
      Node bad = node;
      bad.bias_down = &gate_bias.view;  // a row per expert of the wrong width
      EXPECT_FALSE(backend_->Supports(bad));
    }
    for (size_t n : kTokenCounts) {
      BatchData b = SimpleBatch(n, kVocab);
      const Matrix x = Lookup(table, b);
      Matrix want(n * n_out, 0.0);
      for (size_t t = 0; t < n; ++t) {
        // Top-k of the logits, softmax over those k.
        const float* l = router.f32.data() + size_t(b.tokens[t]) * n_experts;
        std::vector<size_t> order(n_experts);
        for (size_t e = 0; e < n_experts; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t c) { return l[a] > l[c]; });
        double sum = 0;
        for (int r = 0; r < top_k; ++r) sum += std::exp(double(l[order[r]]) - l[order[0]]);
        for (int r = 0; r < top_k; ++r) {
          const size_t e = order[size_t(r)];
          const double w = std::exp(double(l[e]) - l[order[0]]) / sum;
          std::vector<double> act(n_ff);
          for (size_t f = 0; f < n_ff; ++f) {
            double g = gate_bias.f32[e * n_ff + f], u = up_bias.f32[e * n_ff + f];
            for (size_t c = 0; c < n_in; ++c) {
              g += x[t * n_in + c] * gate.f32[(e * n_ff + f) * n_in + c];
              u += x[t * n_in + c] * up.f32[(e * n_ff + f) * n_in + c];
            }
            g = std::min(g, double(limit));
            u = std::clamp(u, -double(limit), double(limit));
            act[f] = g / (1.0 + std::exp(-double(alpha) * g)) * (u + 1.0);
          }
          for (size_t o = 0; o < n_out; ++o) {
            double y = down_bias.f32[e * n_out + o];
            for (size_t f = 0; f < n_ff; ++f) y += act[f] * down.f32[(e * n_out + o) * n_ff + f];
            want[t * n_out + o] += w * y;
          }
        }
      }
      Graph graph;
      const ValueId in = Embed(&graph, table, n);
      const ValueId logits = Embed(&graph, router, n);
      Node run = node;
      run.inputs[0] = in;
      run.inputs[1] = logits;
      run.weight = Placed(gate);
      run.weight_up = Placed(up);
      run.weight_down = Placed(down);
      run.bias = Placed(gate_bias);
      run.bias_up = Placed(up_bias);
      run.bias_down = Placed(down_bias);
      graph.logits = graph.Add(run, int64_t(n), int64_t(n_out));
      ExpectMatches(want, Run(graph, b, nullptr), n_out, CompareFor(type),
                    std::string("moe_ffn clamped swiglu ") + DTypeName(type) + " tokens " +
                        std::to_string(n));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendConformance, ::testing::ValuesIn(AvailableBackends()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace petrel
