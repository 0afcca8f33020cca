// Pre-quantized Hugging Face weights: `quantization_config`, GPTQ/AWQ unpacking into exact
// Q4_0/Q5_0 blocks or f32, FP8 e4m3fn dequantization.
#include "core/model/hf_quant.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/format/safetensors.h"
#include "quant/blocks.h"  // BlockQ4_0, BlockQ5_0
#include "quant/f16.h"

namespace petrel {
namespace {

constexpr int64_t kBlockElems = 32;  // Q4_0 / Q5_0 elements per block
constexpr int64_t kTileRows = 64;    // output rows unpacked together (a multiple of 8)

// AWQ's GEMM packing: value k of a word is output 8c + kAwqOrder[k], and output 8c + j is value
// kAwqSlot[j] (the inverse permutation).
constexpr std::array<int, 8> kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr std::array<int, 8> kAwqSlot = {0, 4, 1, 5, 2, 6, 3, 7};

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
float F8E4M3ToF32(uint8_t bits) {
  const int exponent = (bits >> 3) & 15, mantissa = bits & 7;
  float magnitude;
  if (exponent == 15 && mantissa == 7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(float(mantissa), -9);
  } else {
    magnitude = std::ldexp(float(8 + mantissa), exponent - 10);
  }
  return bits & 0x80 ? -magnitude : magnitude;
}

const std::array<float, 256>& F8E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values;
    for (int b = 0; b < 256; ++b) values[size_t(b)] = F8E4M3ToF32(uint8_t(b));
    return values;
  }();
  return table;
}

const char* MethodName(HfQuantMethod method) {
  switch (method) {
    case HfQuantMethod::kNone:
      return "none";
    case HfQuantMethod::kFp8:
      return "fp8";
    case HfQuantMethod::kGptq:
      return "gptq";
    case HfQuantMethod::kAwq:
      return "awq";
  }
  return "?";
}

