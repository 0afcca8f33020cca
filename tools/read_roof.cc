#include "tools/read_roof.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "cpu/roofs/compute_roof.h"  // Median
#include "cpu/kernels.h"        // StreamRead

namespace petrel::tools {

ReadRoof::ReadRoof(const ModelWeights& weights, int64_t experts_used) {
  auto add = [&](const TensorView& view) {
    if (view.data == nullptr) return;
    size_t bytes = view.desc.bytes();
    if (view.desc.n_dims == 3 && experts_used > 0 && experts_used < view.desc.ne[2]) {
      bytes = bytes / size_t(view.desc.ne[2]) * size_t(experts_used);  // the routed experts
    }
    spans_.push_back({static_cast<const uint8_t*>(view.data), bytes});
    total_bytes_ += bytes;
  };
  for (const LayerWeights& layer : weights.layers) {
    for (const TensorView& view : layer.views()) add(view);  // a token step reads them all
  }
  add(weights.output_norm);
  add(weights.output);  // the embedding table itself when tied: then it is read as the output
}

double ReadRoof::TokensPerSecond(size_t threads, size_t passes) const {
  threads = std::max<size_t>(threads, 1);
  const size_t share = (total_bytes_ + threads - 1) / threads;
  std::vector<double> rates;
  for (size_t pass = 0; pass < std::max<size_t>(passes, 1); ++pass) {
    std::vector<uint64_t> sums(threads);
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        // Thread t reads bytes [t * share, (t + 1) * share) of the spans laid end to end.
        size_t begin = t * share, end = std::min(total_bytes_, begin + share), offset = 0;
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
