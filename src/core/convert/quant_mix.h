// Which type each tensor of a model gets when quantizing: the plain types, llama.cpp's named
// mixes (K-quant and IQ mixes: sensitive tensors at higher precision, as `llama-quantize`
// chooses them) and the 32-block fallback for short rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/base/status.h"
#include "quant/types.h"

namespace petrel {

struct QuantMix {
  DType base = DType::kQ4_K;  // the type of most 2-D weights (llama.cpp's default type)
  // A mix by llama.cpp's file type (`llama_ftype`) name; kPlain: only the output head is raised.
  enum class Kind {
    kPlain,
    kQ3_K_M,
    kQ4_K_M,
    kQ5_K_M,
    kIQ1_S,
    kIQ1_M,
    kIQ2_XXS,
    kIQ2_XS,
    kIQ2_S,  // base IQ2_XS: llama.cpp's IQ2_S file type writes IQ2_XS tensors
    kIQ2_M,  // base IQ2_S
    kIQ3_XXS,
    kIQ3_XS,  // base IQ3_S, with IQ3_XXS in the middle layers' FFN and the attention Q/K
    kIQ3_S,
    kIQ3_M,
    kIQ4_XS,
    kTQ1_0,
    kTQ2_0,
    kMXFP4_MOE,  // MXFP4 experts, Q8_0 elsewhere
  } kind = Kind::kPlain;
  bool pure = false;  // every 2-D weight gets `base` (still with the short-row fallback)
};

// What the mixes' rules read about the model and the run besides the tensor itself (llama.cpp's
// hparams and `has_imatrix`).
struct QuantModelInfo {
  int n_layers = 0;
  int n_gqa = 1;                 // attention heads per KV head
  int n_experts = 0;             // experts per MoE layer; 0 for a dense model
  bool has_output = true;        // false: token_embd is also the output head (tied)
  bool with_importance = false;  // an importance matrix is given
};

// "Q4_0", "q8_0", "Q4_K_M", "IQ2_M", "IQ3_XS", "MXFP4_MOE", ... (case-insensitive); nullopt if
// unknown. Plain types are those quant/quantize.h can encode, except the activation formats
// Q8_1/Q8_K; the named mixes parse whether or not their types' encoders are built in (writing
// one is checked per tensor: CheckCanWrite).
std::optional<QuantMix> ParseQuantMix(const std::string& name);

// The type of tensor `name` (GGUF naming: blk.N.attn_v.weight) with rows of `n_in` elements and
// `n_dims` dimensions (3: stacked experts). 1-D tensors (norms, biases) stay F32.
DType ChooseTensorType(const QuantMix& mix, const std::string& name, int64_t n_in, int n_dims,
                       const QuantModelInfo& model);
// The same for a dense model of `n_layers` blocks with an output head, without an importance
// matrix.
DType ChooseTensorType(const QuantMix& mix, const std::string& name, int64_t n_in, int n_dims,
                       int n_layers);

// The type the mix asks for, before the short-row fallback (ChooseTensorType is this through
// FallbackForRow).
DType MixedTensorType(const QuantMix& mix, const std::string& name, int n_dims,
                      const QuantModelInfo& model, int64_t n_in);

// Tells the user which tensors were written in another type than the one asked for (a row that
// does not hold whole blocks): one warning per tensor with the reason, and a summary line.
class FallbackReport {
 public:
  // Notes tensor `name` if `written` differs from `wanted`, and warns about it.
  void Note(const std::string& name, DType wanted, DType written, int64_t n_in);
  // The summary warning, when any tensor fell back ("N of M tensors ...").
  void Finish(size_t n_tensors) const;
  size_t count() const { return count_; }

 private:
  size_t count_ = 0;
};

// llama.cpp's fallback for rows that do not hold whole blocks of `type`: K-quants and IQ4_XS go
// to a 32-block type (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0, Q2_K/Q3_K→Q4_0, IQ4_XS→IQ4_NL), and
// rows that hold no whole 32-block to F16.
DType FallbackForRow(DType type, int64_t n_in);

// llama.cpp's `llama_ftype` for a file written with `mix` (the general.file_type key).
uint32_t GgufFileType(const QuantMix& mix);

// Whether tensor `tensor` can be written as `type`, given whether an importance matrix entry
// is at hand for it: an error naming the type (and, for a type that needs an importance matrix,
// the `--imatrix` flag) where not.
Status CheckCanWrite(DType type, const std::string& tensor, bool has_importance);

}  // namespace petrel
