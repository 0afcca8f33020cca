// Cutting a stage's nodes out of the whole graph (pipeline_stage.h).
#include "core/runtime/pipeline_stage.h"

namespace petrel {

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
      for (ValueId v : node.inputs) {
        if (v == kNoValue || !produced[size_t(v)]) continue;
        if (node.layer < range.end) continue;  // a node before the stage cannot read its values
        if (leaving != kNoValue && leaving != v) {
          return Error("the graph cannot be cut after block %d: more than one value crosses it",
                       range.end - 1);
        }
        leaving = v;
      }
      continue;
    }
    Node copy = node;
    for (ValueId& v : copy.inputs) {
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
