// The softmax's normalizer in log space, for log-probabilities over a whole vocabulary.
#pragma once

#include <cstddef>

namespace petrel {

// log(sum_i exp(logits[i])): the largest logit taken out, the rest through a float exp the
// compiler vectorizes (relative error under 2e-7; a logit below the largest by more than 87
// counts as about 1e-38, not 0), summed in 8 float lanes over blocks of 256 and the blocks in
// double. Infinite or NaN largest logit: that value.
double LogSumExp(const float* logits, size_t n);

}  // namespace petrel
