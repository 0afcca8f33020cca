// The engine calls a leading pipeline stage records and the other stages replay
// (EngineOptions::pipeline_calls = kFirstStageLeads): every call that changes the sequences or
// the KV cache, and every forward pass, in the order the first stage made them. The KV cache's
// decisions (which blocks a sequence gets, what the prefix cache keeps or evicts, which
// sequence id comes next) are a function of that order alone, so a stage that replays the
// calls holds the same block tables as the first stage without being told any decision.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/base/status.h"

namespace petrel {

enum class EngineCall : uint8_t {
  kNewSequence,           // result
  kFreeSequence,          // seq
  kForkSequence,          // seq, result (-1: failed)
  kTruncateSequence,      // seq, length
  kSetSequenceLora,       // seq, scales
  kNewSequenceFromCache,  // tokens, scales, result
  kCacheSequenceBlocks,   // seq, tokens
  kStep,                  // n inputs, each: seq, want_logits, tokens
  kDecode,                // tokens, positions, seq ids, want_logits, hidden_output
  kStop,                  // the leader is done: the followers return
  kCount,
};

// Appends calls to a byte buffer: each is its EngineCall byte, then its fields, integers as
// int64 and arrays as a count and their elements.
class CallWriter {
 public:
  void Call(EngineCall call) { bytes_.push_back(uint8_t(call)); }
  void Int(int64_t value) { Put(&value, sizeof(value)); }
  template <typename T>
  void Array(std::span<const T> values) {
    Int(int64_t(values.size()));
    Put(values.data(), values.size_bytes());
  }
  bool empty() const { return bytes_.empty(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  void Clear() { bytes_.clear(); }

 private:
  void Put(const void* data, size_t n_bytes) {
    const size_t at = bytes_.size();
    bytes_.resize(at + n_bytes);
    if (n_bytes) std::memcpy(bytes_.data() + at, data, n_bytes);
  }
  std::vector<uint8_t> bytes_;
};

// Reads what a CallWriter wrote. A short or malformed buffer sets an error (ok() false) and
// reads zeros from then on, so that the caller checks once per call.
class CallReader {
 public:
  explicit CallReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool done() const { return at_ >= bytes_.size() || !ok_; }
  bool ok() const { return ok_; }
  EngineCall Call() {
    uint8_t call = 0;
    Get(&call, 1);
    if (call >= uint8_t(EngineCall::kCount)) ok_ = false;
    return ok_ ? EngineCall(call) : EngineCall::kStop;
  }
  int64_t Int() {
    int64_t value = 0;
    Get(&value, sizeof(value));
    return value;
  }
  template <typename T>
  std::vector<T> Array() {
    const int64_t n = Int();
    if (n < 0 || size_t(n) > (bytes_.size() - at_) / sizeof(T)) {
      ok_ = false;
      return {};
    }
    std::vector<T> values(static_cast<size_t>(n));
    Get(values.data(), size_t(n) * sizeof(T));
    return values;
  }

 private:
  void Get(void* out, size_t n_bytes) {
    if (!ok_ || n_bytes > bytes_.size() - at_) {
      ok_ = false;
      std::memset(out, 0, n_bytes);
      return;
    }
    if (n_bytes) std::memcpy(out, bytes_.data() + at_, n_bytes);
    at_ += n_bytes;
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace petrel
