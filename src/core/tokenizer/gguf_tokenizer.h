// The llama.cpp-compatible tokenizer built from GGUF `tokenizer.ggml.*` metadata (internal):
// SPM ("llama"), byte-level BPE ("gpt2") and WordPiece ("bert").
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/tokenizer/bpe.h"
#include "core/tokenizer/pretokenizers.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"

namespace petrel::tok {

enum class GgufModel { kSpm, kBpe, kWordPiece };

class GgufTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const override;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  std::string_view TokenText(int32_t id) const override;
  std::string TokenBytes(int32_t id) const override;
  size_t n_vocab() const override { return vocab_.size(); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool IsEndOfGeneration(int32_t id) const override { return eog_ids_.count(id) != 0; }
  bool IsSpecial(int32_t id) const override;

 private:
  friend Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file);
  struct Fragment {
    size_t begin;
    size_t end;
    int32_t token;  // -1 for raw text
  };
  // One token's bytes, as Decode() joins them.
  void AppendTokenBytes(int32_t id, bool skip_special, std::string* out) const;
  std::vector<Fragment> Partition(std::string_view text, bool parse_special,
                                  const std::vector<TextSpan>& plain_spans) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeWordPiece(std::string_view text, std::vector<int32_t>* out) const;

  GgufModel model_ = GgufModel::kSpm;
  Vocab vocab_;
  std::vector<bool> mergeable_;              // (n_vocab) SPM: may result from a merge
  CharPairSet joinable_;                     // SPM: character pairs inside mergeable pieces
  std::vector<int32_t> specials_by_length_;  // CONTROL / USER_DEFINED / UNKNOWN, longest first
  // The distinct texts of `specials_by_length_`: `special_text_[i]` numbers the text of entry i,
  // the trie maps each text to its number. Partition() uses them to skip the specials that do
  // not occur in a text, so that its cost does not grow with the number of special tokens.
  std::vector<int32_t> special_text_;
  TokenTrie special_trie_;
  size_t n_special_texts_ = 0;
  BpeMerges merges_;
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
  bool add_space_prefix_ = false;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_sep_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  int32_t sep_id_ = -1;
  std::unordered_set<int32_t> eog_ids_;
};

Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file);

}  // namespace petrel::tok