std::string Lower(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string MiB(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

// ceil(n / d) for n >= 0, d > 0, without the overflow of n + d - 1 (a config's group or block
// size may be any integer).
int64_t CeilDiv(int64_t n, int64_t d) { return n / d + (n % d != 0); }

// Word `index` of little-endian int32 data that a safetensors file may place at any byte.
uint32_t LoadWord(const uint8_t* words, size_t index) {
  uint32_t word;
  std::memcpy(&word, words + index * 4, sizeof(word));
  return word;
}

// A tensor's shape as its safetensors header writes it (PyTorch order, outermost first), which
// is how the layouts above and the checkpoints' documentation state them.
std::string HfShape(const TensorDesc& desc) {
  std::string text = "[";
  for (int d = desc.n_dims - 1; d >= 0; --d) {
    text += std::to_string(desc.ne[size_t(d)]) + (d > 0 ? ", " : "");
  }
  return text + "]";
}

// A tensor's dtype as its header names it.
const char* HfDType(const SafetensorsTensor& tensor) {
  return tensor.f8_e4m3 ? "F8_E4M3" : DTypeName(tensor.desc.dtype);
}

// The first of `keys` present in `q`, or nullptr.
const nlohmann::json* Field(const nlohmann::json& q, std::initializer_list<const char*> keys,
                            const char** found) {
  for (const char* key : keys) {
    auto it = q.find(key);
    if (it != q.end() && !it->is_null()) {
      *found = key;
      return &*it;
    }
  }
  *found = *keys.begin();
  return nullptr;
}

Status ReadInt(const nlohmann::json& q, std::initializer_list<const char*> keys, int64_t fallback,
               bool required, int64_t* out) {
  const char* key = nullptr;
  const nlohmann::json* value = Field(q, keys, &key);
  if (!value) {
    if (required) return Error("quantization_config.%s is missing", key);
    *out = fallback;
    return Status::Ok();
  }
  if (!value->is_number_integer()) {
    return Error("quantization_config.%s is %s, expected an integer", key, value->dump().c_str());
  }
  *out = value->get<int64_t>();
  return Status::Ok();
}

Status ReadBool(const nlohmann::json& q, const char* key, bool fallback, bool* out) {
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) {
    *out = fallback;
    return Status::Ok();
  }
  if (!it->is_boolean()) {
    return Error("quantization_config.%s is %s, expected true or false", key, it->dump().c_str());
  }
  *out = it->get<bool>();
  return Status::Ok();
}

Status ReadString(const nlohmann::json& q, std::initializer_list<const char*> keys,
                  const char* fallback, std::string* out) {
  const char* key = nullptr;
  const nlohmann::json* value = Field(q, keys, &key);
  if (!value) {
    *out = fallback;
    return Status::Ok();
  }
  if (!value->is_string()) {
    return Error("quantization_config.%s is %s, expected a string", key, value->dump().c_str());
  }
  *out = Lower(value->get<std::string>());
  return Status::Ok();
}

Status ParseInt4Fields(const nlohmann::json& q, HfQuantConfig* config) {
  const bool gptq = config->method == HfQuantMethod::kGptq;
  int64_t bits = 0;
  PETREL_RETURN_IF_ERROR(ReadInt(q, {"bits", "w_bit"}, 4, true, &bits));
  if (bits != 4) {
    return Error("quantization_config.bits is %lld: only 4-bit %s checkpoints are supported",
                 (long long)bits, MethodName(config->method));
  }
  PETREL_RETURN_IF_ERROR(
      ReadInt(q, {"group_size", "q_group_size"}, 128, false, &config->group_size));
  if (config->group_size == 0 || config->group_size < -1 || (!gptq && config->group_size < 0)) {
    return Error("quantization_config.group_size is %lld: expected a positive count of inputs%s",
                 (long long)config->group_size, gptq ? " or -1" : "");
  }
  if (gptq) {
    PETREL_RETURN_IF_ERROR(ReadBool(q, "desc_act", false, &config->desc_act));
    bool sym = true;  // the zeros are read from qzeros either way; checked for its type only
    PETREL_RETURN_IF_ERROR(ReadBool(q, "sym", true, &sym));
    std::string format;
    PETREL_RETURN_IF_ERROR(ReadString(q, {"checkpoint_format", "format"}, "gptq", &format));
    if (format != "gptq" && format != "gptq_v2") {
      return Error("quantization_config.checkpoint_format '%s' is not supported (gptq, gptq_v2)",
                   format.c_str());
    }
    config->zero_minus_one = format == "gptq";
    return Status::Ok();
  }
  bool zero_point = true;
  PETREL_RETURN_IF_ERROR(ReadBool(q, "zero_point", true, &zero_point));
  if (!zero_point) {
    return Error("quantization_config.zero_point is false: only AWQ with zero points is supported");
  }
  std::string version;
  PETREL_RETURN_IF_ERROR(ReadString(q, {"version"}, "gemm", &version));
  if (version != "gemm") {
    return Error("quantization_config.version '%s' is not supported: only AWQ's gemm packing",
                 version.c_str());
  }
  return Status::Ok();
}

Status ParseFp8Fields(const nlohmann::json& q, HfQuantConfig* config) {
  std::string format;
  PETREL_RETURN_IF_ERROR(ReadString(q, {"fmt"}, "e4m3", &format));
  if (format != "e4m3") {
    return Error("quantization_config.fmt '%s' is not supported: only e4m3 weights",
                 format.c_str());
  }
  auto it = q.find("weight_block_size");
  if (it == q.end() || it->is_null()) return Status::Ok();
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer() || (*it)[0].get<int64_t>() <= 0 ||
      (*it)[1].get<int64_t>() <= 0) {
    return Error(
        "quantization_config.weight_block_size is %s, expected [out, in] of two positive "
        "integers",
        it->dump().c_str());
  }
  config->block_out = (*it)[0].get<int64_t>();
  config->block_in = (*it)[1].get<int64_t>();
  return Status::Ok();
}

