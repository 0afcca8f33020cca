// LoadModel: detects the format, reads the config through the architecture registry, and binds
// the weight views the architecture declares, by name and shape.
#include "core/model/loader.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/base/log.h"
#include "core/format/gguf.h"
#include "core/format/safetensors.h"
#include "core/model/hf_quant.h"
#include "core/tokenizer/tokenizer.h"
#include "quant/f16.h"

namespace petrel {

LoadedModel::~LoadedModel() = default;

namespace {

// Converts a small F32/F16/BF16 tensor into an owned f32 copy (norm weights, biases).
Result<TensorView> ConvertToF32(const TensorView& view, LoadedModel& model,
                                const std::string& where) {
  void (*convert)(const uint16_t* in, float* out, size_t n) = nullptr;
  if (view.desc.dtype == DType::kF32) return view;  // used in place
  if (view.desc.dtype == DType::kF16) {
    convert = &F16ToF32Row;
  } else if (view.desc.dtype == DType::kBF16) {
    convert = &BF16ToF32Row;
  } else {
    return Error("%s: tensor of type %s cannot be used as a norm weight or bias", where.c_str(),
                 DTypeName(view.desc.dtype));
  }
  const size_t n = size_t(view.desc.n_elems());
  std::vector<float>& buffer = model.owned.emplace_back(n);
  convert(static_cast<const uint16_t*>(view.data), buffer.data(), n);
  TensorView out = view;
  out.desc.dtype = DType::kF32;
  out.data = buffer.data();
  return out;
}

// Finds tensors by name in a GGUF file or a Hugging Face folder.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Which of a weight's two names this source uses.
  virtual bool UsesHfNames() const = 0;
  // nullptr when absent; an error when the tensor is there but cannot be read (a pre-quantized
  // layer whose tensors do not match its `quantization_config`).
  virtual Result<const TensorView*> Find(const std::string& name) = 0;
  virtual std::string Describe() const = 0;  // for messages: the file or folder
  // A copy of `view` converted to f32 and owned by the model (for norms and biases).
  virtual Result<TensorView> ToF32(const TensorView& view) = 0;
  // A buffer of `n` floats owned by the model.
  virtual std::vector<float>& Own(size_t n) = 0;
};

class GgufSource final : public WeightSource {
 public:
  GgufSource(LoadedModel& model) : model_(model) {}
  bool UsesHfNames() const override { return false; }
  Result<const TensorView*> Find(const std::string& name) override {
    const GgufTensorInfo* info = model_.gguf->FindTensor(name);
    if (!info) return nullptr;
    return &model_.views.emplace_back(TensorView{info->desc, const_cast<void*>(info->data), 0});
  }
  std::string Describe() const override { return model_.gguf->path(); }
  Result<TensorView> ToF32(const TensorView& view) override {
    return ConvertToF32(view, model_, Describe());
  }
  std::vector<float>& Own(size_t n) override { return model_.owned.emplace_back(n); }

 private:
  LoadedModel& model_;
};

class SafetensorsSource final : public WeightSource {
 public:
  // `quant` reads the layers a pre-quantized checkpoint stores packed (null: none are).
  SafetensorsSource(LoadedModel& model, HfQuantReader* quant) : model_(model), quant_(quant) {}
  bool UsesHfNames() const override { return true; }
  Result<const TensorView*> Find(const std::string& name) override {
    if (auto it = unpacked_.find(name); it != unpacked_.end()) return it->second;
    auto read = quant_->Read(name, model_.owned);
    if (!read.ok()) return read.status().Wrap(Describe());
    const TensorView unpacked = *read;
    if (unpacked.data) {
      const TensorView* view = &model_.views.emplace_back(unpacked);
      unpacked_.emplace(name, view);
      return view;
    }
    const SafetensorsTensor* tensor = model_.safetensors->Find(name);
    if (!tensor) return nullptr;
    return &model_.views.emplace_back(TensorView{tensor->desc, const_cast<void*>(tensor->data), 0});
  }
  std::string Describe() const override { return model_.source; }
  Result<TensorView> ToF32(const TensorView& view) override {
    return ConvertToF32(view, model_, Describe());
  }
  std::vector<float>& Own(size_t n) override { return model_.owned.emplace_back(n); }

 private:
  LoadedModel& model_;
  HfQuantReader* quant_;
  // Unpacked layers by name, so that looking a name up twice unpacks it once.
  std::map<std::string, const TensorView*> unpacked_;
};

// Binds the weights an architecture declares, checking each one's shape against the config.
class Binder {
 public:
  Binder(const Architecture& arch, const ModelConfig& config, WeightSource& source)
      : arch_(arch), config_(config), source_(source) {}

