// The file `petrel perplexity --kl-divergence-base` writes: a base model's distributions at every
// scored position of a text, so that other models (quantized ones) can be compared with it
// later without loading the base model again.
//
// Layout (little-endian), version 1:
//   header, 40 bytes:
//     char     magic[8]     "PTRLKLD\0"
//     uint32   version      1
//     uint32   n_vocab      logits per position
//     uint32   n_ctx        window (-c) the positions were scored in
//     uint32   n_chunks     windows; the scored positions of each follow ChunkPlan (perplexity.h)
//     uint64   vocab_hash   FNV-1a of the vocabulary's token texts (HashVocabulary)
//     uint64   reserved     0
//   tokens:  int32[n_chunks × n_ctx]  each window's tokens as evaluated (BOS already in place)
//   records: one per scored position, window by window, 12 + 2 × n_vocab bytes each:
//     float32  target_log_prob  the base log-probability of the text's next token (exact)
//     int32    argmax           the base model's most likely token (exact)
//     float32  low              the smallest log-probability of the row (≤ 0)
//     uint16   code[n_vocab]    log p = low × (1 − code / 65535): 16 bits spread evenly over
//                               [low, 0], so the step is |low| / 65535 (≈ 4e-4 nats for
//                               |low| = 25)
//
// Why 16 bits: a float32 row would double the size for no visible change in the figures. The
// step's error e in a log-probability moves the KL divergence by about Σ p·e·(log p − log q),
// far below the divergence of any quantization worth measuring, and the rows are renormalised
// on reading. The exact target log-probability and argmax keep the base perplexity and the
// top-token agreement free of that rounding. The size is still 2 × n_vocab bytes per scored
// token (256 KiB at a 128k vocabulary), so BaseFileBytes lets the command check the free space
// before it starts.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/eval/perplexity.h"
#include "core/format/atomic_file.h"

namespace petrel {

struct KldBaseHeader {
  uint32_t n_vocab = 0;
  uint32_t n_ctx = 0;
  uint32_t n_chunks = 0;
  uint64_t vocab_hash = 0;
};

// FNV-1a (64-bit) over each token text followed by a 0xFF byte (never part of UTF-8, so no two
// vocabularies share a byte stream): the same tokenizer gives the same hash.
uint64_t HashVocabulary(size_t n_vocab, const std::function<std::string_view(int32_t)>& text);

// Bytes of a base file for this header (UINT64_MAX when that does not fit: a corrupt header).
uint64_t BaseFileBytes(const KldBaseHeader& header);

// One scored position, decoded.
struct KldBaseRecord {
  double target_log_prob = 0;
  int32_t argmax = 0;
  std::vector<float> log_probs;  // n_vocab, renormalised
};

class KldBaseWriter {
 public:
  // Writes the header and the tokens (n_chunks × n_ctx of them) to `file`, which the caller
  // opened before the work so that an unwritable destination fails early.
  static Result<KldBaseWriter> Begin(AtomicFile file, const KldBaseHeader& header,
                                     std::span<const int32_t> tokens);
  // One scored position: the base model's raw logits and the text's next token.
  void Add(std::span<const float> logits, int32_t token);
  // Fails unless exactly the header's number of positions was added.
  Status Commit();

 private:
  explicit KldBaseWriter(AtomicFile file) : file_(std::move(file)) {}
  AtomicFile file_;
  KldBaseHeader header_;
  uint64_t expected_records_ = 0;
  uint64_t records_ = 0;
  std::vector<float> log_probs_;
  std::vector<uint8_t> record_;
};

class KldBaseReader {
 public:
  // Checks the magic, version, header values and that the size is exactly what they describe.
  static Result<KldBaseReader> Open(const std::string& path);
  KldBaseReader(KldBaseReader&& other) noexcept;
  KldBaseReader& operator=(KldBaseReader&&) = delete;
  ~KldBaseReader();

  const KldBaseHeader& header() const { return header_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const ChunkPlan& plan() const { return plan_; }
  // The next scored position, in order.
  Status Next(KldBaseRecord* record);

 private:
  KldBaseReader() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  KldBaseHeader header_;
  ChunkPlan plan_;
  std::vector<int32_t> tokens_;
  uint64_t records_left_ = 0;
  std::vector<uint8_t> record_;
};

}  // namespace petrel
