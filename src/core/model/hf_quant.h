// Pre-quantized Hugging Face checkpoints: config.json's `quantization_config` (FP8 e4m3fn with
// block, per-channel or per-tensor scales, as quant_method "fp8" or compressed-tensors'
// "float-quantized" format; GPTQ and AWQ 4-bit) and the reader that turns the tensors of one
// quantized linear layer into one weight matrix the graph reads.
//
// Layouts (safetensors shapes, row-major, `out` and `in` features of the layer `P`):
// - FP8: `P.weight` F8_E4M3 [out, in]; w = fp8 * `P.weight_scale_inv`[o / bo][i / bi] (F32
//   [ceil(out/bo), ceil(in/bi)], `weight_block_size` [bo, bi]), or * `P.weight_scale`: one value
//   (per tensor) or [out, 1] (per channel).
// - GPTQ: `P.qweight` I32 [in/8, out] (value k of word [r][o] is input 8r+k, bits 4k..4k+3),
//   `P.qzeros` I32 [groups, out/8] (value k of word [g][c] is output 8c+k), `P.scales` F16
//   [groups, out], `P.g_idx` I32 [in] (each input's group; i / group_size when absent);
//   w = scale * (q - zero), where the classic format stores zero - 1.
// - AWQ (GEMM): `P.qweight` I32 [in, out/8] and `P.qzeros` I32 [groups, out/8] whose word c holds
//   outputs 8c + {0,2,4,6,1,3,5,7} in values 0..7, `P.scales` F16 [groups, out]; input i is in
//   group i / group_size and w = scale * (q - zero).
//
// GPTQ and AWQ matrices whose groups cover whole 32-input blocks and whose scales are F16 are
// repacked exactly into Q4_0 (every zero is 8) or Q5_0 blocks (d = scale, value q - zero + 16);
// the rest, and every FP8 matrix, are dequantized once into owned f32 tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/base/tensor.h"

namespace petrel {

class SafetensorsSet;
struct SafetensorsTensor;

enum class HfQuantMethod : uint8_t { kNone, kFp8, kGptq, kAwq };

// `quantization_config`, checked: every field the reader relies on has a value it supports.
struct HfQuantConfig {
  HfQuantMethod method = HfQuantMethod::kNone;
  // GPTQ / AWQ: inputs per scale and zero point; -1 (GPTQ only): one group for the whole row.
  int64_t group_size = -1;
  bool desc_act = false;       // GPTQ act-order: the `g_idx` tensors are required
  bool zero_minus_one = true;  // GPTQ's classic checkpoint_format "gptq" stores zero - 1
  // FP8 `weight_block_size` [out, in] covered by one `weight_scale_inv` entry; 0 when not given.
  int64_t block_out = 0, block_in = 0;

  bool active() const { return method != HfQuantMethod::kNone; }
  std::string Describe() const;  // "gptq 4-bit, group 128, act-order"
};

// Reads `config["quantization_config"]` (method kNone when absent). A value the reader cannot
// honour is a one-line error naming the field, e.g. "quantization_config.bits is 3: ...".
Result<HfQuantConfig> ParseHfQuantConfig(const nlohmann::json& config);

// What the reader made: for the load's log line and `petrel info`.
struct HfQuantStats {
  size_t native_matrices = 0;  // repacked exactly into Q4_0 / Q5_0 blocks
  size_t f32_matrices = 0;     // dequantized to f32
  size_t native_bytes = 0;
  size_t f32_bytes = 0;
  std::string Summary() const;  // "98 matrices repacked exactly into Q4_0/Q5_0 (12 MiB), ..."
};

class HfQuantReader {
 public:
  // `all_f32`: dequantize every matrix to f32, also where Q4_0/Q5_0 would hold it exactly (the
  // CPU multiplies those with 8-bit activations; f32 weights keep f32 activations).
  HfQuantReader(const HfQuantConfig& config, const SafetensorsSet& tensors, bool all_f32)
      : config_(config), tensors_(tensors), all_f32_(all_f32) {}

  // The matrix `name` ("...q_proj.weight") when the checkpoint stores it quantized: an owned
  // [n_in, n_out] tensor whose buffer is appended to `owned`. An empty view when it is stored
  // as an ordinary tensor or absent: the caller reads it as usual. A quantized tensor that
  // `quantization_config` does not describe is an error.
  Result<TensorView> Read(const std::string& name, std::deque<std::vector<float>>& owned);

  const HfQuantConfig& config() const { return config_; }
  const HfQuantStats& stats() const { return stats_; }

 private:
  Result<TensorView> ReadInt4(const std::string& prefix, std::deque<std::vector<float>>& owned);
  Result<TensorView> ReadFp8(const std::string& prefix, const SafetensorsTensor& weight,
                             std::deque<std::vector<float>>& owned);

  HfQuantConfig config_;
  const SafetensorsSet& tensors_;
  bool all_f32_;
  HfQuantStats stats_;
};

}  // namespace petrel
