// WordPiece: BERT's basic pre-tokenization and the greedy longest-match-first word splitter.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/vocab.h"

namespace petrel::tok {

struct BertNormalizeOptions {
  bool clean_text = true;            // drop NUL, U+FFFD and control chars; whitespace -> ' '
  bool handle_chinese_chars = true;  // surround CJK ideographs with spaces
  bool strip_accents = true;
  bool lowercase = true;
};
// Hugging Face BertNormalizer.
std::string BertNormalize(std::string_view text, const BertNormalizeOptions& options);
// Hugging Face BertPreTokenizer: split on whitespace (dropped) and punctuation (kept, one char
// each). Returns views into `text`.
std::vector<std::string_view> BertPreTokenize(std::string_view text);

// Greedy longest-match-first WordPiece of one word. The first piece is looked up as
// `word_prefix + text`, later ones as `continuation_prefix + text` (HF: "" and "##"; llama.cpp's
// GGUF vocab: U+2581 and ""). A word that cannot be covered, or has more than
// `max_chars_per_word` characters, becomes `unk_id`.
void WordPieceTokenize(std::string_view word, const Vocab& vocab, std::string_view word_prefix,
                       std::string_view continuation_prefix, size_t max_chars_per_word,
                       int32_t unk_id, std::vector<int32_t>* out);

}  // namespace petrel::tok