// compressed-tensors' "float-quantized" format is FP8 under another config: `weight` F8_E4M3 and
// `weight_scale` per tensor or channel (or per block with `block_structure`). Every group of
// `config_groups` must quantize its weights to 8-bit floats.
Status ParseCompressedFp8Fields(const nlohmann::json& q, HfQuantConfig* config) {
  std::string format;
  PETREL_RETURN_IF_ERROR(ReadString(q, {"format"}, "", &format));
  if (format != "float-quantized") {
    return Error(
        "quantization_config.format '%s' is not supported: compressed-tensors only as "
        "float-quantized (fp8) weights",
        format.c_str());
  }
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return Error("quantization_config.config_groups is missing or empty");
  }
  for (auto group = groups->begin(); group != groups->end(); ++group) {
    const std::string where = "quantization_config.config_groups." + group.key() + ".weights";
    auto weights = group->find("weights");
    if (!group->is_object() || weights == group->end() || !weights->is_object()) {
      return Error("%s is missing", where.c_str());
    }
    auto bits = weights->find("num_bits");
    auto type = weights->find("type");
    if (bits == weights->end() || !bits->is_number_integer() || bits->get<int64_t>() != 8 ||
        type == weights->end() || !type->is_string() || type->get<std::string>() != "float") {
      return Error("%s: only num_bits 8 of type float (e4m3) is supported", where.c_str());
    }
    auto block = weights->find("block_structure");
    if (block != weights->end() && !block->is_null()) {
      if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
          !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 ||
          (*block)[1].get<int64_t>() <= 0) {
        return Error("%s.block_structure is %s, expected [out, in] of two positive integers",
                     where.c_str(), block->dump().c_str());
      }
      config->block_out = (*block)[0].get<int64_t>();
      config->block_in = (*block)[1].get<int64_t>();
    }
  }
  return Status::Ok();
}

// A small F32/F16/BF16 tensor as floats.
Result<std::vector<float>> ReadFloats(const SafetensorsTensor& tensor) {
  const size_t n = size_t(tensor.desc.n_elems());
  std::vector<float> values(n);
  const DType dtype = tensor.desc.dtype;
  if (dtype == DType::kF32 && !tensor.f8_e4m3) {
    std::memcpy(values.data(), tensor.data, n * sizeof(float));
    return values;
  }
  if (dtype != DType::kF16 && dtype != DType::kBF16) {
    return Error("tensor %s is %s, expected F32, F16 or BF16", tensor.name.c_str(),
                 HfDType(tensor));
  }
  std::vector<uint16_t> bits(n);  // aligned: the file may place the tensor at any byte
  std::memcpy(bits.data(), tensor.data, n * sizeof(uint16_t));
  (dtype == DType::kF16 ? F16ToF32Row : BF16ToF32Row)(bits.data(), values.data(), n);
  return values;
}

// Runs `body(begin, end)` over [0, n) split across a few threads: unpacking is independent per
// output tile, and a large checkpoint holds billions of weights.
template <typename Body>
void ParallelTiles(size_t n, const Body& body) {
  const size_t n_threads =
      std::min<size_t>({n, std::max(1u, std::thread::hardware_concurrency()), 16});
  if (n_threads <= 1) {
    body(size_t(0), n);
    return;
  }
  std::vector<std::thread> threads;
  const size_t per_thread = (n + n_threads - 1) / n_threads;
  for (size_t begin = 0; begin < n; begin += per_thread) {
    threads.emplace_back(
        [&body, begin, end = std::min(n, begin + per_thread)] { body(begin, end); });
  }
  for (std::thread& thread : threads) thread.join();
}

// A GPTQ or AWQ matrix after its checks: what the two formats share once unpacked.
struct Int4Matrix {
  bool awq = false;
  int64_t n_in = 0, n_out = 0, n_groups = 0;
  const uint8_t* qweight = nullptr;  // int32 words: GPTQ (in/8, out), AWQ (in, out/8)
  std::vector<uint8_t> zeros;        // (n_groups, n_out), offset applied: 0..16
  std::vector<float> scales;         // (n_groups, n_out)
  std::vector<uint16_t> scale_bits;  // the F16 scales as stored; empty for BF16/F32
  std::vector<int32_t> group;        // (n_in) each input's group
};

