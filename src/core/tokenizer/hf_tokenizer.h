// The Hugging Face tokenizer.json pipeline (internal): added tokens, normalizers,
// pre-tokenizers, model, post-processor and decoders, each as a flat list of data-driven steps.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/tokenizer/bpe.h"
#include "core/tokenizer/pretokenizers.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"
#include "core/tokenizer/wordpiece.h"

namespace petrel::tok {

struct HfAddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

enum class HfNormalizerKind {
  kPrepend,
  kReplace,
  kNfc,
  kNfd,
  kNfkc,
  kNfkd,
  kLowercase,
  kStrip,
  kStripAccents,
  kBert
};
struct HfNormalizer {
  HfNormalizerKind kind;
  std::string pattern;           // kPrepend: the prefix; kReplace: literal pattern
  std::string content;           // kReplace: the replacement
  std::unique_ptr<Regex> regex;  // kReplace with a regex pattern
  bool strip_left = false;       // kStrip
  bool strip_right = false;
  BertNormalizeOptions bert;
};

enum class HfPreTokenizerKind { kByteLevel, kMetaspace, kSplit, kBert, kWhitespaceSplit };
enum class PrependScheme { kAlways, kFirst, kNever };
struct HfPreTokenizer {
  HfPreTokenizerKind kind;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;             // kMetaspace: split on the replacement
  std::unique_ptr<Regex> regex;  // kByteLevel (null: no regex), kSplit
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

enum class HfModelKind { kBpe, kWordPiece, kWordLevel };
struct HfModel {
  HfModelKind kind = HfModelKind::kBpe;
  BpeMerges merges;
  CharPairSet joinable;  // character pairs inside merge results: where a piece may split
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
  std::string continuing_subword_prefix;  // BPE and WordPiece ("##")
  std::string end_of_word_suffix;
  size_t max_input_chars_per_word = 100;
};

enum class HfDecoderKind {
  kReplace,
  kByteFallback,
  kFuse,
  kStrip,
  kByteLevel,
  kMetaspace,
  kWordPiece,
  kBpeSuffix
};
struct HfDecoder {
  HfDecoderKind kind;
  std::string pattern;  // kReplace literal; kStrip content; kMetaspace replacement; prefix/suffix
  std::string content;  // kReplace
  std::unique_ptr<Regex> regex;
  size_t strip_start = 0;
  size_t strip_stop = 0;
  bool prepend = true;   // kMetaspace: prepend_scheme != never
  bool cleanup = false;  // kWordPiece
};

class HfTokenizer final : public Tokenizer {
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
  friend class HfJsonLoader;
  struct Segment {
    size_t begin;
    size_t end;
    int32_t token;  // added token id, or -1 for text
  };
  // Added tokens marked special are not matched inside `plain_spans`.
  std::vector<Segment> SplitAdded(std::string_view text, const TokenTrie& trie,
                                  const std::vector<TextSpan>& plain_spans = {}) const;
  std::string Normalize(std::string_view text) const;
  std::vector<std::string> PreTokenize(std::string_view text, bool at_start) const;
  void ModelTokenize(std::string_view piece, std::vector<int32_t>* out) const;
  void BpeTokenize(std::string_view piece, std::vector<int32_t>* out) const;

  Vocab vocab_;                      // model vocab overlaid with the added tokens
  std::vector<HfAddedToken> added_;  // indexed by the trie values
  std::vector<bool> special_;        // (n_vocab) added tokens marked special
  TokenTrie raw_trie_;               // added tokens with normalized = false
  TokenTrie normalized_trie_;        // the others, by their normalized content
  std::vector<HfNormalizer> normalizers_;
  std::vector<HfPreTokenizer> pre_tokenizers_;
  HfModel model_;
  std::vector<int32_t> post_prefix_;  // ids the post-processor puts before / after the sequence
  std::vector<int32_t> post_suffix_;
  std::vector<HfDecoder> decoders_;
  bool has_decoder_ = false;
  bool clean_up_spaces_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::unordered_set<int32_t> eog_ids_;
};

// Parses tokenizer.json (+ optional tokenizer_config.json / generation_config.json texts).
Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(std::string_view tokenizer_json,
                                                   std::string_view config_json,
                                                   std::string_view generation_json);

}  // namespace petrel::tok