  // The name `spec` of block `layer` (-1: not in a block) has in this source.
  std::string Name(const WeightSpec& spec, int layer) const {
    return source_.UsesHfNames() ? HfWeightName(arch_, spec, layer) : GgufWeightName(spec, layer);
  }
  Result<bool> Has(const WeightSpec& spec, int layer) {
    PETREL_ASSIGN_OR_RETURN(const TensorView* view, source_.Find(Name(spec, layer)));
    return view != nullptr;
  }

  // Binds `spec` of block `layer` into `out`; an absent weight that is not required leaves
  // `out` empty.
  Status Bind(const WeightSpec& spec, int layer, TensorView* out) {
    if (spec.HfRearranged() && source_.UsesHfNames()) return BindRearranged(spec, layer, out);
    if (spec.kind == WeightKind::kExperts && source_.UsesHfNames()) {
      return BindStackedExperts(spec, layer, out);
    }
    if (spec.derived && source_.UsesHfNames()) return BindDerived(spec, layer, out);
    const std::string name = Name(spec, layer);
    PETREL_ASSIGN_OR_RETURN(const TensorView* view, source_.Find(name));
    if (!view && spec.derived && spec.derived->gguf_name) {
      PETREL_ASSIGN_OR_RETURN(const bool has_source,
                              Has(WeightSpec{spec.derived->gguf_name, spec.derived->hf_name}, layer));
      if (has_source) return BindDerived(spec, layer, out);
    }
    if (!view) {
      if (spec.IsRequired(config_)) {
        return Error("%s: tensor %s is missing", source_.Describe().c_str(), name.c_str());
      }
      *out = TensorView{};
      return Status::Ok();
    }
    const WeightShape shape = spec.shape(config_);
    switch (spec.kind) {
      case WeightKind::kMatrix:
        if (view->desc.n_dims != 2 || view->desc.ne[0] != shape.n_in ||
            view->desc.ne[1] != shape.n_out) {
          return Error("%s: tensor %s has shape %s, expected [%lld, %lld]",
                       source_.Describe().c_str(), name.c_str(), view->desc.ShapeString().c_str(),
                       (long long)shape.n_in, (long long)shape.n_out);
        }
        *out = *view;
        return Status::Ok();
      case WeightKind::kExperts:
        // A writer may drop the trailing 1 of a single expert's tensor.
        if (view->desc.n_dims < 2 || view->desc.n_dims > 3 || view->desc.ne[0] != shape.n_in ||
            view->desc.ne[1] != shape.n_out || view->desc.ne[2] != config_.n_experts) {
          return Error("%s: tensor %s has shape %s, expected [%lld, %lld, %lld]",
                       source_.Describe().c_str(), name.c_str(), view->desc.ShapeString().c_str(),
                       (long long)shape.n_in, (long long)shape.n_out,
                       (long long)config_.n_experts);
        }
        *out = *view;
        return Status::Ok();
      case WeightKind::kHeads:
        if (view->desc.n_dims < 2 || view->desc.n_dims > 3 || view->desc.ne[0] != shape.n_in ||
            view->desc.ne[1] != shape.n_out || view->desc.ne[2] != config_.n_heads) {
          return Error("%s: tensor %s has shape %s, expected [%lld, %lld, %lld]",
                       source_.Describe().c_str(), name.c_str(), view->desc.ShapeString().c_str(),
                       (long long)shape.n_in, (long long)shape.n_out, (long long)config_.n_heads);
        }
        *out = *view;
        return Status::Ok();
      case WeightKind::kVector:
        // One row of n_in, or one per expert (n_out rows).
        if (view->desc.n_elems() != shape.n_in * shape.n_out || view->desc.ne[0] != shape.n_in) {
          if (shape.n_out == 1) {
            return Error("%s: tensor %s has shape %s, expected [%lld]", source_.Describe().c_str(),
                         name.c_str(), view->desc.ShapeString().c_str(), (long long)shape.n_in);
          }
          return Error("%s: tensor %s has shape %s, expected [%lld, %lld]",
                       source_.Describe().c_str(), name.c_str(), view->desc.ShapeString().c_str(),
                       (long long)shape.n_in, (long long)shape.n_out);
        }
        PETREL_ASSIGN_OR_RETURN(*out, source_.ToF32(*view));
        if (spec.hf_offset != 0.0f && source_.UsesHfNames()) {
          // An owned copy: F32 views point into the read-only mapping.
          std::vector<float>& shifted = source_.Own(size_t(shape.n_in * shape.n_out));
          const float* values = out->as<const float>();
          for (size_t i = 0; i < shifted.size(); ++i) shifted[i] = values[i] + spec.hf_offset;
          out->data = shifted.data();
        }
        return Status::Ok();
    }
    return Status::Ok();
  }