// The values of output rows [row0, row0 + n_rows) into `q` (n_rows rows of `q_stride` bytes,
// n_in used), 0..15 each.
void UnpackTile(const Int4Matrix& m, int64_t row0, int64_t n_rows, uint8_t* q, size_t q_stride) {
  if (!m.awq) {
    for (int64_t r = 0; r < m.n_in / 8; ++r) {
      const uint8_t* words = m.qweight + (size_t(r) * size_t(m.n_out) + size_t(row0)) * 4;
      for (int64_t t = 0; t < n_rows; ++t) {
        const uint32_t word = LoadWord(words, size_t(t));
        uint8_t* dst = q + size_t(t) * q_stride + size_t(r) * 8;
        for (int k = 0; k < 8; ++k) dst[k] = uint8_t((word >> (4 * k)) & 15);
      }
    }
    return;
  }
  const size_t words_per_input = size_t(m.n_out / 8);
  for (int64_t i = 0; i < m.n_in; ++i) {
    const uint8_t* words = m.qweight + (size_t(i) * words_per_input + size_t(row0 / 8)) * 4;
    for (int64_t c = 0; c < n_rows / 8; ++c) {
      const uint32_t word = LoadWord(words, size_t(c));
      uint8_t* dst = q + size_t(c) * 8 * q_stride + size_t(i);
      for (int k = 0; k < 8; ++k) {
        dst[size_t(kAwqOrder[size_t(k)]) * q_stride] = uint8_t((word >> (4 * k)) & 15);
      }
    }
  }
}

// Which block type holds `m` exactly, or kF32 when none does.
DType NativeType(const Int4Matrix& m) {
  if (m.scale_bits.empty() || m.n_in % kBlockElems != 0) return DType::kF32;
  for (int64_t b = 0; b < m.n_in; b += kBlockElems) {
    for (int64_t i = b + 1; i < b + kBlockElems; ++i) {
      if (m.group[size_t(i)] != m.group[size_t(b)]) return DType::kF32;
    }
  }
  const bool all_eight =
      std::all_of(m.zeros.begin(), m.zeros.end(), [](uint8_t z) { return z == 8; });
  return all_eight ? DType::kQ4_0 : DType::kQ5_0;
}

// Writes output row `o`, unpacked in `q`, as `type`: f32 values, or blocks with d = the scale and
// value q - zero + 8 (Q4_0, every zero 8) or q - zero + 16 (Q5_0, 0..31 for zeros 0..16).
// `lut` is scratch of 16 floats per group.
void EmitRow(const Int4Matrix& m, DType type, const uint8_t* q, int64_t o, void* dst, float* lut) {
  const size_t n_out = size_t(m.n_out);
  if (type == DType::kF32) {
    // Each of a group's 16 values once, so that the loop over the row is one lookup per weight
    // (the same product, so the same bits).
    for (int64_t g = 0; g < m.n_groups; ++g) {
      const size_t at = size_t(g) * n_out + size_t(o);
      for (int value = 0; value < 16; ++value) {
        lut[g * 16 + value] = m.scales[at] * float(value - int(m.zeros[at]));
      }
    }
    float* out = static_cast<float*>(dst);
    const int32_t* group = m.group.data();
    for (int64_t i = 0; i < m.n_in; ++i) out[i] = lut[size_t(group[i]) * 16 + q[i]];
    return;
  }
  for (int64_t b = 0; b < m.n_in / kBlockElems; ++b) {
    const size_t g = size_t(m.group[size_t(b * kBlockElems)]) * n_out + size_t(o);
    const uint8_t* values = q + b * kBlockElems;
    const int shift = type == DType::kQ4_0 ? 8 : 16;
    uint8_t v[kBlockElems];
    for (int j = 0; j < kBlockElems; ++j) v[j] = uint8_t(int(values[j]) - int(m.zeros[g]) + shift);
    if (type == DType::kQ4_0) {
      quant::BlockQ4_0& block = static_cast<quant::BlockQ4_0*>(dst)[b];
      block.d = m.scale_bits[g];
      for (int j = 0; j < kBlockElems / 2; ++j) block.qs[j] = uint8_t(v[j] | (v[j + 16] << 4));
    } else {
      quant::BlockQ5_0& block = static_cast<quant::BlockQ5_0*>(dst)[b];
      block.d = m.scale_bits[g];
      uint32_t high = 0;
      for (int j = 0; j < kBlockElems / 2; ++j) {
        block.qs[j] = uint8_t((v[j] & 15) | ((v[j + 16] & 15) << 4));
        high |= uint32_t(v[j] >> 4) << j;
        high |= uint32_t(v[j + 16] >> 4) << (j + 16);
      }
      std::memcpy(block.qh, &high, sizeof(high));
    }
  }
}

}  // namespace

