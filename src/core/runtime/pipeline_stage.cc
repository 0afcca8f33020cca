// Cutting a stage's nodes out of the whole graph (pipeline_stage.h).
#include "core/runtime/pipeline_stage.h"

#include <iterator>  // std::size

namespace petrel {
namespace {

// Inputs each op reads (Node::inputs[0..n)). A node built as `Node{op, layer, {x}}` has its
// unused slots value-initialised to 0, not kNoValue, so the cut must know which are real.
constexpr int kOpInputs[] = {
    0,  // kEmbed: token ids come from the batch
    1,  // kRmsNorm
    1,  // kMatMul
    2,  // kRope: q, k (in place)
    3,  // kAttention: q, k, v
    2,  // kSiluMul
    1,  // kGatedFfn
    2,  // kAdd
    1,  // kGetRows
    1,  // kHeadRmsNorm
    2,  // kGeluMul
    1,  // kScale
    1,  // kSoftcap
    2,  // kMoeFfn: x, router logits
    1,  // kLayerNorm
    1,  // kGelu
    1,  // kAddRows
    3,  // kMlaAttention: q, latent, rope key
    1,  // kScaleRows
};
static_assert(std::size(kOpInputs) == size_t(OpKind::kCount));

}  // namespace

Status CutStage(const Graph& whole, LayerRange range, int n_layers, Graph* stage, ValueId* input,
                std::vector<ValueId>* value_map) {
  const bool first = range.begin == 0;
  const bool last = range.end == n_layers;
  auto kept = [&](const Node& node) {
    if (node.layer < 0) return first;
    if (node.layer >= n_layers) return last;
    return range.Holds(node.layer);
  };
  // Which values the stage's nodes produce, and which later nodes outside it read.
  std::vector<uint8_t> produced(whole.values.size(), 0);
  for (const Node& node : whole.nodes) {
    if (kept(node) && node.output != kNoValue) produced[size_t(node.output)] = 1;
  }
  stage->Clear();
  stage->hidden_output = whole.hidden_output;
  std::vector<ValueId>& map = *value_map;
  map.assign(whole.values.size(), kNoValue);
  auto mapped = [&](ValueId v) {
    if (map[size_t(v)] == kNoValue) {
      map[size_t(v)] = stage->AddValue(whole.values[size_t(v)].rows, whole.values[size_t(v)].cols);
    }
    return map[size_t(v)];
  };
  *input = kNoValue;
  ValueId leaving = kNoValue;
  for (const Node& node : whole.nodes) {
    if (!kept(node)) {
      // A node after the stage that reads what the stage made: the hidden rows to pass on.
      for (int i = 0; i < kOpInputs[size_t(node.op)]; ++i) {
        const ValueId v = node.inputs[i];
        if (v == kNoValue || !produced[size_t(v)]) continue;
        if (node.layer < range.end) continue;  // a node before the stage cannot read its values
        if (leaving != kNoValue && leaving != v) {
          return Error(
              "the graph cannot be cut after block %d: more than one value crosses it (%s of "
              "layer %d reads values %d and %d)",
              range.end - 1, OpName(node.op), node.layer, int(leaving), int(v));
        }
        leaving = v;
      }
      continue;
    }
    Node copy = node;
    for (int i = 0; i < 3; ++i) {
      ValueId& v = copy.inputs[i];
      if (i >= kOpInputs[size_t(node.op)]) v = kNoValue;
      if (v == kNoValue) continue;
      if (!produced[size_t(v)]) {
        if (*input != kNoValue && *input != mapped(v)) {
          return Error("the graph cannot be cut before block %d: more than one value crosses it",
                       range.begin);
        }
        *input = mapped(v);
      }
      v = mapped(v);
    }
    if (node.output != kNoValue) copy.output = mapped(node.output);
    stage->nodes.push_back(copy);
  }
  if (first && *input != kNoValue) {
    return Error("the first stage reads a value no node makes");
  }
  if (!first && *input == kNoValue) {
    return Error("the graph cannot be cut before block %d: nothing crosses it", range.begin);
  }
  if (last) {
    if (whole.logits == kNoValue || map[size_t(whole.logits)] == kNoValue) {
      return Error("the last stage does not make the graph's output");
    }
    stage->logits = map[size_t(whole.logits)];
  } else {
    if (leaving == kNoValue) {
      return Error("the graph cannot be cut after block %d: nothing crosses it", range.end - 1);
    }
    stage->logits = map[size_t(leaving)];
  }
  return Status::Ok();
}

}  // namespace petrel
