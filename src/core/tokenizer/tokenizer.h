// Public tokenizer API: text <-> token ids for SPM, byte-level BPE and WordPiece vocabularies,
// built from GGUF metadata (llama.cpp conventions) or a Hugging Face tokenizer.json folder.
//
// Semantics worth knowing:
// - Invalid UTF-8 in the input never fails: each byte that does not start a valid sequence is
//   replaced by U+FFFD before tokenization (so it tokenizes like the text "\xEF\xBF\xBD").
// - FromHfFolder reproduces Hugging Face `tokenizer.encode(text)`: added tokens are matched as HF
//   matches them (their `normalized`/`lstrip`/`rstrip`/`single_word` flags), whatever
//   `EncodeOptions::parse_special` says. `add_special` selects the post-processor (BOS/CLS...).
// - FromGguf reproduces llama.cpp: CONTROL/UNKNOWN token text in the input is plain text unless
//   `parse_special`; USER_DEFINED tokens are always matched as whole pieces.
// - Decode skips special tokens when asked and returns valid UTF-8 (bytes that do not form a
//   character become U+FFFD, one per byte).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace petrel {

class GgufFile;

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

struct EncodeOptions {
  bool add_special = true;     // BOS/EOS per the model's post-processor / add_bos flags
  bool parse_special = false;  // match special/control tokens spelled in the text (GGUF only)
  // Ranges of the text (ascending, disjoint) in which special tokens are not matched, whatever
  // parse_special says: what a user wrote, inside a rendered chat template, stays text.
  std::vector<TextSpan> plain_spans;
};

// Whether [begin, end) overlaps one of `spans` (ascending, disjoint).
bool OverlapsSpan(const std::vector<TextSpan>& spans, size_t begin, size_t end);

class Tokenizer {
 public:
  virtual ~Tokenizer();

  // From the `tokenizer.ggml.*` keys (models "llama", "gpt2", "bert").
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  // From `folder/tokenizer.json` (+ `tokenizer_config.json`, `generation_config.json` if present).
  static Result<std::unique_ptr<Tokenizer>> FromHfFolder(const std::string& folder);
  // From the text of a tokenizer.json (and optionally tokenizer_config.json); for tests and tools.
  static Result<std::unique_ptr<Tokenizer>> FromHfJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json = {},
      std::string_view generation_config_json = {});

  virtual std::vector<int32_t> Encode(std::string_view text,
                                      const EncodeOptions& options = {}) const = 0;
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;
  virtual std::string_view TokenText(int32_t id) const = 0;  // the raw vocab piece ("" if none)
  // The bytes the token adds to generated text in the middle of it: byte tokens as their one
  // byte (possibly part of a character), word-start markers as spaces, no leading-space
  // stripping, special tokens as "". What constrained decoding matches against.
  virtual std::string TokenBytes(int32_t id) const = 0;
  virtual size_t n_vocab() const = 0;
  virtual int32_t bos_id() const = 0;                    // -1 if none
  virtual int32_t eos_id() const = 0;                    // -1 if none
  virtual bool IsEndOfGeneration(int32_t id) const = 0;  // eos, eot, eom...
  virtual bool IsSpecial(int32_t id) const = 0;
};

// Streaming detokenizer: feed ids one at a time and get the text that is now final. Never returns
// a partial UTF-8 sequence; the concatenation of every Push() and the final Flush() equals
// `Decode(all ids)` (leading-space stripping included, applied once at the start). It keeps a
// short window of recent ids and decodes it as a whole (the Hugging Face DecodeStream method), so
// it is correct for every decoder pipeline, not only per-token ones.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string Push(int32_t id);
  std::string Flush();  // whatever is still held back (e.g. an incomplete character), then resets
  void Reset();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> window_;  // ids since the last emission, plus the context before them
  std::string prefix_;           // Decode(window_[0, prefix_ids_))
  size_t prefix_ids_ = 0;
};

}  // namespace petrel