std::string HfQuantConfig::Describe() const {
  char text[128];
  switch (method) {
    case HfQuantMethod::kNone:
      return "none";
    case HfQuantMethod::kFp8:
      if (block_out > 0) {
        std::snprintf(text, sizeof(text), "fp8 e4m3, %lldx%lld blocks", (long long)block_out,
                      (long long)block_in);
        return text;
      }
      return "fp8 e4m3";
    case HfQuantMethod::kGptq:
    case HfQuantMethod::kAwq: {
      const std::string groups =
          group_size < 0 ? "one group per row" : "group " + std::to_string(group_size);
      std::snprintf(text, sizeof(text), "%s 4-bit, %s%s", MethodName(method), groups.c_str(),
                    desc_act ? ", act-order" : "");
      return text;
    }
  }
  return "?";
}

std::string HfQuantStats::Summary() const {
  std::string text;
  if (native_matrices > 0) {
    text += std::to_string(native_matrices) + " matrices repacked exactly into Q4_0/Q5_0 (" +
            MiB(native_bytes) + ")";
  }
  if (f32_matrices > 0) {
    if (!text.empty()) text += ", ";
    text += std::to_string(f32_matrices) + " dequantized to F32 (" + MiB(f32_bytes) + ")";
  }
  return text.empty() ? "no quantized matrices" : text;
}

Result<HfQuantConfig> ParseHfQuantConfig(const nlohmann::json& config) {
  HfQuantConfig out;
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return out;
  const nlohmann::json& q = *it;
  if (!q.is_object()) return Error("quantization_config is not an object");
  std::string method;
  PETREL_RETURN_IF_ERROR(ReadString(q, {"quant_method"}, "", &method));
  if (method == "fp8") {
    out.method = HfQuantMethod::kFp8;
    PETREL_RETURN_IF_ERROR(ParseFp8Fields(q, &out));
  } else if (method == "gptq" || method == "awq") {
    out.method = method == "gptq" ? HfQuantMethod::kGptq : HfQuantMethod::kAwq;
    PETREL_RETURN_IF_ERROR(ParseInt4Fields(q, &out));
  } else if (method == "compressed-tensors") {
    out.method = HfQuantMethod::kFp8;
    PETREL_RETURN_IF_ERROR(ParseCompressedFp8Fields(q, &out));
  } else if (method == "mxfp4") {
    // gpt-oss: only the experts are packed (`_blocks` / `_scales`), and the family's weight
    // table reads them into MXFP4 tensors; every other weight is stored plain.
  } else if (method.empty()) {
    return Error("quantization_config.quant_method is missing");
  } else {
    return Error(
        "quantization_config.quant_method '%s' is not supported (supported: fp8, gptq, "
        "awq, compressed-tensors with float-quantized weights, mxfp4 experts)",
        method.c_str());
  }
  return out;
}