 private:
  // A Hugging Face tensor in another layout than the GGUF one (WeightSpec::hf_stride,
  // hf_input_major), e.g. gpt-oss's `mlp.experts.gate_up_proj` [E][D][2F] with gate and up
  // interleaved on the last axis: this weight's features are gathered into an owned tensor of
  // the GGUF layout ([n_in, n_out, E] for experts; [n_in, n_out] for a stack of vectors), in the
  // checkpoint's type (vectors then as f32).
  Status BindRearranged(const WeightSpec& spec, int layer, TensorView* out) {
    const std::string name = Name(spec, layer);
    PETREL_ASSIGN_OR_RETURN(const TensorView* view, source_.Find(name));
    if (!view && spec.kind == WeightKind::kExperts) {
      PETREL_ASSIGN_OR_RETURN(const TensorView* blocks, source_.Find(name + "_blocks"));
      if (blocks) return BindMxfp4Experts(spec, name, *blocks, out);
    }
    if (!view) {
      if (spec.IsRequired(config_)) {
        return Error("%s: tensor %s is missing", source_.Describe().c_str(), name.c_str());
      }
      *out = TensorView{};
      return Status::Ok();
    }
    const WeightShape shape = spec.shape(config_);
    const int64_t stride = spec.hf_stride, first = spec.hf_first;
    const bool vector = spec.kind == WeightKind::kVector;
    // Outputs per matrix (elements per vector row) in the HF tensor, and matrices (rows).
    const int64_t n_features = vector ? shape.n_in : shape.n_out;
    const int64_t n_inputs = vector ? 1 : shape.n_in;
    const int64_t n_mats = spec.kind == WeightKind::kExperts ? config_.n_experts
                           : vector                          ? shape.n_out
                                                             : 1;
    // The expected HF shape, innermost first.
    int64_t want[3] = {0, 0, 0};
    if (vector) {
      want[0] = n_features * stride, want[1] = n_mats, want[2] = 1;
    } else if (spec.hf_input_major) {
      want[0] = n_features * stride, want[1] = n_inputs, want[2] = n_mats;
    } else {
      want[0] = n_inputs, want[1] = n_features * stride, want[2] = n_mats;
    }
    const TensorDesc& d = view->desc;
    const size_t elem_bytes = d.dtype == DType::kF32                              ? 4
                              : d.dtype == DType::kF16 || d.dtype == DType::kBF16 ? 2
                                                                                  : 0;
    if (d.ne[0] != want[0] || d.ne[1] != want[1] || d.ne[2] != want[2] || d.ne[3] != 1 ||
        elem_bytes == 0 || first < 0 || first >= stride) {
      return Error(
          "%s: tensor %s is %s %s, expected F32, F16 or BF16 [%lld, %lld, %lld] "
          "(innermost first)",
          source_.Describe().c_str(), name.c_str(), DTypeName(d.dtype), d.ShapeString().c_str(),
          (long long)want[0], (long long)want[1], (long long)want[2]);
    }
    // out[m][o][i] = in[m][i][o * stride + first] (input-major) or in[m][o * stride + first][i].
    const size_t n_out_elems = size_t(n_mats * n_features * n_inputs);
    std::vector<float>& buffer = source_.Own((n_out_elems * elem_bytes + 3) / 4);
    char* dst = reinterpret_cast<char*>(buffer.data());
    const char* src = static_cast<const char*>(view->data);
    for (int64_t m = 0; m < n_mats; ++m) {
      for (int64_t o = 0; o < n_features; ++o) {
        const int64_t column = o * stride + first;
        for (int64_t i = 0; i < n_inputs; ++i) {
          const int64_t from = vector || spec.hf_input_major
                                   ? (m * n_inputs + i) * want[0] + column
                                   : (m * want[1] + column) * n_inputs + i;
          const int64_t to = (m * n_features + o) * n_inputs + i;
          std::memcpy(dst + size_t(to) * elem_bytes, src + size_t(from) * elem_bytes, elem_bytes);
        }
      }
    }
    TensorView gathered{vector ? TensorDesc::Make(d.dtype, {n_features, n_mats})
                        : spec.kind == WeightKind::kExperts
                            ? TensorDesc::Make(d.dtype, {n_inputs, n_features, n_mats})
                            : TensorDesc::Make(d.dtype, {n_inputs, n_features}),
                        dst, 0};
    if (vector) {
      PETREL_ASSIGN_OR_RETURN(gathered, source_.ToF32(gathered));
    }
    *out = gathered;
    return Status::Ok();
  }

