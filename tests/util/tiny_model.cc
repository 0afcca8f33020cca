// WriteTinyModel: one set of random weights, written in both layouts.
#include "util/tiny_model.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/format/gguf_writer.h"

namespace petrel::testing {
namespace {

using Tensor = F32Tensor;

// HF [n_heads * head_dim, in] rows, per head [2][head_dim/2] -> llama.cpp's [head_dim/2][2].
std::vector<float> PermuteRows(const std::vector<float>& w, int n_heads, int head_dim, int n_in) {
  std::vector<float> out(w.size());
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < half; ++i) {
      for (int j = 0; j < 2; ++j) {
        const int src = h * head_dim + j * half + i;
        const int dst = h * head_dim + i * 2 + j;
        std::memcpy(&out[size_t(dst) * n_in], &w[size_t(src) * n_in], size_t(n_in) * sizeof(float));
      }
    }
  }
  return out;
}

std::vector<float> PermuteVector(const std::vector<float>& b, int n_heads, int head_dim) {
  return PermuteRows(b, n_heads, head_dim, 1);
}

}  // namespace

std::string WriteF32Safetensors(const std::string& path,
                                const std::map<std::string, Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const size_t bytes = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text;
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size() * sizeof(float)));
  }
  return out ? "" : "cannot write " + path;
}

