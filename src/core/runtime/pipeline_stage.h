// One pipeline stage's part of a forward pass: the nodes of its blocks (with the embedding on
// the first stage and the output head on the last), cut out of the whole graph.
#pragma once

#include <vector>

#include "core/base/status.h"
#include "core/graph/graph.h"
#include "core/runtime/pipeline_plan.h"  // LayerRange

namespace petrel {

// `stage` gets the nodes of `whole` whose layer `range` holds, plus the embedding's nodes when
// the range starts at block 0 and the head's when it ends at `n_layers`, with values renumbered.
// `*input` is the value that enters the range from the stage before (kNoValue on the first
// stage): a value no node of `stage` produces, which the caller fills. `stage->logits` is what
// leaves it: the hidden rows for the next stage, or the graph's logits on the last. A graph
// where more than one value crosses a boundary cannot be cut there: an error naming the block.
// `value_map` is scratch, kept by the caller so that a steady decode allocates nothing.
Status CutStage(const Graph& whole, LayerRange range, int n_layers, Graph* stage, ValueId* input,
                std::vector<ValueId>* value_map);

}  // namespace petrel