  // MXFP4 experts as Hugging Face stores them (gpt-oss): `<name>_blocks` [E][rows][n_in/32][16]
  // bytes, two E2M1 indices per byte (low nibble first), and `<name>_scales` [E][rows][n_in/32]
  // E8M0 exponents, rows output-major whatever the unpacked tensor's layout. GGUF's MXFP4 block
  // is the exponent followed by 16 bytes whose low nibbles are elements 0-15 and high nibbles
  // 16-31, so the blocks are repacked into an owned tensor (same values, no rounding); the
  // scales being a separate tensor, the checkpoint's bytes cannot be used in place.
  Status BindMxfp4Experts(const WeightSpec& spec, const std::string& name, const TensorView& blocks,
                          TensorView* out) {
    PETREL_ASSIGN_OR_RETURN(const TensorView* scales, source_.Find(name + "_scales"));
    const WeightShape shape = spec.shape(config_);
    const int64_t stride = spec.hf_stride, first = spec.hf_first;
    const int64_t n_blocks = shape.n_in / 32, n_rows = shape.n_out * stride;
    const TensorDesc& b = blocks.desc;
    if (shape.n_in % 32 != 0 || b.dtype != DType::kI8 || b.ne[0] != 16 || b.ne[1] != n_blocks ||
        b.ne[2] != n_rows || b.ne[3] != config_.n_experts) {
      return Error(
          "%s: tensor %s_blocks is %s %s, expected U8 [%lld, %lld, %lld, 16] (an input "
          "width that is a multiple of 32)",
          source_.Describe().c_str(), name.c_str(), DTypeName(b.dtype), b.ShapeString().c_str(),
          (long long)config_.n_experts, (long long)n_rows, (long long)n_blocks);
    }
    if (!scales || scales->desc.dtype != DType::kI8 || scales->desc.ne[0] != n_blocks ||
        scales->desc.ne[1] != n_rows || scales->desc.ne[2] != config_.n_experts ||
        scales->desc.ne[3] != 1) {
      return Error("%s: tensor %s_scales is %s, expected U8 [%lld, %lld, %lld]",
                   source_.Describe().c_str(), name.c_str(),
                   scales ? scales->desc.ShapeString().c_str() : "missing",
                   (long long)config_.n_experts, (long long)n_rows, (long long)n_blocks);
    }
    const TensorDesc desc =
        TensorDesc::Make(DType::kMXFP4, {shape.n_in, shape.n_out, config_.n_experts});
    std::vector<float>& buffer = source_.Own((desc.bytes() + 3) / 4);
    uint8_t* dst = reinterpret_cast<uint8_t*>(buffer.data());
    const uint8_t* src_blocks = static_cast<const uint8_t*>(blocks.data);
    const uint8_t* src_scales = static_cast<const uint8_t*>(scales->data);
    for (int64_t e = 0; e < config_.n_experts; ++e) {
      for (int64_t o = 0; o < shape.n_out; ++o) {
        const int64_t row = e * n_rows + o * stride + first;
        for (int64_t k = 0; k < n_blocks; ++k) {
          const uint8_t* packed = src_blocks + size_t((row * n_blocks + k) * 16);
          uint8_t* block = dst + size_t(((e * shape.n_out + o) * n_blocks + k) * 17);
          block[0] = src_scales[row * n_blocks + k];
          for (int j = 0; j < 16; ++j) {
            // Elements j and j + 16 of the block: bytes j / 2 and 8 + j / 2, nibble j % 2.
            const int shift = (j % 2) * 4;
            const uint8_t low = uint8_t((packed[j / 2] >> shift) & 0xF);
            const uint8_t high = uint8_t((packed[8 + j / 2] >> shift) & 0xF);
            block[1 + j] = uint8_t(low | (high << 4));
          }
        }
      }
    }
    *out = TensorView{desc, dst, 0};
    return Status::Ok();
  }