std::string WriteTinyModel(const TinyModelSpec& s, const std::string& folder, const std::string& gguf_path) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int head_dim = s.dim / s.n_heads;
  auto random = [&](std::vector<int64_t> shape, float scale, float mean = 0.0f) {
    Tensor t{shape, {}};
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    t.data.resize(n);
    for (float& v : t.data) v = mean + scale * normal(rng);
    return t;
  };
  const float proj = 1.0f / std::sqrt(float(s.dim));
  const bool moe = s.arch == "mixtral";
  std::map<std::string, Tensor> hf;
  hf["model.embed_tokens.weight"] = random({s.n_vocab, s.dim}, 1.0f);
  hf["model.norm.weight"] = random({s.dim}, 0.1f, 1.0f);
  if (!s.tied) hf["lm_head.weight"] = random({s.n_vocab, s.dim}, 2.0f * proj);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    hf[p + "input_layernorm.weight"] = random({s.dim}, 0.1f, 1.0f);
    hf[p + "post_attention_layernorm.weight"] = random({s.dim}, 0.1f, 1.0f);
    hf[p + "self_attn.q_proj.weight"] = random({s.n_heads * head_dim, s.dim}, proj);
    hf[p + "self_attn.k_proj.weight"] = random({s.n_kv_heads * head_dim, s.dim}, proj);
    hf[p + "self_attn.v_proj.weight"] = random({s.n_kv_heads * head_dim, s.dim}, proj);
    hf[p + "self_attn.o_proj.weight"] = random({s.dim, s.n_heads * head_dim}, proj);
    if (s.qkv_bias) {
      hf[p + "self_attn.q_proj.bias"] = random({s.n_heads * head_dim}, 0.5f);
      hf[p + "self_attn.k_proj.bias"] = random({s.n_kv_heads * head_dim}, 0.5f);
      hf[p + "self_attn.v_proj.bias"] = random({s.n_kv_heads * head_dim}, 0.5f);
    }
    if (moe) {
      const std::string m = p + "block_sparse_moe.";
      hf[m + "gate.weight"] = random({s.n_experts, s.dim}, 4.0f * proj);
      for (int e = 0; e < s.n_experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        hf[x + "w1.weight"] = random({s.ffn, s.dim}, proj);
        hf[x + "w3.weight"] = random({s.ffn, s.dim}, proj);
        hf[x + "w2.weight"] = random({s.dim, s.ffn}, 1.0f / std::sqrt(float(s.ffn)));
      }
      continue;
    }
    hf[p + "mlp.gate_proj.weight"] = random({s.ffn, s.dim}, proj);
    hf[p + "mlp.up_proj.weight"] = random({s.ffn, s.dim}, proj);
    hf[p + "mlp.down_proj.weight"] = random({s.dim, s.ffn}, 1.0f / std::sqrt(float(s.ffn)));
  }

  // Hugging Face folder.
  mkdir(folder.c_str(), 0755);
  const char* hf_class = s.arch == "qwen2"     ? "Qwen2ForCausalLM"
                         : s.arch == "mistral" ? "MistralForCausalLM"
                         : moe                 ? "MixtralForCausalLM"
                                               : "LlamaForCausalLM";
  nlohmann::json config = {{"architectures", {hf_class}}, {"model_type", s.arch},
                           {"hidden_size", s.dim}, {"num_hidden_layers", s.n_layers},
                           {"num_attention_heads", s.n_heads}, {"num_key_value_heads", s.n_kv_heads},
                           {"intermediate_size", s.ffn}, {"vocab_size", s.n_vocab},
                           {"rms_norm_eps", 1e-5}, {"rope_theta", s.rope_theta},
                           {"max_position_embeddings", 2048}, {"tie_word_embeddings", s.tied}};
  const float factor = 8.0f, low = 1.0f, high = 4.0f;
  const int original = 64;  // small, so the ramp covers the tiny head's frequencies
  if (s.llama3_rope) {
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", low},
                              {"high_freq_factor", high}, {"original_max_position_embeddings", original}};
  }
  if (moe) {
    config["num_local_experts"] = s.n_experts;
    config["num_experts_per_tok"] = s.n_experts_used;
  }
  std::ofstream(folder + "/config.json") << config.dump(2);
  std::string error = WriteF32Safetensors(folder + "/model.safetensors", hf);
  if (!error.empty()) return error;

  // GGUF, in llama.cpp's layout.
  const bool permute = s.arch != "qwen2";
  GgufWriter writer;
  const std::string a = moe ? "llama" : s.arch;  // llama.cpp writes Mixtral as llama
  writer.SetString("general.architecture", a);
  if (moe) {
    writer.SetU32(a + ".expert_count", uint32_t(s.n_experts));
    writer.SetU32(a + ".expert_used_count", uint32_t(s.n_experts_used));
  }
  writer.SetU32(a + ".context_length", 2048);
  writer.SetU32(a + ".embedding_length", uint32_t(s.dim));
  writer.SetU32(a + ".block_count", uint32_t(s.n_layers));
  writer.SetU32(a + ".feed_forward_length", uint32_t(s.ffn));
  writer.SetU32(a + ".attention.head_count", uint32_t(s.n_heads));
  writer.SetU32(a + ".attention.head_count_kv", uint32_t(s.n_kv_heads));
  writer.SetF32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.SetF32(a + ".rope.freq_base", s.rope_theta);
  writer.SetU32(a + ".rope.dimension_count", uint32_t(head_dim));
  auto add = [&](const std::string& name, std::vector<float> data, std::vector<int64_t> hf_shape) {
    TensorDesc desc;
    desc.dtype = DType::kF32;
    for (size_t i = hf_shape.size(); i-- > 0;) desc.ne[size_t(desc.n_dims++)] = hf_shape[i];
    auto shared = std::make_shared<std::vector<float>>(std::move(data));
    writer.AddTensor(name, desc, [shared](void* dst) { std::memcpy(dst, shared->data(), shared->size() * sizeof(float)); });
  };
  add("token_embd.weight", hf["model.embed_tokens.weight"].data, {s.n_vocab, s.dim});
  add("output_norm.weight", hf["model.norm.weight"].data, {s.dim});
  if (!s.tied) add("output.weight", hf["lm_head.weight"].data, {s.n_vocab, s.dim});
  if (s.llama3_rope) {
    // Per-pair divisors, as llama.cpp's converter writes `rope_freqs.weight`.
    std::vector<float> factors;
    for (int i = 0; i < head_dim / 2; ++i) {
      const double freq = std::pow(double(s.rope_theta), -2.0 * i / head_dim);
      const double wavelen = 2.0 * M_PI / freq;
      const double low_wavelen = original / low, high_wavelen = original / high;
      double f = 1.0;
      if (wavelen > low_wavelen) {
        f = factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (original / wavelen - low) / (high - low);
        f = 1.0 / ((1.0 - smooth) / factor + smooth);
      }
      factors.push_back(float(f));
    }
    add("rope_freqs.weight", factors, {head_dim / 2});
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string b = "blk." + std::to_string(l) + ".";
    auto q = hf[p + "self_attn.q_proj.weight"].data;
    auto k = hf[p + "self_attn.k_proj.weight"].data;
    if (permute) {
      q = PermuteRows(q, s.n_heads, head_dim, s.dim);
      k = PermuteRows(k, s.n_kv_heads, head_dim, s.dim);
    }
    add(b + "attn_norm.weight", hf[p + "input_layernorm.weight"].data, {s.dim});
    add(b + "ffn_norm.weight", hf[p + "post_attention_layernorm.weight"].data, {s.dim});
    add(b + "attn_q.weight", q, {s.n_heads * head_dim, s.dim});
    add(b + "attn_k.weight", k, {s.n_kv_heads * head_dim, s.dim});
    add(b + "attn_v.weight", hf[p + "self_attn.v_proj.weight"].data, {s.n_kv_heads * head_dim, s.dim});
    add(b + "attn_output.weight", hf[p + "self_attn.o_proj.weight"].data, {s.dim, s.n_heads * head_dim});
    if (s.qkv_bias) {
      auto bq = hf[p + "self_attn.q_proj.bias"].data;
      auto bk = hf[p + "self_attn.k_proj.bias"].data;
      if (permute) {
        bq = PermuteVector(bq, s.n_heads, head_dim);
        bk = PermuteVector(bk, s.n_kv_heads, head_dim);
      }
      add(b + "attn_q.bias", bq, {s.n_heads * head_dim});
      add(b + "attn_k.bias", bk, {s.n_kv_heads * head_dim});
      add(b + "attn_v.bias", hf[p + "self_attn.v_proj.bias"].data, {s.n_kv_heads * head_dim});
    }
    if (moe) {
      // Stacked experts, [n_experts][rows][cols] in HF order.
      const std::string m = p + "block_sparse_moe.";
      add(b + "ffn_gate_inp.weight", hf[m + "gate.weight"].data, {s.n_experts, s.dim});
      for (const auto& [gguf, hf_name, rows, cols] :
           {std::tuple{"ffn_gate_exps", "w1", s.ffn, s.dim}, std::tuple{"ffn_up_exps", "w3", s.ffn, s.dim},
            std::tuple{"ffn_down_exps", "w2", s.dim, s.ffn}}) {
        std::vector<float> stacked;
        for (int e = 0; e < s.n_experts; ++e) {
          const auto& d = hf[m + "experts." + std::to_string(e) + "." + hf_name + ".weight"].data;
          stacked.insert(stacked.end(), d.begin(), d.end());
        }
        add(b + gguf + ".weight", stacked, {s.n_experts, rows, cols});
      }
      continue;
    }
    add(b + "ffn_gate.weight", hf[p + "mlp.gate_proj.weight"].data, {s.ffn, s.dim});
    add(b + "ffn_up.weight", hf[p + "mlp.up_proj.weight"].data, {s.ffn, s.dim});
    add(b + "ffn_down.weight", hf[p + "mlp.down_proj.weight"].data, {s.dim, s.ffn});
  }
  // A minimal vocabulary so the GGUF declares its size.
  std::vector<std::string> tokens;
  for (int i = 0; i < s.n_vocab; ++i) tokens.push_back("t" + std::to_string(i));
  writer.SetString("tokenizer.ggml.model", "llama");
  writer.SetStringArray("tokenizer.ggml.tokens", tokens);
  Status status = writer.Write(gguf_path);
  return status.ok() ? "" : status.message();
}

}  // namespace petrel::testing
