// Collects an importance matrix while the engine runs: for each weight matrix, the sum of each
// input column's squared activation over every token, and the tokens seen (llama-imatrix's
// statistics), through the executor's matrix-product observer.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/eval/imatrix_file.h"
#include "core/runtime/engine.h"

namespace petrel::tools {

class ImatrixCollector : public MatMulObserver {
 public:
  // Watches the block weights of `engine`'s model (and the output head with `include_output`,
  // llama-imatrix's --process-output). The engine must outlive the collector.
  ImatrixCollector(const Engine& engine, bool include_output);

  void OnMatMulInput(const Node& node, const float* rows, int64_t n_rows, int64_t n_cols) override;

  // What was collected, as an importance matrix; weights never run are left out.
  Imatrix Result(std::vector<std::string> datasets, uint32_t chunk_count,
                 uint32_t chunk_size) const;

 private:
  struct Sums {
    std::vector<double> sum2;  // per input column, in double: millions of small squares
    double count = 0;
  };
  void Add(const TensorView* weight, const float* rows, int64_t n_rows, int64_t n_cols);

  std::unordered_map<const TensorView*, std::string> names_;  // by the view a node points to
  std::map<std::string, Sums> sums_;
};

}  // namespace petrel::tools