  // Hugging Face checkpoints store one matrix per expert (`*` in the name is its index): they
  // are copied into one owned [n_in, n_out, n_experts] tensor, the layout the graph reads.
  Status BindStackedExperts(const WeightSpec& spec, int layer, TensorView* out) {
    const std::string pattern = Name(spec, layer);
    const size_t star = pattern.find('*');
    const WeightShape shape = spec.shape(config_);
    if (config_.n_experts <= 0 && !spec.IsRequired(config_)) {  // a dense model of the family
      *out = TensorView{};
      return Status::Ok();
    }
    if (star == std::string::npos || config_.n_experts <= 0) {
      return Error("%s: expert weight %s has no expert index", source_.Describe().c_str(),
                   pattern.c_str());
    }
    std::vector<const TensorView*> experts;
    for (int64_t e = 0; e < config_.n_experts; ++e) {
      const std::string name = pattern.substr(0, star) + std::to_string(e) +
                               pattern.substr(star + 1);
      PETREL_ASSIGN_OR_RETURN(const TensorView* view, source_.Find(name));
      if (!view) {
        if (!spec.IsRequired(config_) && e == 0) {
          *out = TensorView{};
          return Status::Ok();
        }
        return Error("%s: tensor %s is missing", source_.Describe().c_str(), name.c_str());
      }
      if (view->desc.n_dims != 2 || view->desc.ne[0] != shape.n_in ||
          view->desc.ne[1] != shape.n_out ||
          (!experts.empty() && view->desc.dtype != experts[0]->desc.dtype)) {
        return Error("%s: tensor %s is %s %s, expected %s [%lld, %lld]",
                     source_.Describe().c_str(), name.c_str(), DTypeName(view->desc.dtype),
                     view->desc.ShapeString().c_str(),
                     DTypeName(experts.empty() ? view->desc.dtype : experts[0]->desc.dtype),
                     (long long)shape.n_in, (long long)shape.n_out);
      }
      experts.push_back(view);
    }
    TensorView stacked{TensorDesc::Make(experts[0]->desc.dtype,
                                        {shape.n_in, shape.n_out, config_.n_experts}),
                       nullptr, 0};
    const size_t expert_bytes = experts[0]->desc.bytes();
    std::vector<float>& buffer = source_.Own((stacked.desc.bytes() + 3) / 4);
    char* dst = reinterpret_cast<char*>(buffer.data());
    for (size_t e = 0; e < experts.size(); ++e) {
      std::memcpy(dst + e * expert_bytes, experts[e]->data, expert_bytes);
    }
    stacked.data = dst;
    *out = stacked;
    return Status::Ok();
  }

  // A weight made from another tensor (WeightSpec::derived) into memory the model owns.
  Status BindDerived(const WeightSpec& spec, int layer, TensorView* out) {
    const WeightSpec source_spec{spec.derived->gguf_name ? spec.derived->gguf_name : "",
                                 spec.derived->hf_name};
    const std::string name = Name(source_spec, layer);
    PETREL_ASSIGN_OR_RETURN(const TensorView* from, source_.Find(name));
    if (!from) {
      if (!spec.IsRequired(config_)) {
        *out = TensorView{};
        return Status::Ok();
      }
      return Error("%s: tensor %s is missing (needed for %s)", source_.Describe().c_str(),
                   name.c_str(), GgufWeightName(spec, layer).c_str());
    }
    const WeightShape shape = spec.shape(config_);
    TensorView made{spec.kind == WeightKind::kHeads
                        ? TensorDesc::Make(from->desc.dtype, {shape.n_in, shape.n_out, config_.n_heads})
                        : TensorDesc::Make(from->desc.dtype, {shape.n_in, shape.n_out}),
                    nullptr, 0};
    std::vector<float>& buffer = source_.Own((made.desc.bytes() + 3) / 4);
    made.data = buffer.data();
    const Status status = spec.derived->make(*from, config_, &made);
    if (!status.ok()) {
      return Error("%s: tensor %s: %s", source_.Describe().c_str(), name.c_str(),
                   status.message().c_str());
    }
    *out = made;
    return Status::Ok();
  }