Result<TensorView> HfQuantReader::Read(const std::string& name,
                                       std::deque<std::vector<float>>& owned) {
  constexpr std::string_view kSuffix = ".weight";
  if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) return TensorView{};
  const std::string prefix = name.substr(0, name.size() - kSuffix.size());
  const SafetensorsTensor* weight = tensors_.Find(name);
  if (weight && weight->f8_e4m3) {
    if (config_.method != HfQuantMethod::kFp8) {
      return Error("tensor %s is F8_E4M3, but %s", name.c_str(),
                   config_.active() ? "quantization_config.quant_method is not fp8"
                                    : "config.json has no quantization_config");
    }
    return ReadFp8(prefix, *weight, owned);
  }
  if (weight) return TensorView{};  // stored as is (e.g. the output head of a GPTQ model)
  if (!tensors_.Find(prefix + ".qweight")) return TensorView{};
  if (config_.method != HfQuantMethod::kGptq && config_.method != HfQuantMethod::kAwq) {
    return Error("tensor %s.qweight holds packed 4-bit weights, but %s", prefix.c_str(),
                 config_.active() ? "quantization_config.quant_method is fp8"
                                  : "config.json has no quantization_config");
  }
  return ReadInt4(prefix, owned);
}

Result<TensorView> HfQuantReader::ReadInt4(const std::string& prefix,
                                           std::deque<std::vector<float>>& owned) {
  Int4Matrix m;
  m.awq = config_.method == HfQuantMethod::kAwq;
  const char* layout = m.awq ? "[in, out/8]" : "[in/8, out]";
  auto find = [&](const char* suffix, bool required) -> Result<const SafetensorsTensor*> {
    const SafetensorsTensor* tensor = tensors_.Find(prefix + suffix);
    if (!tensor && required) return Error("tensor %s%s is missing", prefix.c_str(), suffix);
    return tensor;
  };
  PETREL_ASSIGN_OR_RETURN(const SafetensorsTensor* qweight, find(".qweight", true));
  PETREL_ASSIGN_OR_RETURN(const SafetensorsTensor* qzeros, find(".qzeros", true));
  PETREL_ASSIGN_OR_RETURN(const SafetensorsTensor* scales, find(".scales", true));
  PETREL_ASSIGN_OR_RETURN(const SafetensorsTensor* g_idx, find(".g_idx", false));
  if (qweight->desc.dtype != DType::kI32 || qweight->f8_e4m3 || qweight->desc.n_dims != 2 ||
      qweight->desc.n_elems() == 0) {
    return Error("tensor %s.qweight is %s %s, expected I32 %s", prefix.c_str(), HfDType(*qweight),
                 HfShape(qweight->desc).c_str(), layout);
  }
  // Safetensors [a, b] is ne = {b, a}.
  m.n_out = m.awq ? qweight->desc.ne[0] * 8 : qweight->desc.ne[0];
  m.n_in = m.awq ? qweight->desc.ne[1] : qweight->desc.ne[1] * 8;
  m.qweight = static_cast<const uint8_t*>(qweight->data);
  if (m.n_out % 8 != 0) {
    return Error(
        "tensor %s.qweight has %lld outputs, not a multiple of the 8 that %s.qzeros "
        "packs per word",
        prefix.c_str(), (long long)m.n_out, prefix.c_str());
  }
  const int64_t group_size = config_.group_size;
  if (m.awq && m.n_in % group_size != 0) {
    return Error(
        "tensor %s.qweight has %lld inputs, not a multiple of quantization_config."
        "group_size %lld",
        prefix.c_str(), (long long)m.n_in, (long long)group_size);
  }
  const int64_t n_groups = group_size < 0 ? 1 : CeilDiv(m.n_in, group_size);
  if (qzeros->desc.dtype != DType::kI32 || qzeros->f8_e4m3 || qzeros->desc.n_dims != 2 ||
      qzeros->desc.ne[0] != m.n_out / 8 || qzeros->desc.ne[1] != n_groups) {
    return Error("tensor %s.qzeros is %s %s, expected I32 [%lld, %lld] (groups, out/8)",
                 prefix.c_str(), HfDType(*qzeros), HfShape(qzeros->desc).c_str(),
                 (long long)n_groups, (long long)(m.n_out / 8));
  }
  if (scales->desc.n_dims != 2 || scales->desc.ne[0] != m.n_out || scales->desc.ne[1] != n_groups) {
    return Error("tensor %s.scales has shape %s, expected [%lld, %lld] (groups, out)",
                 prefix.c_str(), HfShape(scales->desc).c_str(), (long long)n_groups,
                 (long long)m.n_out);
  }
  PETREL_ASSIGN_OR_RETURN(m.scales, ReadFloats(*scales));
  if (scales->desc.dtype == DType::kF16) {
    m.scale_bits.resize(m.scales.size());
    std::memcpy(m.scale_bits.data(), scales->data, m.scale_bits.size() * sizeof(uint16_t));
  }
  m.n_groups = n_groups;

  m.group.resize(size_t(m.n_in));
  if (g_idx && !m.awq) {
    if (g_idx->desc.dtype != DType::kI32 || g_idx->f8_e4m3 || g_idx->desc.n_elems() != m.n_in) {
      return Error("tensor %s.g_idx is %s %s, expected I32 [%lld]", prefix.c_str(), HfDType(*g_idx),
                   HfShape(g_idx->desc).c_str(), (long long)m.n_in);
    }
    std::memcpy(m.group.data(), g_idx->data, m.group.size() * sizeof(int32_t));
    for (size_t i = 0; i < m.group.size(); ++i) {
      if (m.group[i] < 0 || m.group[i] >= n_groups) {
        return Error("tensor %s.g_idx[%zu] is %d, outside the %lld groups", prefix.c_str(), i,
                     m.group[i], (long long)n_groups);
      }
    }
  } else if (config_.desc_act && !m.awq) {
    return Error("tensor %s.g_idx is missing (quantization_config.desc_act is true)",
                 prefix.c_str());
  } else {
    for (int64_t i = 0; i < m.n_in; ++i) {
      m.group[size_t(i)] = group_size < 0 ? 0 : int32_t(i / group_size);
    }
  }

  // Zero points, unpacked once: (n_groups, n_out).
  const int zero_offset = !m.awq && config_.zero_minus_one ? 1 : 0;
  const uint8_t* zero_words = static_cast<const uint8_t*>(qzeros->data);
  m.zeros.resize(size_t(n_groups * m.n_out));
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int64_t o = 0; o < m.n_out; ++o) {
      const uint32_t word = LoadWord(zero_words, size_t(g * (m.n_out / 8) + o / 8));
      const int slot = m.awq ? kAwqSlot[size_t(o % 8)] : int(o % 8);
      m.zeros[size_t(g * m.n_out + o)] = uint8_t(((word >> (4 * slot)) & 15) + zero_offset);
    }
  }

  const DType type = all_f32_ ? DType::kF32 : NativeType(m);
  TensorView out{TensorDesc::Make(type, {m.n_in, m.n_out}), nullptr, 0};
  const size_t row_bytes = out.desc.row_bytes();
  std::vector<float>& buffer = owned.emplace_back((out.desc.bytes() + 3) / 4);
  out.data = buffer.data();
  const int64_t n_tiles = (m.n_out + kTileRows - 1) / kTileRows;
  ParallelTiles(size_t(n_tiles), [&](size_t begin, size_t end) {
    // Rows a cache line longer than n_in: at a power-of-two stride the tile's rows would share
    // one cache set, and unpacking writes to all of them at once.
    const size_t q_stride = size_t(m.n_in) + 64;
    std::vector<uint8_t> q(size_t(kTileRows) * q_stride);  // (tile rows, q_stride)
    std::vector<float> lut(size_t(m.n_groups) * 16);
    for (size_t tile = begin; tile < end; ++tile) {
      const int64_t row0 = int64_t(tile) * kTileRows;
      const int64_t n_rows = std::min(kTileRows, m.n_out - row0);
      UnpackTile(m, row0, n_rows, q.data(), q_stride);
      for (int64_t t = 0; t < n_rows; ++t) {
        EmitRow(m, type, q.data() + size_t(t) * q_stride, row0 + t,
                static_cast<char*>(out.data) + size_t(row0 + t) * row_bytes, lut.data());
      }
    }
  });
  if (type == DType::kF32) {
    ++stats_.f32_matrices;
    stats_.f32_bytes += out.desc.bytes();
  } else {
    ++stats_.native_matrices;
    stats_.native_bytes += out.desc.bytes();
  }
  return out;
}

