// GGUF v3 writer: metadata of every type, tensors streamed from callbacks (so a 2 GB synthetic
// model never sits in memory), padding to the alignment. Used by `petrel synth`, `quantize`, tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "core/base/status.h"
#include "core/base/tensor.h"

namespace petrel {

class GgufWriter {
 public:
  // Scalars.
  void SetU8(const std::string& key, uint8_t v);
  void SetI8(const std::string& key, int8_t v);
  void SetU16(const std::string& key, uint16_t v);
  void SetI16(const std::string& key, int16_t v);
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetU64(const std::string& key, uint64_t v);
  void SetI64(const std::string& key, int64_t v);
  void SetF32(const std::string& key, float v);
  void SetF64(const std::string& key, double v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  // Arrays.
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetF32Array(const std::string& key, const std::vector<float>& v);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& v);
  // Copies one metadata value (any type, arrays included) from another file: used to carry a
  // real vocabulary into a synthetic model.
  void CopyValue(const std::string& key, const GgufValue& value);

  // Tensor data is produced on demand at Write() time into a buffer of desc.bytes() bytes.
  using FillFn = std::function<void(void* dst)>;
  void AddTensor(const std::string& name, const TensorDesc& desc, FillFn fill);

  void SetAlignment(uint32_t alignment);  // also written as general.alignment (u32)
  void SetVersion(uint32_t version);       // 2 or 3 (default 3)

  // Called after each tensor's data is written, with counts so far and in all (tensor data
  // bytes, padding excluded), for progress displays.
  using ProgressFn = std::function<void(size_t tensors_done, size_t n_tensors, uint64_t bytes_done,
                                        uint64_t bytes_total)>;
  void SetProgress(ProgressFn progress) { progress_ = std::move(progress); }

  // Writes through AtomicFile: on any error `path` is left as it was.
  Status Write(const std::string& path) const;
  std::vector<uint8_t> WriteToMemory() const;  // for tests that corrupt bytes

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // type id + payload, already serialized
  };
  struct PendingTensor {
    std::string name;
    TensorDesc desc;
    FillFn fill;
  };
  void SetEncoded(const std::string& key, std::vector<uint8_t> encoded);
  template <typename Sink>
  void Emit(Sink& sink) const;

  std::vector<Entry> entries_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
  uint32_t version_ = 3;
  ProgressFn progress_;
};

}  // namespace petrel
