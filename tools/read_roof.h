// The generation roof of a model on this machine: how fast a few threads can merely read the
// bytes one decode step must read (every weight matrix and norm once; not the token-embedding
// table, of which a step gathers one row; of a mixture of experts, only the routed experts; with
// tokens in the cache, their K/V rows). `petrel bench` measures it next to each generation run,
// so that the fraction of the bound is a same-machine, same-moment figure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/architecture.h"  // ModelWeights

namespace petrel::tools {

// A step's reads by kind: what `petrel bench` prints as its active bytes per token.
struct StepBytes {
  size_t attention = 0;  // attn_* weights (latent attention's projections included)
  size_t ffn = 0;        // dense FFNs, shared experts, routers, block norms
  size_t routed = 0;     // the routed experts (experts_used of each experts tensor)
  size_t head = 0;       // final norm and output projection
  size_t kv = 0;         // cached K/V (or latent) rows the attention reads
  size_t weights() const { return attention + ffn + routed + head; }
  size_t total() const { return weights() + kv; }
  std::string ToString() const;  // "412.3 MiB = attention 30.1 + ffn 120.4 + ..."
};

class ReadRoof {
 public:
  // `experts_used`: a mixture-of-experts step reads only that many experts of each experts
  // tensor (ne[2] experts): the roof counts (and reads) that many experts' bytes of each.
  // `kv_bytes`: bytes of cached rows a step reads besides, read in place from `kv_rows` (the
  // cache's own rows, Engine::HostSequenceKv; cycled through when kv_bytes is more), or when
  // there are none (a cache in device memory) from a buffer of that size, which then counts in
  // the process's peak RSS.
  explicit ReadRoof(const ModelWeights& weights, int64_t experts_used = 0, size_t kv_bytes = 0,
                    std::span<const std::span<const uint8_t>> kv_rows = {});

  size_t bytes_per_token() const { return bytes_.total(); }
  const StepBytes& step_bytes() const { return bytes_; }
  // Tokens per second of a step that did nothing but read its weights once with `threads`
  // threads: the median of `passes` timed reads (see cpu::ComputeRoofOpsPerSecond).
  double TokensPerSecond(size_t threads, size_t passes = 5) const;

 private:
  struct Span {
    const uint8_t* data;
    size_t bytes;
  };
  std::vector<Span> spans_;
  std::vector<uint8_t> kv_;  // stands for the cache's rows when they are not in host memory
  StepBytes bytes_;
};

}  // namespace petrel::tools