Result<TensorView> HfQuantReader::ReadFp8(const std::string& prefix,
                                          const SafetensorsTensor& weight,
                                          std::deque<std::vector<float>>& owned) {
  if (weight.desc.n_dims != 2 || weight.desc.n_elems() == 0) {
    return Error("tensor %s.weight has shape %s, expected a matrix", prefix.c_str(),
                 HfShape(weight.desc).c_str());
  }
  const int64_t n_in = weight.desc.ne[0], n_out = weight.desc.ne[1];
  const SafetensorsTensor* scale = tensors_.Find(prefix + ".weight_scale_inv");
  const bool inverse_name = scale != nullptr;
  if (!scale) scale = tensors_.Find(prefix + ".weight_scale");
  if (!scale) {
    return Error("tensor %s.weight_scale_inv (or %s.weight_scale) is missing", prefix.c_str(),
                 prefix.c_str());
  }
  const char* scale_name = inverse_name ? "weight_scale_inv" : "weight_scale";
  // Scales per [block_out, block_in] tile of the weight: the whole matrix, a row, or a block.
  int64_t block_out = 0, block_in = 0;
  const int64_t n_scales = scale->desc.n_elems();
  if (n_scales == 1 && !inverse_name) {
    block_out = n_out;
    block_in = n_in;
  } else if (!inverse_name && n_scales == n_out &&
             (scale->desc.n_dims == 1 || (scale->desc.n_dims == 2 && scale->desc.ne[0] == 1))) {
    block_out = 1;
    block_in = n_in;
  } else if (config_.block_out > 0) {
    block_out = config_.block_out;
    block_in = config_.block_in;
    const int64_t rows = CeilDiv(n_out, block_out);
    const int64_t cols = CeilDiv(n_in, block_in);
    if (scale->desc.n_dims != 2 || scale->desc.ne[0] != cols || scale->desc.ne[1] != rows) {
      return Error(
          "tensor %s.%s has shape %s, expected [%lld, %lld] for %s [%lld, %lld] in "
          "quantization_config.weight_block_size [%lld, %lld]",
          prefix.c_str(), scale_name, HfShape(scale->desc).c_str(), (long long)rows,
          (long long)cols, prefix.c_str(), (long long)n_out, (long long)n_in, (long long)block_out,
          (long long)block_in);
    }
  } else {
    return Error(
        "tensor %s.%s has shape %s: not one scale, one per output row, or blocks of "
        "quantization_config.weight_block_size (absent)",
        prefix.c_str(), scale_name, HfShape(scale->desc).c_str());
  }
  PETREL_ASSIGN_OR_RETURN(const std::vector<float> scales, ReadFloats(*scale));
  const int64_t scale_cols = CeilDiv(n_in, block_in);
  TensorView out{TensorDesc::Make(DType::kF32, {n_in, n_out}), nullptr, 0};
  std::vector<float>& buffer = owned.emplace_back(size_t(n_in * n_out));
  out.data = buffer.data();
  const std::array<float, 256>& table = F8E4M3Table();
  const uint8_t* bytes = static_cast<const uint8_t*>(weight.data);
  ParallelTiles(size_t(n_out), [&](size_t begin, size_t end) {
    for (size_t o = begin; o < end; ++o) {
      const float* row_scales = scales.data() + size_t(int64_t(o) / block_out * scale_cols);
      const uint8_t* src = bytes + o * size_t(n_in);
      float* dst = buffer.data() + o * size_t(n_in);
      for (int64_t i0 = 0; i0 < n_in; i0 += block_in) {
        const float s = row_scales[i0 / block_in];
        const int64_t i1 = std::min(n_in, i0 + block_in);
        for (int64_t i = i0; i < i1; ++i) dst[i] = table[src[i]] * s;
      }
    }
  });
  ++stats_.f32_matrices;
  stats_.f32_bytes += out.desc.bytes();
  return out;
}

}  // namespace petrel
