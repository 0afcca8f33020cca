#include "tools/read_roof.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>
#include <thread>

#include "cpu/roofs/compute_roof.h"  // Median
#include "cpu/kernels.h"        // StreamRead

namespace petrel::tools {

std::string StepBytes::ToString() const {
  auto mib = [](size_t bytes) { return double(bytes) / (1024.0 * 1024.0); };
  char text[256];
  std::snprintf(text, sizeof(text),
                "%.1f MiB = attention %.1f + ffn and shared %.1f + routed experts %.1f + head "
                "%.1f + KV %.1f",
                mib(total()), mib(attention), mib(ffn), mib(routed), mib(head), mib(kv));
  return text;
}

ReadRoof::ReadRoof(const ModelWeights& weights, int64_t experts_used, size_t kv_bytes,
                   std::span<const std::span<const uint8_t>> kv_rows) {
  auto add = [&](const TensorView& view, size_t* kind) {
    if (view.data == nullptr) return;
    size_t bytes = view.desc.bytes();
    if (view.desc.n_dims == 3 && experts_used > 0 && experts_used < view.desc.ne[2]) {
      bytes = bytes / size_t(view.desc.ne[2]) * size_t(experts_used);  // the routed experts
      kind = &bytes_.routed;
    }
    spans_.push_back({static_cast<const uint8_t*>(view.data), bytes});
    *kind += bytes;
  };
  for (const LayerWeights& layer : weights.layers) {
    for (size_t i = 0; i < layer.size(); ++i) {
      const WeightSpec& spec = layer.spec(i);
      if (spec.IsFusedPart()) continue;  // a view into a tensor counted whole
      const bool attention = std::string_view(spec.gguf_name).starts_with("attn_");
      add(layer[i], attention ? &bytes_.attention : &bytes_.ffn);  // a step reads them all
    }
  }
  add(weights.output_norm, &bytes_.head);
  add(weights.output, &bytes_.head);  // the embedding table itself when tied: read as the output
  if (kv_bytes == 0) return;
  bytes_.kv = kv_bytes;
  size_t held = 0;
  for (std::span<const uint8_t> rows : kv_rows) held += rows.size();
  if (held == 0) {
    kv_.assign(kv_bytes, 1);  // written, so that its pages are real memory
    spans_.push_back({kv_.data(), kv_.size()});
    return;
  }
  // The cache's own pages, the rows a step reads; the rows a test appends (not yet there when
  // the roof is sampled) are stood for by reading the first ones again.
  for (size_t left = kv_bytes; left > 0;) {
    for (std::span<const uint8_t> rows : kv_rows) {
      const size_t take = std::min(left, rows.size());
      if (take > 0) spans_.push_back({rows.data(), take});
      left -= take;
      if (left == 0) break;
    }
  }
}

double ReadRoof::TokensPerSecond(size_t threads, size_t passes) const {
  threads = std::max<size_t>(threads, 1);
  const size_t total_bytes = bytes_.total();
  const size_t share = (total_bytes + threads - 1) / threads;
  std::vector<double> rates;
  for (size_t pass = 0; pass < std::max<size_t>(passes, 1); ++pass) {
    std::vector<uint64_t> sums(threads);
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        // Thread t reads bytes [t * share, (t + 1) * share) of the spans laid end to end.
        size_t begin = t * share, end = std::min(total_bytes, begin + share), offset = 0;
        uint64_t sum = 0;
        for (const Span& span : spans_) {
          const size_t lo = std::max(begin, offset), hi = std::min(end, offset + span.bytes);
          if (lo < hi) sum += cpu::StreamRead(span.data + (lo - offset), hi - lo);
          offset += span.bytes;
        }
        sums[t] = sum;
      });
    }
    for (std::thread& worker : workers) worker.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(1.0 / std::max(seconds, 1e-9));
    // The sums are kept so the reads cannot be optimized away.
    volatile uint64_t sink = 0;
    for (uint64_t s : sums) sink = sink + s;
  }
  return cpu::Median(rates);
}

}  // namespace petrel::tools