  const Architecture& arch_;
  const ModelConfig& config_;
  WeightSource& source_;
};

// Binds weight `index` of a block as rows of the fused tensor holding it: a view into the same
// mapped bytes, which is exact for every type because rows are whole blocks.
Status BindFusedPart(const ModelConfig& c, LayerWeights& layer, size_t index, int l) {
  const WeightSpec& spec = layer.spec(index);
  const size_t fused_index = size_t(spec.fused_in);
  if (fused_index >= layer.size() || layer.spec(fused_index).IsFusedPart() ||
      spec.kind != WeightKind::kMatrix || !spec.first_row) {
    return Error("block %d: weight %s is declared inside an unusable tensor", l, spec.gguf_name);
  }
  const TensorView& fused = layer[fused_index];
  const WeightShape shape = spec.shape(c);
  const int64_t first = spec.first_row(c);
  if (!fused.data) {
    layer[index] = TensorView{};
    return Status::Ok();
  }
  if (fused.desc.ne[0] != shape.n_in || first < 0 || first + shape.n_out > fused.desc.ne[1]) {
    return Error("block %d: rows [%lld, %lld) of %s do not fit its shape %s", l, (long long)first,
                 (long long)(first + shape.n_out), layer.spec(fused_index).gguf_name,
                 fused.desc.ShapeString().c_str());
  }
  TensorView part = fused;
  part.desc.ne[1] = shape.n_out;
  part.data = static_cast<char*>(fused.data) + size_t(first) * fused.desc.row_bytes();
  layer[index] = part;
  return Status::Ok();
}

Status BindWeights(const Architecture& arch, const ModelConfig& c, WeightSource& source,
                   ModelWeights* w) {
  Binder binder(arch, c, source);
  // Tied checkpoints may store the matrix under either name (the story model keeps only
  // `lm_head.weight`), so look for the embedding under both.
  bool embd_in_output = false;
  if (c.tied_embeddings) {
    PETREL_ASSIGN_OR_RETURN(const bool has_embd, binder.Has(arch.token_embd, -1));
    PETREL_ASSIGN_OR_RETURN(const bool has_output, binder.Has(arch.output, -1));
    embd_in_output = !has_embd && has_output;
  }
  PETREL_RETURN_IF_ERROR(
      binder.Bind(embd_in_output ? arch.output : arch.token_embd, -1, &w->token_embd));
  PETREL_RETURN_IF_ERROR(binder.Bind(arch.output, -1, &w->output));
  if (!w->output.data && c.tied_embeddings) w->output = w->token_embd;
  PETREL_RETURN_IF_ERROR(binder.Bind(arch.output_norm, -1, &w->output_norm));
  w->input = LayerWeights(arch.input_weights);
  for (size_t i = 0; i < w->input.size(); ++i) {
    PETREL_RETURN_IF_ERROR(binder.Bind(w->input.spec(i), -1, &w->input[i]));
  }
  w->layers.assign(size_t(c.n_layers), LayerWeights(arch.layer_weights));
  for (int l = 0; l < int(c.n_layers); ++l) {
    LayerWeights& layer = w->layers[size_t(l)];
    for (size_t i = 0; i < layer.size(); ++i) {
      if (layer.spec(i).IsFusedPart() || !layer.spec(i).InLayer(c, l)) continue;
      PETREL_RETURN_IF_ERROR(binder.Bind(layer.spec(i), l, &layer[i]));
    }
    for (size_t i = 0; i < layer.size(); ++i) {
      if (!layer.spec(i).IsFusedPart() || !layer.spec(i).InLayer(c, l)) continue;
      PETREL_RETURN_IF_ERROR(BindFusedPart(c, layer, i, l));
    }
  }
  return Status::Ok();
}

Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("%s: cannot open", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Error("%s: not valid JSON", path.c_str());
  if (!json.is_object()) return Error("%s: expected a JSON object", path.c_str());
  return json;
}

// A sentence-transformers folder names its pooling in modules.json's Pooling module
// (`<path>/config.json`, one `pooling_mode_*` flag true). No modules.json: nothing to read.
Status ReadSentenceTransformersPooling(const std::string& folder, ModelConfig* config) {
  std::ifstream modules_file(folder + "/modules.json", std::ios::binary);
  if (!modules_file) return Status::Ok();
  std::stringstream text;
  text << modules_file.rdbuf();
  const nlohmann::json modules = nlohmann::json::parse(text.str(), nullptr, false);
  const std::string where = folder + "/modules.json";
  if (!modules.is_array()) return Error("%s: expected a JSON array of modules", where.c_str());
  for (const nlohmann::json& module : modules) {
    if (!module.is_object() || !module.contains("type") || !module["type"].is_string()) {
      return Error("%s: a module without a type", where.c_str());
    }
    const std::string type = module["type"].get<std::string>();
    if (type != "sentence_transformers.models.Pooling") continue;
    auto path_field = module.find("path");
    if (path_field == module.end() || !path_field->is_string()) {
      return Error("%s: the Pooling module has no path", where.c_str());
    }
    const std::string path = path_field->get<std::string>();
    if (path.find("..") != std::string::npos) {
      return Error("%s: pooling path '%s' leaves the folder", where.c_str(), path.c_str());
    }
    PETREL_ASSIGN_OR_RETURN(const nlohmann::json pooling,
                            ReadJsonFile(folder + "/" + path + "/config.json"));
    // sentence-transformers' flags, in the order its Pooling module checks them.
    const std::pair<const char*, PoolingKind> kModes[] = {
        {"pooling_mode_cls_token", PoolingKind::kCls},
        {"pooling_mode_mean_tokens", PoolingKind::kMean},
        {"pooling_mode_lasttoken", PoolingKind::kLast},
    };
    const char* kUnsupported[] = {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                  "pooling_mode_weightedmean_tokens"};
    auto flag = [&](const char* field) -> Result<bool> {
      auto it = pooling.find(field);
      if (it == pooling.end() || it->is_null()) return false;
      if (!it->is_boolean()) {
        return Error("%s/%s/config.json: %s must be true or false", folder.c_str(), path.c_str(),
                     field);
      }
      return it->get<bool>();
    };
    std::vector<PoolingKind> chosen;
    for (const auto& [field, kind] : kModes) {
      PETREL_ASSIGN_OR_RETURN(const bool on, flag(field));
      if (on) chosen.push_back(kind);
    }
    for (const char* field : kUnsupported) {
      PETREL_ASSIGN_OR_RETURN(const bool on, flag(field));
      if (on) {
        return Error("%s/%s/config.json: %s is not supported (cls, mean or last token)",
                     folder.c_str(), path.c_str(), field);
      }
    }
    if (chosen.size() != 1) {
      return Error("%s/%s/config.json: expected one pooling mode, found %zu", folder.c_str(),
                   path.c_str(), chosen.size());
    }
    config->pooling = chosen[0];
  }
  return Status::Ok();
}

void Account(LoadedModel& model) {
  std::map<std::string, size_t> by_type;
  auto add = [&](const TensorView& view) {
    if (!view.data) return;
    by_type[DTypeName(view.desc.dtype)] += view.desc.bytes();
    model.weight_bytes += view.desc.bytes();
    ++model.n_tensors;
  };
  const ModelWeights& w = model.weights;
  add(w.token_embd);
  if (w.output.data != w.token_embd.data) add(w.output);
  add(w.output_norm);
  for (const TensorView& view : w.input.views()) add(view);
  for (const LayerWeights& layer : w.layers) {
    for (size_t i = 0; i < layer.size(); ++i) {
      if (!layer.spec(i).IsFusedPart()) add(layer[i]);  // parts are counted in their tensor
    }
  }
  model.bytes_by_type.assign(by_type.begin(), by_type.end());
}

// Runs before any allocation sized by the config, after the caller's edit.
Status CheckConfig(const LoadOptions& options, ModelConfig& config, const std::string& where) {
  if (options.edit_config) options.edit_config(config);
  return config.Validate().Wrap(where);
}

Status LoadGguf(const std::string& path, const LoadOptions& options, LoadedModel& model) {
  PETREL_ASSIGN_OR_RETURN(model.gguf, GgufFile::Open(path));
  model.format = "gguf";
  model.mapped_bytes = model.gguf->file_bytes();
  PETREL_ASSIGN_OR_RETURN(std::string_view arch_name,
                          model.gguf->GetString("general.architecture"));
  model.arch = FindArchitectureByGguf(arch_name);
  if (!model.arch) {
    return Error("%s: architecture '%.*s' is not supported (supported: %s)", path.c_str(),
                 int(arch_name.size()), arch_name.data(), KnownArchitectures().c_str());
  }
  auto config = model.arch->config_from_gguf(*model.gguf, *model.arch);
  if (!config.ok()) return config.status().Wrap(path);
  model.config = std::move(config).value();
  // Any family may carry llama.cpp's pooling key (embedding models built on decoders).
  if (model.config.pooling == PoolingKind::kUnset) {
    const std::string key = std::string(model.arch->gguf_name) + ".pooling_type";
    if (model.gguf->Find(key)) {
      auto number = model.gguf->GetUint(key);
      if (!number.ok()) return number.status().Wrap(path);
      auto pooling = PoolingFromGguf(*number);
      if (!pooling.ok()) return pooling.status().Wrap(path + ": key " + key);
      model.config.pooling = *pooling;
    }
  }
  PETREL_RETURN_IF_ERROR(CheckConfig(options, model.config, path));
  if (options.load_tokenizer) {
    auto tokenizer = Tokenizer::FromGguf(*model.gguf);
    if (!tokenizer.ok()) return tokenizer.status().Wrap(path);
    model.tokenizer = std::move(tokenizer).value();
  }
  GgufSource source(model);
  return BindWeights(*model.arch, model.config, source, &model.weights);
}

Status LoadHfFolder(const std::string& folder, const LoadOptions& options, LoadedModel& model) {
  PETREL_ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(folder + "/config.json"));
  std::string hf_class;
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    hf_class = (*it)[0].get<std::string>();
  }
  std::string model_type;
  if (auto it = config.find("model_type"); it != config.end() && it->is_string()) {
    model_type = it->get<std::string>();
  } else if (it != config.end() && !it->is_null()) {
    return Error("%s/config.json: field 'model_type' must be a string", folder.c_str());
  }
  model.arch = FindArchitectureByHf(hf_class, model_type);
  if (!model.arch) {
    return Error("%s/config.json: architecture '%s' is not supported (supported: %s)",
                 folder.c_str(), hf_class.c_str(), KnownArchitectures().c_str());
  }
  auto parsed = ConfigFromHf(config, *model.arch);
  if (!parsed.ok()) return parsed.status().Wrap(folder);
  auto quant_config = ParseHfQuantConfig(config);
  if (!quant_config.ok()) return quant_config.status().Wrap(folder + "/config.json");
  model.config = std::move(parsed).value();
  PETREL_RETURN_IF_ERROR(ReadSentenceTransformersPooling(folder, &model.config));
  PETREL_RETURN_IF_ERROR(CheckConfig(options, model.config, folder));
  PETREL_ASSIGN_OR_RETURN(model.safetensors, SafetensorsSet::OpenFolder(folder));
  model.format = "safetensors";
  model.mapped_bytes = model.safetensors->total_bytes();
  if (options.load_tokenizer) {
    auto tokenizer = Tokenizer::FromHfFolder(folder);
    if (!tokenizer.ok()) return tokenizer.status().Wrap(folder);
    model.tokenizer = std::move(tokenizer).value();
  }
  HfQuantReader quant(*quant_config, *model.safetensors, options.prequantized_as_f32);
  SafetensorsSource source(model, &quant);
  PETREL_RETURN_IF_ERROR(BindWeights(*model.arch, model.config, source, &model.weights));
  if (quant.config().active()) {
    const HfQuantStats& stats = quant.stats();
    model.prequantized = quant.config().Describe() + ": " + stats.Summary();
    model.prequantized_bytes = stats.native_bytes + stats.f32_bytes;
    // A warning when f32 copies cost memory beyond the checkpoint's own size.
    Log(stats.f32_matrices > 0 ? LogLevel::kWarning : LogLevel::kInfo,
        "%s: %s checkpoint: %s at load, in owned memory", folder.c_str(),
        quant.config().Describe().c_str(), stats.Summary().c_str());
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path,
                                               const LoadOptions& options) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return Error("%s: no such file or folder", path.c_str());
  auto model = std::make_unique<LoadedModel>();
  model->source = path;
  const ScopedMapOptions map_options(options.map);
  if (S_ISDIR(info.st_mode)) {
    PETREL_RETURN_IF_ERROR(LoadHfFolder(path, options, *model));
  } else {
    PETREL_RETURN_IF_ERROR(LoadGguf(path, options, *model));
  }
  if (model->tokenizer && model->tokenizer->n_vocab() > size_t(model->config.n_vocab)) {
    return Error("%s: tokenizer has %zu tokens but the model only %lld", path.c_str(),
                 model->tokenizer->n_vocab(), (long long)model->config.n_vocab);
  }
  model->weights.rope_inv_freq = model->config.rope.InverseFrequencies();
  if (model->config.rope_local_base > 0.0f) {
    model->weights.rope_inv_freq_local = model->config.LocalRope().InverseFrequencies();
  }
  Account(*model);
  if (!options.lora.empty()) {
    PETREL_ASSIGN_OR_RETURN(
        model->lora, LoadLoraAdapters(*model->arch, model->config, model->weights, options.lora));
  }
  return model;
}

void UseRopeContext(int64_t context, LoadedModel* model) {
  if (model->config.rope.scaling != RopeScalingKind::kLongRope) return;
  model->config.rope.SelectLongRopeFactors(context);
  model->weights.rope_inv_freq = model->config.rope.InverseFrequencies();
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return Error("%s: no such file or folder", path.c_str());
  if (S_ISDIR(info.st_mode)) return Tokenizer::FromHfFolder(path);
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  auto tokenizer = Tokenizer::FromGguf(*file);
  if (!tokenizer.ok()) return tokenizer.status().Wrap(path);
  return tokenizer;
}

}  // namespace petrel
