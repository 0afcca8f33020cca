// The generation roof of a model on this machine: how fast a few threads can merely read the
// bytes one decode step must read (every weight matrix and norm once; not the token-embedding
// table, of which a step gathers one row; of a mixture of experts, only the routed experts). `petrel bench` measures it next to each generation
// run, so that the fraction of the bound is a same-machine, same-moment figure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/model/architecture.h"  // ModelWeights

namespace petrel::tools {

class ReadRoof {
 public:
  // `experts_used`: a mixture-of-experts step reads only that many experts of each experts
  // tensor (ne[2] experts): the roof counts (and reads) that many experts' bytes of each.
  explicit ReadRoof(const ModelWeights& weights, int64_t experts_used = 0);

  size_t bytes_per_token() const { return total_bytes_; }
  // Tokens per second of a step that did nothing but read its weights once with `threads`
  // threads: the median of `passes` timed reads (see cpu::ComputeRoofOpsPerSecond).
  double TokensPerSecond(size_t threads, size_t passes = 5) const;

 private:
  struct Span {
    const uint8_t* data;
    size_t bytes;
  };
  std::vector<Span> spans_;
  size_t total_bytes_ = 0;
};

}  // namespace petrel::tools
