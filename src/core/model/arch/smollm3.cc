// The SmolLM3 family (GGUF arch `smollm3`, HF `SmolLM3ForCausalLM`): Llama's block, except that
// some layers apply no RoPE at all (NoPE): HF `no_rope_layers[i] == 0` (1 = rotate), by default
// every `no_rope_layer_interval`-th layer (4: layers 3, 7, ...). The GGUF has no key for it and
// llama.cpp hard-codes every 4th layer; petrel writes its own `<arch>.no_rope_layers` (HF's list)
// when the pattern is another one, and reads it back. Q/K rows are permuted in the GGUF as
// Llama's (interleaved pairs); the HF folder's rotate half-split.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

constexpr int64_t kDefaultNoRopeInterval = 4;  // transformers' and llama.cpp's

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

// NoPE on every `interval`-th layer: layer i when (i + 1) % interval == 0.
std::vector<uint8_t> EveryNthNope(int64_t n_layers, int64_t interval) {
  std::vector<uint8_t> nope(size_t(n_layers > 0 ? n_layers : 0));
  for (size_t l = 0; l < nope.size(); ++l) nope[l] = (int64_t(l) + 1) % interval == 0;
  return nope;
}

Result<ModelConfig> SmolLm3ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  const std::string key = Key(arch, "no_rope_layers");
  if (!file.Find(key)) {
    c.nope_layers = EveryNthNope(c.n_layers, kDefaultNoRopeInterval);
    return c;
  }
  PETREL_ASSIGN_OR_RETURN(const GgufValue* list, file.GetArray(key, GgufType::kInt32));
  if (int64_t(list->count) != c.n_layers) {
    return Error("key %s: %llu entries for %lld layers", key.c_str(),
                 (unsigned long long)list->count, (long long)c.n_layers);
  }
  for (uint64_t l = 0; l < list->count; ++l) {
    const int64_t rotates = list->IntAt(l);
    if (rotates != 0 && rotates != 1) {
      return Error("key %s: entry %llu is %lld (1 = RoPE, 0 = none)", key.c_str(),
                   (unsigned long long)l, (long long)rotates);
    }
    c.nope_layers.push_back(rotates == 0);
  }
  return c;
}

Result<ModelConfig> SmolLm3ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  // Released SmolLM3 configs have `use_sliding_window: false` (and llama.cpp never applies a
  // window to this arch); a config that turns it on is refused rather than run without it.
  if (json.value("use_sliding_window", false) == true) {
    return Error(
        "config.json: field 'use_sliding_window': windowed SmolLM3 layers are not supported");
  }
  c.sliding_window = 0;
  if (auto it = json.find("no_rope_layers"); it != json.end() && !it->is_null()) {
    if (!it->is_array() || int64_t(it->size()) != c.n_layers) {
      return Error(
          "config.json: field 'no_rope_layers' must list one flag per layer (%lld), "
          "found %s",
          (long long)c.n_layers,
          it->is_array() ? (std::to_string(it->size()) + " entries").c_str() : it->type_name());
    }
    for (const nlohmann::json& flag : *it) {
      if (!flag.is_number_integer() || (flag.get<int64_t>() != 0 && flag.get<int64_t>() != 1)) {
        return Error("config.json: field 'no_rope_layers' entry %s must be 1 (RoPE) or 0 (none)",
                     flag.dump().c_str());
      }
      c.nope_layers.push_back(flag.get<int64_t>() == 0);
    }
    return c;
  }
  int64_t interval = kDefaultNoRopeInterval;
  if (auto it = json.find("no_rope_layer_interval"); it != json.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
      return Error("config.json: field 'no_rope_layer_interval' must be a positive integer, not %s",
                   it->dump().c_str());
    }
    interval = it->get<int64_t>();
  }
  c.nope_layers = EveryNthNope(c.n_layers, interval);
  return c;
}

// Llama's keys, plus petrel's `no_rope_layers` when the pattern is not llama.cpp's.
void SmolLm3ConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  LlamaConfigToGguf(c, arch, writer);
  if (c.nope_layers == EveryNthNope(c.n_layers, kDefaultNoRopeInterval)) return;
  std::vector<int32_t> rotates;
  for (int64_t l = 0; l < c.n_layers; ++l) rotates.push_back(c.LayerRotates(l) ? 1 : 0);
  writer->SetI32Array(Key(arch, "no_rope_layers"), rotates);
}

}  // namespace

extern constinit const ArchitectureFamily kSmolLm3Family =
    LlamaBlockFamily(&SmolLm3ConfigFromGguf, &SmolLm3ConfigFromHf, &SmolLm3ConfigToGguf);

}  // namespace petrel
