// The Granite 3.x family (GGUF arch `granite`, HF `GraniteForCausalLM`): Llama's block with four
// multipliers as data:
//   x0 = embedding_multiplier · embed(t);  x += residual_multiplier · sublayer(x) for attention
//   and FFN; attention scores scaled by attention_multiplier (instead of head_dim^-0.5);
//   logits = head(x) / logits_scaling.
// A tied head reads the embedding table as stored (the multiplier scales the looked-up rows
// only). GGUF keys `embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`; its
// Q/K rows are permuted as Llama's (interleaved pairs), the HF folder's rotate half-split.

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

// The four multipliers, in the order of `kMultipliers` below.
struct Multipliers {
  double embedding = 1.0, residual = 1.0, attention = 1.0, logits = 1.0;
};

// Each multiplier's names and place. Every one must be a positive finite number: a zero or
// negative one would silently zero or flip the model (a zero attention scale would even read
// as "the default" downstream).
struct MultiplierField {
  const char* gguf_key;  // after "<arch>."
  const char* hf_field;
  double Multipliers::*value;
};
constexpr MultiplierField kMultipliers[] = {
    {"embedding_scale", "embedding_multiplier", &Multipliers::embedding},
    {"residual_scale", "residual_multiplier", &Multipliers::residual},
    {"attention.scale", "attention_multiplier", &Multipliers::attention},
    {"logit_scale", "logits_scaling", &Multipliers::logits},
};

bool Usable(double v) { return v > 0.0 && std::isfinite(v); }

void SetMultipliers(const Multipliers& m, ModelConfig& c) {
  c.embedding_scale = float(m.embedding);
  c.residual_scale = float(m.residual);
  c.attention_scale = float(m.attention);
  c.logits_divisor = float(m.logits);
}

// llama.cpp requires all four keys for this arch; so does petrel (a default would be a guess).
Result<ModelConfig> GraniteConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  Multipliers m;
  for (const MultiplierField& field : kMultipliers) {
    const std::string key = std::string(arch.gguf_name) + "." + field.gguf_key;
    PETREL_ASSIGN_OR_RETURN(m.*field.value, file.GetFloat(key));
    if (!Usable(m.*field.value)) {
      return Error("key %s: %g is invalid (must be positive)", key.c_str(), m.*field.value);
    }
  }
  SetMultipliers(m, c);
  return c;
}

// transformers' GraniteConfig defaults every multiplier to 1.
Result<ModelConfig> GraniteConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  if (c.qkv_bias || json.value("mlp_bias", false)) {
    return Error("config.json: Granite with attention_bias or mlp_bias is not supported");
  }
  Multipliers m;
  for (const MultiplierField& field : kMultipliers) {
    auto it = json.find(field.hf_field);
    if (it == json.end() || it->is_null()) continue;
    if (!it->is_number() || !Usable(it->get<double>())) {
      return Error("config.json: field '%s' must be a positive number, not %s", field.hf_field,
                   it->dump().c_str());
    }
    m.*field.value = it->get<double>();
  }
  SetMultipliers(m, c);
  return c;
}

void GraniteConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  LlamaConfigToGguf(c, arch, writer);
  const std::string a = arch.gguf_name;
  writer->SetF32(a + ".embedding_scale", c.embedding_scale);
  writer->SetF32(a + ".residual_scale", c.residual_scale);
  writer->SetF32(a + ".attention.scale", c.attention_scale);
  writer->SetF32(a + ".logit_scale", c.logits_divisor);
}

}  // namespace

extern constinit const ArchitectureFamily kGraniteFamily =
    LlamaBlockFamily(&GraniteConfigFromGguf, &GraniteConfigFromHf, &GraniteConfigToGguf);

}  // namespace petrel
